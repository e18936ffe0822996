/* A backward's two halves (gp_grad_part, core/layer.h) for every layer type on the CPU:
 * B (input gradients) then W (parameter gradients) gives the combined backward's bytes, din
 * and parameter gradients, both onto zeroed gradients and onto non-zero ones (a second
 * micro-batch's); B leaves the parameter gradients alone and W every din; and each half
 * matches finite differences on its own: B's din in the inputs, W's in the parameters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/layers/grad_cases.h"
#include "tests/layers/selftest_layer.h"

#define SENTINEL 777.0f

static int quiet; /* the self-tests expect failures and do not print them */
#define SAY(...) (quiet ? (void)0 : (void)printf(__VA_ARGS__))

/* Copies of the gradients one backward gave: din per input, then per parameter. */
typedef struct grads {
  float *din[GP_MAX_INPUTS], *g[GP_MAX_PARAMS];
} grads;

static void grads_free(grads *r) {
  for (int i = 0; i < GP_MAX_INPUTS; i++)
    free(r->din[i]);
  for (int i = 0; i < GP_MAX_PARAMS; i++)
    free(r->g[i]);
  memset(r, 0, sizeof *r);
}

static float *dup_floats(const float *p, int64_t n) {
  float *d = malloc((size_t)(n ? n : 1) * sizeof *d);
  if (d && n) memcpy(d, p, (size_t)n * sizeof *d);
  return d;
}

static int64_t din_numel(const lt_layer *t, int i) {
  return gp_shape_numel(&t->din[i].shape);
}

static void set_din(lt_layer *t, float v) {
  for (int i = 0; i < t->l.n_in; i++)
    if (t->din[i].data)
      for (int64_t j = 0; j < din_numel(t, i); j++)
        GP_F32P(&t->din[i])[j] = v;
}

/* Parameter gradients to g0 (NULL: zero). */
static void set_grads(lt_layer *t, float *const *g0) {
  for (int i = 0; i < t->l.n_params; i++)
    if (t->b.grad[i]) {
      size_t bytes = (size_t)lt_param_numel(t, i) * sizeof(float);
      if (g0)
        memcpy(t->b.grad[i], g0[i], bytes);
      else
        memset(t->b.grad[i], 0, bytes);
    }
}

static void keep_din(const lt_layer *t, grads *r) {
  for (int i = 0; i < t->l.n_in; i++)
    if (t->din[i].data) r->din[i] = dup_floats(GP_F32P(&t->din[i]), din_numel(t, i));
}

static void keep_grads(const lt_layer *t, grads *r) {
  for (int i = 0; i < t->l.n_params; i++)
    if (t->b.grad[i]) r->g[i] = dup_floats(t->b.grad[i], lt_param_numel(t, i));
}

/* memcmp, and where it differs the first element that does. */
static int same_bytes(const char *name, const char *what, const float *got, const float *want,
                      int64_t n) {
  if (memcmp(got, want, (size_t)n * sizeof *got) == 0) return 1;
  int64_t i = 0, bad = 0;
  for (int64_t j = 0; j < n; j++)
    if (memcmp(&got[j], &want[j], sizeof *got)) i = bad++ ? i : j;
  SAY("  FAIL %s: %s: %lld of %lld floats differ, first at %lld (got %.9g, want %.9g)\n", name,
      what, (long long)bad, (long long)n, (long long)i, got[i], want[i]);
  return 0;
}

/* One round from the gradients g0 (NULL: zero): combined, then forward again and B, W.
 * Returns failed checks; *split gets B's din and W's gradients. */
