/* Finite-difference gradient checks for every layer type, plus the gradient conventions of
 * core/layer.h: parameter gradients +=, input gradients =, a NULL din skips that input,
 * a recompute forward reproduces the output and leaves running statistics alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/layers/grad_cases.h"
#include "tests/layers/selftest_layer.h"

#define SENTINEL 777.0f

static char missing[512];
static int quiet; /* the self-tests expect failures and do not print them */
#define SAY(...) (quiet ? (void)0 : (void)printf(__VA_ARGS__))
static double case_fd_err; /* worst finite-difference error of the current case */

static void note_missing(const char *type) {
  char key[64];
  snprintf(key, sizeof key, " %s,", type);
  if (strstr(missing, key)) return;
  strncat(missing, key, sizeof missing - strlen(missing) - 1);
}

static float *dup_floats(const float *p, int64_t n) {
  float *d = calloc((size_t)(n ? n : 1), sizeof *d);
  if (d && n) memcpy(d, p, (size_t)n * sizeof *d);
  return d;
}

static int check_cost(const lt_layer *t, const char *name) {
  if (!t->l.type->cost) {
    SAY("  FAIL %s: no cost function\n", name);
    return 0;
  }
  gp_cost c;
  memset(&c, 0, sizeof c);
  t->l.type->cost(&t->l, &c);
  int64_t params = 0;
  for (int i = 0; i < t->l.n_params; i++)
    if (t->l.pdesc[i].trainable) params += lt_param_numel(t, i);
  int64_t ob = gp_shape_numel(&t->l.out_shape) * (int64_t)gp_dtype_size(t->l.out_dtype);
  int ok = 1;
  if (c.params != params) {
    SAY("  FAIL %s: cost says %lld parameters, the descriptions hold %lld\n", name,
        (long long)c.params, (long long)params);
    ok = 0;
  }
  if (c.out_bytes != ob) {
    SAY("  FAIL %s: cost says %lld output bytes per sample, the shape gives %lld\n", name,
        (long long)c.out_bytes, (long long)ob);
    ok = 0;
  }
  if (!(c.fwd_flops >= 0) || !(c.bwd_flops >= 0) || c.saved_bytes < 0) {
    SAY("  FAIL %s: negative or NaN cost\n", name);
    ok = 0;
  }
  return ok;
}

/* Initial values follow PyTorch's defaults: conv and linear U(-b, b) with b = 1/sqrt(fan_in)
 * where fan_in = weight elements / output channels; norms weight 1, bias 0; running mean 0
 * and variance 1; init: normal's weight within 6 std of 0 and its bias 0. */
static int check_init(const lt_layer *t, const char *name) {
  const char *ty = t->l.type->name;
  int w = lt_param_index(t, "weight"), ok = 1;
  int is_norm =
      strcmp(ty, "batchnorm") == 0 || strcmp(ty, "layernorm") == 0 || strcmp(ty, "rmsnorm") == 0;
  int is_fan = strcmp(ty, "conv2d") == 0 || strcmp(ty, "linear") == 0;
  /* init: normal (GPT-2's, Llama's): weight N(0, std^2), bias 0 */
  int is_std = is_fan && w >= 0 && t->l.pdesc[w].init == GP_INIT_NORMAL_STD;
  if (is_std) is_fan = 0;
  for (int i = 0; i < t->l.n_params; i++) {
    const gp_param_desc *p = &t->l.pdesc[i];
    const float *v = t->b.param[i];
    int64_t n = lt_param_numel(t, i);
    double want = -1, lo = 0, hi = 0, vmax = 0;
    if (strcmp(p->name, "running_var") == 0 || (is_norm && strcmp(p->name, "weight") == 0))
      want = 1;
    else if (strcmp(p->name, "running_mean") == 0 ||
             ((is_norm || is_std) && strcmp(p->name, "bias") == 0))
      want = 0;
    for (int64_t j = 0; j < n; j++) {
      if (want >= 0 && v[j] != want) {
        SAY("  FAIL %s: initial %s[%lld] = %g, PyTorch's default is %g\n", name, p->name,
            (long long)j, v[j], want);
        ok = 0;
        break;
      }
      vmax = fmax(vmax, fabs(v[j]));
    }
    if (is_std && i == w && (vmax > 6.0 * p->std || vmax == 0.0)) {
      SAY("  FAIL %s: %s of N(0, %g^2) has max |value| %g\n", name, p->name, p->std, vmax);
      ok = 0;
    }
    if (!is_fan || w < 0) continue;
    int64_t fan = lt_param_numel(t, w) / t->l.pdesc[w].shape.d[0];
    double b = 1.0 / sqrt((double)fan);
    lo = 0.5 * b; /* the largest of >= 4 uniform draws is below b/2 with chance <= 1/16 */
    hi = b * (1 + lt_tol_get(LT_TOL_INIT_BOUND)->rtol);
    if (p->fan_in != fan || vmax > hi || (n >= 4 && vmax < lo)) {
      SAY("  FAIL %s: %s has fan_in %lld (want %lld) and max |value| %g (want <= %g)\n", name,
          p->name, (long long)p->fan_in, (long long)fan, vmax, b);
      ok = 0;
    }
  }
  return ok;
}