static int round_trip(lt_layer *t, const char *name, float *const *g0, grads *split) {
  grads both = {0};
  int fails = 0;
  char what[160];
  const char *onto = g0 ? "onto non-zero gradients" : "onto zero gradients";
  set_grads(t, g0);
  set_din(t, SENTINEL);
  if (lt_forward(t) != GP_OK || lt_backward(t) != GP_OK) goto fail_status;
  keep_din(t, &both);
  keep_grads(t, &both);

  set_grads(t, g0);
  set_din(t, SENTINEL);
  if (lt_forward(t) != GP_OK || lt_backward_part(t, GP_GRAD_INPUT) != GP_OK) goto fail_status;
  keep_din(t, split);
  for (int i = 0; i < t->l.n_params; i++) {
    if (!t->b.grad[i]) continue;
    float *z = calloc((size_t)lt_param_numel(t, i), sizeof *z);
    snprintf(what, sizeof what, "grad.%s after B alone %s (B must leave it)", t->l.pdesc[i].name,
             onto);
    fails += !same_bytes(name, what, t->b.grad[i], g0 ? g0[i] : z, lt_param_numel(t, i));
    free(z);
  }
  set_din(t, -SENTINEL);
  if (lt_backward_part(t, GP_GRAD_WEIGHT) != GP_OK) goto fail_status;
  keep_grads(t, split);
  for (int i = 0; i < t->l.n_in; i++) {
    if (!t->din[i].data) continue;
    int untouched = 1;
    for (int64_t j = 0; j < din_numel(t, i); j++)
      untouched &= GP_F32P(&t->din[i])[j] == -SENTINEL;
    if (!untouched) SAY("  FAIL %s: W wrote dx%d %s\n", name, i, onto), fails++;
    snprintf(what, sizeof what, "dx%d of B vs the combined backward %s", i, onto);
    fails += !same_bytes(name, what, split->din[i], both.din[i], din_numel(t, i));
  }
  for (int i = 0; i < t->l.n_params; i++) {
    if (!split->g[i]) continue;
    snprintf(what, sizeof what, "grad.%s of B then W vs the combined backward %s",
             t->l.pdesc[i].name, onto);
    fails += !same_bytes(name, what, split->g[i], both.g[i], lt_param_numel(t, i));
  }
  grads_free(&both);
  return fails;
fail_status:
  SAY("  FAIL %s: %s (%s)\n", name, gp_error_message(), gp_error_origin());
  grads_free(&both);
  return fails + 1;
}

/* Each half against central differences: B's din in the f32 inputs, W's (from zero) in the
 * trainable parameters. */
static int fd_halves(lt_layer *t, const grad_case *c, const grads *split, double *worst) {
  int fails = 0, is_loss = c->labels_k > 0 || t->l.type->is_loss;
  char what[160];
  gp_status s = GP_OK;
  for (int i = 0; i < t->l.n_in && s == GP_OK; i++) {
    if (!split->din[i]) continue;
    int64_t n = din_numel(t, i);
    double *fd = calloc((size_t)n, sizeof *fd); /* a mask's ('g') stays 0, exactly */
    for (int64_t j = 0; j < n && s == GP_OK && lt_kind_of(c, i) != 'g'; j++)
      s = lt_fd_at(t, &GP_F32P(&t->in[i])[j], is_loss, &fd[j]);
    snprintf(what, sizeof what, "%s: dx%d of B vs finite differences", c->name, i);
    double e = 0;
    if (s == GP_OK)
      fails += !lt_compare(what, split->din[i], fd, n,
                           lt_kind_of(c, i) == 'g' ? LT_TOL_EXACT : c->tol, &e);
    *worst = fmax(*worst, e);
    free(fd);
  }
  for (int i = 0; i < t->l.n_params && s == GP_OK; i++) {
    if (!split->g[i]) continue;
    int64_t n = lt_param_numel(t, i);
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t j = 0; j < n && s == GP_OK; j++)
      s = lt_fd_at(t, &t->b.param[i][j], is_loss, &fd[j]);
    snprintf(what, sizeof what, "%s: grad.%s of W vs finite differences", c->name,
             t->l.pdesc[i].name);
    double e = 0;
    if (s == GP_OK) fails += !lt_compare(what, split->g[i], fd, n, c->tol, &e);
    *worst = fmax(*worst, e);
    free(fd);
  }
  if (s != GP_OK) SAY("  FAIL %s: %s\n", c->name, gp_error_message()), fails++;
  return fails;
}