/* A loss layer counts the batch and its correct predictions in a normal forward, and
 * nothing (no loss either) in a recompute one, which sees the same micro-batch again. */
static int check_loss_counts(const lt_layer *t, const grad_case *c, int recompute) {
  if (!c->labels_k) return 1;
  /* one label per position: the classes along `axis:` (stride post), the last by default */
  const gp_shape *zs = &t->l.in_shape[0];
  const char *ax = strstr(c->yaml, "axis:");
  int axis = ax ? atoi(ax + 5) : -1;
  if (axis < 0) axis += zs->ndim;
  int64_t n = gp_shape_numel(&t->in[1].shape), k = gp_shape_numel(&t->in[0].shape) / n, post = 1,
          correct = 0;
  for (int d = axis + 1; d < zs->ndim; d++)
    post *= zs->d[d];
  const float *z = GP_F32P(&t->in[0]);
  for (int64_t i = 0; i < n; i++) {
    const int64_t base = (i / post) * k * post + i % post;
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++)
      if (z[base + j * post] > z[base + best * post]) best = j;
    correct += best == GP_I32P(&t->in[1])[i];
  }
  int64_t want_counted = recompute ? 0 : n, want_correct = recompute ? 0 : correct;
  if (t->e.counted != want_counted || t->e.correct != want_correct ||
      (recompute && t->e.loss_sum != 0.0)) {
    SAY("  FAIL %s: %s forward counted %lld, correct %lld, loss_sum %g; want %lld, %lld%s\n",
        c->name, recompute ? "a recompute" : "a normal", (long long)t->e.counted,
        (long long)t->e.correct, t->e.loss_sum, (long long)want_counted, (long long)want_correct,
        recompute ? ", 0" : "");
    return 0;
  }
  return 1;
}

/* Runs one case; returns the number of failed checks (0 = pass), -1 when the type is not
 * registered. */
static int run_case(gp_backend *be, const grad_case *c, const gp_layer_type *type, uint64_t seed) {
  lt_layer t;
  gp_dtype dt[4] = {GP_F32, GP_F32, GP_F32, GP_F32};
  if (c->labels_k) dt[c->n_in - 1] = GP_I32;
  for (int i = 0; i < c->n_in; i++)
    if (strchr("imzsp", lt_kind_of(c, i))) dt[i] = GP_I32;
  int is_loss = c->labels_k > 0;
  gp_status s = lt_layer_build_as(&t, type, be, c->yaml, c->n_in, c->in, dt, c->batch);
  if (s == GP_ERR_UNSUPPORTED) {
    lt_layer_free(&t);
    return -1;
  }
  int fails = 0;
  char what[160];
  float *y0 = NULL, *st0 = NULL, *din1[4] = {0}, *g1[GP_MAX_PARAMS] = {0};
  if (s != GP_OK) {
    SAY("  FAIL %s: build: %s\n", c->name, gp_error_message());
    fails++;
    goto done;
  }
  is_loss |= t.l.type->is_loss; /* a loss of f32 targets (mse) takes no labels */
  fails += !check_cost(&t, c->name);
  fails += !check_init(&t, c->name);
  lt_fill_case(&t, c, seed);
  int64_t ny = gp_shape_numel(&t.out.shape);
  if (is_loss)
    for (int64_t i = 0; i < ny; i++)
      GP_F32P(&t.dout)[i] = 1.0f;
  else
    lt_fill_uniform(seed + 50, GP_F32P(&t.dout), ny, -1.0f, 1.0f);
  t.e.training = !c->eval;
  int64_t nst = t.b.stats ? t.l.type->stats_floats(&t.l) : 0;

  /* A normal forward, then a recompute one: same output, statistics untouched. */
  t.e.recompute = 0;
  if (lt_forward(&t) != GP_OK) goto fail_status;
  y0 = dup_floats(GP_F32P(&t.out), ny);
  st0 = dup_floats(t.b.stats, nst);
  fails += !check_loss_counts(&t, c, 0);
  t.e.recompute = 1;
  if (lt_forward(&t) != GP_OK) goto fail_status;
  fails += !check_loss_counts(&t, c, 1);
  snprintf(what, sizeof what, "%s: recompute forward output", c->name);
  fails += !lt_compare_f(what, GP_F32P(&t.out), y0, ny, LT_TOL_EXACT, NULL);
  if (nst) {
    snprintf(what, sizeof what, "%s: statistics after a recompute forward", c->name);
    fails += !lt_compare_f(what, t.b.stats, st0, nst, LT_TOL_EXACT, NULL);
  }

  /* Backward twice: input grads are written (a sentinel must vanish, the second pass gives
   * the same values), parameter grads add up to exactly twice. */
  for (int i = 0; i < t.l.n_in; i++)
    if (t.din[i].data)
      for (int64_t j = 0; j < gp_shape_numel(&t.din[i].shape); j++)
        GP_F32P(&t.din[i])[j] = SENTINEL;
  if (lt_backward(&t) != GP_OK) goto fail_status;
  for (int i = 0; i < t.l.n_in; i++)
    if (t.din[i].data) din1[i] = dup_floats(GP_F32P(&t.din[i]), gp_shape_numel(&t.din[i].shape));
  for (int i = 0; i < t.l.n_params; i++)
    if (t.b.grad[i]) g1[i] = dup_floats(t.b.grad[i], lt_param_numel(&t, i));
  if (lt_backward(&t) != GP_OK) goto fail_status;
  for (int i = 0; i < t.l.n_in; i++) {
    if (!din1[i]) continue;
    snprintf(what, sizeof what, "%s: dx%d of a second backward (must be =, not +=)", c->name, i);
    fails += !lt_compare_f(what, GP_F32P(&t.din[i]), din1[i], gp_shape_numel(&t.din[i].shape),
                           LT_TOL_EXACT, NULL);
  }
  for (int i = 0; i < t.l.n_params; i++) {
    if (!g1[i]) continue;
    int64_t n = lt_param_numel(&t, i);
    double *two = malloc((size_t)n * sizeof *two);
    for (int64_t j = 0; j < n; j++)
      two[j] = 2.0 * g1[i][j];
    snprintf(what, sizeof what, "%s: grad.%s after two backwards (must be +=)", c->name,
             t.l.pdesc[i].name);
    fails += !lt_compare(what, t.b.grad[i], two, n, LT_TOL_ACCUM, NULL);
    free(two);
  }

  /* A NULL din[0]: that buffer is left alone, the other inputs still get theirs. */
  if (t.din[0].data) {
    float *keep = t.din[0].data;
    int64_t n0 = gp_shape_numel(&t.din[0].shape);
    for (int64_t j = 0; j < n0; j++)
      keep[j] = SENTINEL;
    t.din[0].data = NULL;
    s = lt_backward(&t);
    t.din[0].data = keep;
    if (s != GP_OK) goto fail_status;
    int untouched = 1;
    for (int64_t j = 0; j < n0; j++)
      untouched &= keep[j] == SENTINEL;
    if (!untouched) {
      SAY("  FAIL %s: backward wrote dx0 although din[0].data was NULL\n", c->name);
      fails++;
    }
    for (int i = 1; i < t.l.n_in; i++) {
      if (!din1[i]) continue;
      snprintf(what, sizeof what, "%s: dx%d with din[0] skipped", c->name, i);
      fails += !lt_compare_f(what, GP_F32P(&t.din[i]), din1[i], gp_shape_numel(&t.din[i].shape),
                             LT_TOL_EXACT, NULL);
    }
  }

  /* Finite differences of every f32 input and every trainable parameter. Normal forwards:
   * a recompute one adds no loss (the loss objective), and statistics do not change a
   * training-mode output. */
  t.e.recompute = 0;
  for (int i = 0; i < t.l.n_in; i++) {
    if (!din1[i]) continue;
    int64_t n = gp_shape_numel(&t.in[i].shape);
    if (lt_kind_of(c, i) == 'g') { /* a mask: constant almost everywhere */
      double *zero = calloc((size_t)n, sizeof *zero);
      snprintf(what, sizeof what, "%s: dx%d of a mask (must be 0)", c->name, i);
      fails += !lt_compare(what, din1[i], zero, n, LT_TOL_EXACT, NULL);
      free(zero);
      continue;
    }
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t j = 0; j < n && s == GP_OK; j++)
      s = lt_fd_at(&t, &GP_F32P(&t.in[i])[j], is_loss, &fd[j]);
    if (s == GP_OK) {
      snprintf(what, sizeof what, "%s: dx%d vs finite differences", c->name, i);
      double e;
      fails += !lt_compare(what, din1[i], fd, n, c->tol, &e);
      case_fd_err = fmax(case_fd_err, e);
    }
    free(fd);
    if (s != GP_OK) goto fail_status;
  }
  for (int i = 0; i < t.l.n_params; i++) {
    if (!g1[i]) continue;
    int64_t n = lt_param_numel(&t, i);
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t j = 0; j < n && s == GP_OK; j++)
      s = lt_fd_at(&t, &t.b.param[i][j], is_loss, &fd[j]);
    if (s == GP_OK) {
      snprintf(what, sizeof what, "%s: grad.%s vs finite differences", c->name, t.l.pdesc[i].name);
      double e;
      fails += !lt_compare(what, g1[i], fd, n, c->tol, &e);
      case_fd_err = fmax(case_fd_err, e);
    }
    free(fd);
    if (s != GP_OK) goto fail_status;
  }
  goto done;