/* Returns the failed checks of one case, -1 when its type is not registered. */
static int run_case(gp_backend *be, const grad_case *c, const gp_layer_type *type, uint64_t seed,
                    double *worst) {
  lt_layer t;
  gp_dtype dt[4] = {GP_F32, GP_F32, GP_F32, GP_F32};
  if (c->labels_k) dt[c->n_in - 1] = GP_I32;
  for (int i = 0; i < c->n_in; i++)
    if (strchr("imzsp", lt_kind_of(c, i))) dt[i] = GP_I32;
  gp_status s = lt_layer_build_as(&t, type, be, c->yaml, c->n_in, c->in, dt, c->batch);
  if (s == GP_ERR_UNSUPPORTED) {
    lt_layer_free(&t);
    return -1;
  }
  if (s != GP_OK) {
    SAY("  FAIL %s: build: %s\n", c->name, gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  lt_fill_case(&t, c, seed);
  int64_t ny = gp_shape_numel(&t.out.shape);
  if (c->labels_k || t.l.type->is_loss)
    for (int64_t i = 0; i < ny; i++)
      GP_F32P(&t.dout)[i] = 1.0f;
  else
    lt_fill_uniform(seed + 50, GP_F32P(&t.dout), ny, -1.0f, 1.0f);
  t.e.training = !c->eval;
  float *g0[GP_MAX_PARAMS] = {0};
  for (int i = 0; i < t.l.n_params; i++) {
    g0[i] = malloc((size_t)lt_param_numel(&t, i) * sizeof(float));
    lt_fill_uniform(seed + 200 + (uint64_t)i, g0[i], lt_param_numel(&t, i), -2.0f, 2.0f);
  }
  grads first = {0}, second = {0};
  int fails = round_trip(&t, c->name, NULL, &first);
  fails += round_trip(&t, c->name, g0, &second);
  if (!fails) fails += fd_halves(&t, c, &first, worst);
  grads_free(&first);
  grads_free(&second);
  for (int i = 0; i < GP_MAX_PARAMS; i++)
    free(g0[i]);
  lt_layer_free(&t);
  return fails;
}

/* The checks on selftest_scale with a split bug: none passes, each other is caught. */
static int self_test(gp_backend *be, int *passed) {
  int failed = 0;
  for (int b = 0; lt_selftest_split_bugs[b]; b++) {
    char yaml[80];
    snprintf(yaml, sizeof yaml, "{type: selftest_scale, bug: %s}", lt_selftest_split_bugs[b]);
    grad_case c = {"self-test", yaml, 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR};
    double worst = 0;
    quiet = 1;
    lt_set_quiet(1);
    int f = run_case(be, &c, &lt_selftest_scale, 77, &worst);
    quiet = 0;
    lt_set_quiet(0);
    int ok = b == 0 ? f == 0 : f > 0;
    printf("%s self-test: bug '%s' %s (%d checks failed)\n", ok ? "ok  " : "FAIL",
           lt_selftest_split_bugs[b], b == 0 ? "passes" : "is caught", f);
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
    double worst = 0;
    int f = run_case(be, &lt_grad_cases[k], NULL, 1000 + (uint64_t)k * 17, &worst);
    if (f < 0) {
      printf("FAIL %s: layer type %s is not registered\n", lt_grad_cases[k].name,
             lt_type_of(lt_grad_cases[k].yaml));
      failed++;
      continue;
    }
    printf(
        "%s %s: B then W = combined bit for bit; halves vs finite differences (max error %.2g)\n",
        f ? "FAIL" : "ok  ", lt_grad_cases[k].name, worst);
    failed += f > 0;
    passed += f == 0;
  }
  failed += self_test(be, &passed);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