fail_status:
  SAY("  FAIL %s: %s (%s)\n", c->name, gp_error_message(), gp_error_origin());
  fails++;
done:
  free(y0);
  free(st0);
  for (int i = 0; i < 4; i++)
    free(din1[i]);
  for (int i = 0; i < GP_MAX_PARAMS; i++)
    free(g1[i]);
  lt_layer_free(&t);
  return fails;
}

/* GPipe's batch norm: running statistics move once per mini-batch by the statistics of the
 * whole mini-batch, pooled from its micro-batches (unbiased variance, as PyTorch): the spread
 * between the two micro-batches' means counts. A recompute forward or an evaluation forward
 * adds nothing, and a step with nothing accumulated changes nothing. */
static int check_batchnorm_micro(gp_backend *be) {
  enum { N = 3, C = 2, INNER = 4 };
  const double momentum = 0.1;
  gp_shape shp = {3, {C, 2, 2}};
  lt_layer t;
  int fails = 0;
  gp_status s = lt_layer_build(&t, be, "{type: batchnorm, momentum: 0.1}", 1, &shp, NULL, N);
  if (s != GP_OK) {
    printf("FAIL batchnorm micro-batches: build: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  int im = lt_param_index(&t, "running_mean"), iv = lt_param_index(&t, "running_var");
  if (im < 0 || iv < 0 || !t.l.type->step_end) {
    printf("FAIL batchnorm micro-batches: no running_mean/running_var or no step_end\n");
    lt_layer_free(&t);
    return 1;
  }
  float *rm = t.b.param[im], *rv = t.b.param[iv], *x = GP_F32P(&t.in[0]);
  float xs[2][N * C * INNER];
  double want_m[C], want_v[C], rm0[C], rv0[C];
  for (int c = 0; c < C; c++) {
    rm[c] = 0.2f * (float)c - 0.1f;
    rv[c] = 0.8f + 0.3f * (float)c;
    rm0[c] = rm[c];
    rv0[c] = rv[c];
    want_m[c] = want_v[c] = 0;
  }
  for (int m = 0; m < 2; m++)
    lt_fill_uniform(300 + (uint64_t)m, xs[m], N * C * INNER, -1.0f + (float)m, 2.0f);
  for (int c = 0; c < C; c++) {
    double sum = 0, sq = 0;
    for (int m = 0; m < 2; m++)
      for (int i = 0; i < N; i++)
        for (int j = 0; j < INNER; j++)
          sum += xs[m][(i * C + c) * INNER + j];
    double mean = sum / (2 * N * INNER);
    for (int m = 0; m < 2; m++)
      for (int i = 0; i < N; i++)
        for (int j = 0; j < INNER; j++) {
          double d = xs[m][(i * C + c) * INNER + j] - mean;
          sq += d * d;
        }
    want_m[c] = mean;
    want_v[c] = sq / (2 * N * INNER - 1);
  }
  for (int c = 0; c < C; c++) {
    want_m[c] = (1 - momentum) * rm0[c] + momentum * want_m[c];
    want_v[c] = (1 - momentum) * rv0[c] + momentum * want_v[c];
  }
  /* micro-batch 0, micro-batch 1, a recompute of 0, an evaluation forward of 1 */
  const int order[4][3] = {{0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 0, 0}}; /* x, train, recompute */
  for (int k = 0; k < 4 && s == GP_OK; k++) {
    memcpy(x, xs[order[k][0]], sizeof xs[0]);
    t.e.training = order[k][1];
    t.e.recompute = order[k][2];
    t.e.micro = order[k][0];
    s = lt_forward(&t);
  }
  if (s == GP_OK) s = t.l.type->step_end(&t.l, &t.b, be);
  if (s != GP_OK) {
    printf("FAIL batchnorm micro-batches: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  fails += !lt_compare("batchnorm running_mean after 2 micro-batches", rm, want_m, C,
                       LT_TOL_TORCH_STAT, NULL);
  fails += !lt_compare("batchnorm running_var after 2 micro-batches", rv, want_v, C,
                       LT_TOL_TORCH_STAT, NULL);
  /* nothing accumulated: the next step leaves the statistics alone */
  float keep[2 * C];
  memcpy(keep, rm, C * sizeof *rm);
  memcpy(keep + C, rv, C * sizeof *rv);
  if (t.l.type->step_end(&t.l, &t.b, be) != GP_OK) fails++;
  fails +=
      !lt_compare_f("batchnorm running_mean after an empty step", rm, keep, C, LT_TOL_EXACT, NULL);
  fails += !lt_compare_f("batchnorm running_var after an empty step", rv, keep + C, C, LT_TOL_EXACT,
                         NULL);
  printf("%s batchnorm micro-batches (the mini-batch's statistics, once per step)\n",
         fails ? "FAIL" : "ok  ");
  lt_layer_free(&t);
  return fails > 0;
}

/* One value per channel (a micro-batch of one sample of 1x1 planes) normalizes to the bias
 * alone, with no gradient for the input: refused in training, as PyTorch does; evaluation,
 * which uses the running statistics, runs. */
static int check_batchnorm_one_value(gp_backend *be) {
  gp_shape shp = {3, {2, 1, 1}};
  lt_layer t;
  if (lt_layer_build(&t, be, "{type: batchnorm}", 1, &shp, NULL, 1) != GP_OK) {
    printf("FAIL batchnorm one value: build: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  t.e.training = 1;
  gp_status s = lt_forward(&t);
  int ok = s == GP_ERR_USAGE && strstr(gp_error_message(), "one value per channel");
  t.e.training = 0;
  ok = ok && lt_forward(&t) == GP_OK;
  printf("%s batchnorm: one value per channel refused in training (%s)\n", ok ? "ok  " : "FAIL",
         s == GP_OK ? "ran" : gp_error_message());
  lt_layer_free(&t);
  return !ok;
}

/* The checks above on a layer with one deliberate bug at a time: bug none must pass, every
 * other bug must be caught. */
static int self_test(gp_backend *be, int *passed) {
  int failed = 0;
  for (int b = 0; lt_selftest_bugs[b]; b++) {
    char yaml[80];
    snprintf(yaml, sizeof yaml, "{type: selftest_scale, bug: %s}", lt_selftest_bugs[b]);
    grad_case c = {"self-test", yaml, 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR};
    quiet = 1;
    lt_set_quiet(1);
    int f = run_case(be, &c, &lt_selftest_scale, 77);
    quiet = 0;
    lt_set_quiet(0);
    int ok = b == 0 ? f == 0 : f > 0;
    printf("%s self-test: bug '%s' %s (%d checks failed)\n", ok ? "ok  " : "FAIL",
           lt_selftest_bugs[b], b == 0 ? "passes" : "is caught", f);
    failed += !ok;
    *passed += ok;
  }
  return failed;
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  int failed = lt_grad_uncovered(), passed = 0;
  for (int k = 0; k < lt_n_grad_cases; k++) {
    case_fd_err = 0;
    int f = run_case(be, &lt_grad_cases[k], NULL, 1000 + (uint64_t)k * 17);
    if (f < 0) {
      printf("MISSING %s (layer type %s is not registered)\n", lt_grad_cases[k].name,
             lt_type_of(lt_grad_cases[k].yaml));
      note_missing(lt_type_of(lt_grad_cases[k].yaml));
      continue;
    }
    printf("%s %s (max finite-difference error %.2g)\n", f ? "FAIL" : "ok  ", lt_grad_cases[k].name,
           case_fd_err);
    failed += f > 0;
    passed += f == 0;
  }
  if (gp_layer_type_find("batchnorm")) {
    int r = check_batchnorm_micro(be);
    failed += r;
    passed += !r;
    r = check_batchnorm_one_value(be);
    failed += r;
    passed += !r;
  }
  failed += self_test(be, &passed);
  gp_backend_destroy(be);
  if (missing[0]) {
    printf("FAIL: layer types not registered:%s\n", missing);
    failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
