/* Every layer against PyTorch: outputs, input and parameter gradients (of the combined
 * backward and of its halves, B then W), running statistics
 * and the mean loss, from the fixtures tests/layers/make_fixtures.py wrote. Every tensor in
 * a fixture must be used by some check, so a renamed parameter cannot pass silently.
 * Usage: test_layers_torch FIXTURE_DIR */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"
#include "tests/layers/harness.h"

#define MAX_FILES 256

/* Every type that must have a fixture. Dropout is left out: its mask comes from our
 * counter-based RNG, not PyTorch's (tests/layers/test_dropout.c checks its contract). */
/* clang-format off */
static const char *const all_types[] = {
    "conv2d", "linear", "batchnorm", "layernorm", "relu", "gelu", "tanh", "sigmoid", "maxpool",
    "avgpool", "global_avgpool", "flatten", "add", "concat", "identity", "pad",
    "softmax_cross_entropy", "embedding", "positional", "attention", "rmsnorm", "silu", "mul",
    "reshape", "permute", "groupnorm", "mse", "l1", "bce_with_logits", "conv_transpose2d", "upsample",
    "conv1d", NULL,
};
/* clang-format on */

typedef struct fixture {
  gp_st_file *f;
  const char *file;
  char *used; /* per entry: consumed by a check */
} fixture;

static const gp_st_entry *take(fixture *fx, const char *name) {
  const gp_st_entry *e = gp_st_find(fx->f, name);
  if (!e) return NULL;
  for (int i = 0; i < gp_st_count(fx->f); i++)
    if (gp_st_entry_at(fx->f, i) == e) fx->used[i] = 1;
  return e;
}

/* Expected values of an F32 entry whose shape must equal `shape`; NULL after printing why. */
static const float *expect(fixture *fx, const char *name, const gp_shape *shape) {
  const gp_st_entry *e = take(fx, name);
  char a[160], b[160];
  if (!e) {
    printf("  FAIL %s: no tensor '%s'\n", fx->file, name);
    return NULL;
  }
  if (e->dtype != GP_F32 || !gp_shape_equal(&e->shape, shape)) {
    printf("  FAIL %s: '%s' is %s %s in the fixture, the layer has F32 %s\n", fx->file, name,
           gp_dtype_name(e->dtype), gp_shape_str(&e->shape, a, sizeof a),
           gp_shape_str(shape, b, sizeof b));
    return NULL;
  }
  return gp_st_data(fx->f, e);
}

/* A fixture whose reference is float64 (the *_f64 cases: inputs where float32 rounding is
 * large) holds tol.NAME, PyTorch's own float32 error there (the largest absolute difference);
 * ours may be LT_TOL_TORCH_F64's atol times that, plus its rtol times the value. Returns 1 when
 * it passes, -1 when there is no tol.NAME. */
static int check_f64(fixture *fx, const char *name, const float *got, const float *want, int64_t n,
                     double *worst) {
  char tn[96];
  snprintf(tn, sizeof tn, "tol.%s", name);
  const gp_st_entry *te = take(fx, tn);
  if (!te) return -1;
  if (te->dtype != GP_F32 || gp_shape_numel(&te->shape) != 1) {
    printf("  FAIL %s: '%s' is not one F32 value\n", fx->file, tn);
    return 0;
  }
  const lt_tol *t = lt_tol_get(LT_TOL_TORCH_F64);
  const double torch_err = *(const float *)gp_st_data(fx->f, te);
  double worst_excess = 0, err_at = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    if (isnan(e)) e = INFINITY;
    if (e > *worst) *worst = e;
    double x = e - (t->atol * torch_err + t->rtol * fmax(fabs(got[i]), fabs(want[i])));
    if (x > 0 && (at < 0 || x > worst_excess)) worst_excess = x, at = i, err_at = e;
  }
  if (at < 0) return 1;
  printf("  FAIL %s: %s: err %.3g at %lld (got %.7g, want %.7g) is more than %g times PyTorch's "
         "float32 error %.3g (+ %g relative)\n",
         fx->file, name, err_at, (long long)at, (double)got[at], (double)want[at], t->atol,
         torch_err, t->rtol);
  return 0;
}

/* A NaN in the fixture (PyTorch propagating a NaN input: the *_nan cases) must be a NaN here
 * and the other way round; the other values are compared as usual. */
static int check(fixture *fx, const char *name, const float *got, const gp_shape *shape,
                 lt_tol_id tol, double *worst) {
  const float *want = expect(fx, name, shape);
  if (!want) return 0;
  char what[256];
  double err = 0;
  int64_t n = gp_shape_numel(shape), nans = 0;
  int f64 = check_f64(fx, name, got, want, n, worst);
  if (f64 >= 0) return f64;
  snprintf(what, sizeof what, "%s: %s", fx->file, name);
  for (int64_t i = 0; i < n; i++) {
    if (!isnan(want[i]) == !isnan(got[i])) {
      nans += !!isnan(want[i]);
      continue;
    }
    printf("  FAIL %s: at %lld got %.7g, want %.7g (a NaN must stay a NaN, as in PyTorch, and "
           "only a NaN)\n",
           what, (long long)i, (double)got[i], (double)want[i]);
    return 0;
  }
  int ok;
  if (nans) { /* compare the rest: NaN on both sides becomes 0 on both */
    float *g = malloc((size_t)n * sizeof *g), *w = malloc((size_t)n * sizeof *w);
    if (!g || !w) {
      free(g);
      free(w);
      printf("  FAIL %s: out of memory\n", what);
      return 0;
    }
    for (int64_t i = 0; i < n; i++) {
      g[i] = isnan(got[i]) ? 0.0f : got[i];
      w[i] = isnan(want[i]) ? 0.0f : want[i];
    }
    ok = lt_compare_f(what, g, w, n, tol, &err);
    free(g);
    free(w);
  } else {
    ok = lt_compare_f(what, got, want, n, tol, &err);
  }
  if (err > *worst) *worst = err;
  return ok;
}

/* Returns failed checks, or -1 when the layer type is not registered. */
static int run_fixture(gp_backend *be, fixture *fx, int perturb, char *type_out, size_t type_n) {
  gp_shape shapes[GP_MAX_INPUTS];
  gp_dtype dtypes[GP_MAX_INPUTS];
  lt_layer t;
  memset(&t, 0, sizeof t);
  int n_in = 0, fails = 0;
  int64_t batch = -1;
  double worst = 0;
  const char *config = gp_st_meta(fx->f, "config");
  const char *training = gp_st_meta(fx->f, "training");
  const char *loss = gp_st_meta(fx->f, "loss");
  type_out[0] = 0;
  if (!config) {
    printf("  FAIL %s: no 'config' in __metadata__\n", fx->file);
    return 1;
  }
  const char *tp = strstr(config, "type:");
  if (tp) snprintf(type_out, type_n, "%.*s", (int)strcspn(tp + 6, ",} "), tp + 6);
  for (; n_in < GP_MAX_INPUTS; n_in++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", n_in);
    const gp_st_entry *e = take(fx, nm);
    if (!e) break;
    if (e->shape.ndim < 1 || (batch >= 0 && e->shape.d[0] != batch)) {
      printf("  FAIL %s: %s has no batch dimension matching x0\n", fx->file, nm);
      return 1;
    }
    batch = e->shape.d[0];
    shapes[n_in].ndim = e->shape.ndim - 1;
    for (int d = 1; d < e->shape.ndim; d++)
      shapes[n_in].d[d - 1] = e->shape.d[d];
    dtypes[n_in] = e->dtype;
  }
  if (n_in == 0) {
    printf("  FAIL %s: no input tensor x0\n", fx->file);
    return 1;
  }
  gp_status s = lt_layer_build(&t, be, config, n_in, shapes, dtypes, batch);
  if (s == GP_ERR_UNSUPPORTED) {
    lt_layer_free(&t);
    return -1;
  }
  if (s != GP_OK) {
    printf("  FAIL %s: build %s: %s\n", fx->file, config, gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  for (int i = 0; i < n_in; i++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", i);
    const gp_st_entry *e = gp_st_find(fx->f, nm);
    memcpy(t.in[i].data, gp_st_data(fx->f, e), gp_tensor_bytes(&t.in[i]));
  }
  for (int i = 0; i < t.l.n_params; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "param.%s", t.l.pdesc[i].name);
    const float *v = expect(fx, nm, &t.l.pdesc[i].shape);
    if (!v) {
      fails++;
      goto done;
    }
    memcpy(t.b.param[i], v, (size_t)lt_param_numel(&t, i) * sizeof(float));
  }
  if (perturb && t.l.n_params) t.b.param[0][0] += 1e-2f; /* the self-test's deliberate bug */
  t.e.training = !(training && strcmp(training, "false") == 0);
  int is_loss = loss && strcmp(loss, "true") == 0;
  const char *bw = gp_st_meta(fx->f, "backward");
  int do_backward = !(bw && strcmp(bw, "false") == 0);

  /* the loss averages over the labels that count, as the pipeline's gp_batch_targets: one a
   * sample, or one a position (per-pixel labels) */
  if (is_loss && n_in == 2 && dtypes[1] == GP_I32) {
    int64_t kept = 0, nl = gp_shape_numel(&t.in[1].shape);
    for (int64_t j = 0; j < nl; j++)
      kept += GP_I32P(&t.in[1])[j] >= 0;
    t.e.loss_count = kept;
  }
  if (lt_forward(&t) != GP_OK) goto fail_status;
  fails += !check(fx, "y", GP_F32P(&t.out), &t.out.shape, LT_TOL_TORCH_FWD, &worst);
  if (is_loss) {
    gp_shape one = {1, {1}};
    float got = (float)t.e.loss_sum;
    fails += !check(fx, "loss", &got, &one, LT_TOL_TORCH_LOSS, &worst);
    for (int64_t j = 0; j < gp_shape_numel(&t.dout.shape); j++)
      GP_F32P(&t.dout)[j] = 1.0f;
  } else if (do_backward) {
    const float *dy = expect(fx, "dy", &t.dout.shape);
    if (!dy) {
      fails++;
      goto done;
    }
    memcpy(t.dout.data, dy, gp_tensor_bytes(&t.dout));
  }
  /* The combined backward, then (from zeroed gradients, on the same saved state) its halves:
   * B's din and W's gradients against the same references. */
  for (int split = 0; split < 2 && do_backward; split++) {
    int before = fails;
    for (int i = 0; split && i < t.l.n_params; i++)
      if (t.b.grad[i]) memset(t.b.grad[i], 0, (size_t)lt_param_numel(&t, i) * sizeof(float));
    gp_status st = split ? lt_backward_part(&t, GP_GRAD_INPUT) : lt_backward(&t);
    if (st == GP_OK && split) st = lt_backward_part(&t, GP_GRAD_WEIGHT);
    if (st != GP_OK) goto fail_status;
    for (int i = 0; i < n_in; i++) {
      if (!t.din[i].data) continue;
      char nm[8];
      snprintf(nm, sizeof nm, "dx%d", i);
      fails += !check(fx, nm, GP_F32P(&t.din[i]), &t.din[i].shape, LT_TOL_TORCH_GRAD, &worst);
    }
    for (int i = 0; i < t.l.n_params; i++) {
      if (!t.b.grad[i]) continue;
      char nm[64];
      snprintf(nm, sizeof nm, "grad.%s", t.l.pdesc[i].name);
      fails += !check(fx, nm, t.b.grad[i], &t.l.pdesc[i].shape, LT_TOL_TORCH_GRAD, &worst);
    }
    if (split && fails > before && !perturb)
      printf("  FAIL %s: the backward as B then W\n", fx->file);
  }
  int has_after = 0;
  for (int i = 0; i < t.l.n_params; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "after.%s", t.l.pdesc[i].name);
    has_after |= gp_st_find(fx->f, nm) != NULL;
  }
  if (has_after) {
    if (t.l.type->step_end && t.l.type->step_end(&t.l, &t.b, be) != GP_OK) goto fail_status;
    for (int i = 0; i < t.l.n_params; i++) {
      char nm[64];
      snprintf(nm, sizeof nm, "after.%s", t.l.pdesc[i].name);
      if (gp_st_find(fx->f, nm))
        fails += !check(fx, nm, t.b.param[i], &t.l.pdesc[i].shape, LT_TOL_TORCH_STAT, &worst);
    }
  }
  for (int i = 0; i < gp_st_count(fx->f); i++)
    if (!fx->used[i]) {
      printf("  FAIL %s: tensor '%s' was not checked (the layer has no such parameter or "
             "input)\n",
             fx->file, gp_st_entry_at(fx->f, i)->name);
      fails++;
    }
  if (!perturb) printf("%s %s (max error %.2g)\n", fails ? "FAIL" : "ok  ", fx->file, worst);
  goto done;

fail_status:
  printf("  FAIL %s: %s (%s)\n", fx->file, gp_error_message(), gp_error_origin());
  fails++;
done:
  lt_layer_free(&t);
  return fails;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    printf("usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    printf("FAIL: cannot open fixture directory %s\n", argv[1]);
    return 1;
  }
  char *files[MAX_FILES] = {0};
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) && n < MAX_FILES;) {
    size_t len = strlen(de->d_name);
    if (len > 12 && strcmp(de->d_name + len - 12, ".safetensors") == 0)
      files[n++] = strdup(de->d_name);
  }
  closedir(d);
  qsort(files, (size_t)n, sizeof *files, cmp_str);

  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  int failed = 0, passed = 0, covered[32] = {0}, self_tested = 0;
  char missing[512] = "";
  for (int i = 0; i < n; i++) {
    char path[4096], type[64];
    snprintf(path, sizeof path, "%s/%s", argv[1], files[i]);
    fixture fx = {NULL, files[i], NULL};
    if (gp_st_read(path, &fx.f) != GP_OK) {
      printf("FAIL %s: %s\n", files[i], gp_error_message());
      failed++;
      continue;
    }
    fx.used = calloc((size_t)gp_st_count(fx.f) + 1, 1);
    int f = run_fixture(be, &fx, 0, type, sizeof type);
    for (int k = 0; all_types[k]; k++)
      if (strcmp(all_types[k], type) == 0) covered[k] = 1;
    if (f < 0) {
      printf("MISSING %s (layer type %s is not registered)\n", files[i], type);
      char key[72];
      snprintf(key, sizeof key, " %s,", type);
      if (!strstr(missing, key)) strncat(missing, key, sizeof missing - strlen(missing) - 1);
    } else if (f > 0) {
      failed++;
    } else {
      passed++;
    }
    /* Self-test: the same fixture with one weight off by 1e-2 must fail. */
    if (strcmp(files[i], "conv2d_3x3.safetensors") == 0 && f == 0) {
      memset(fx.used, 0, (size_t)gp_st_count(fx.f));
      lt_set_quiet(1);
      int g = run_fixture(be, &fx, 1, type, sizeof type);
      lt_set_quiet(0);
      printf("%s self-test: a weight off by 1e-2 is caught (%d checks failed)\n",
             g > 0 ? "ok  " : "FAIL", g);
      failed += g <= 0;
      passed += g > 0;
      self_tested = 1;
    }
    free(fx.used);
    gp_st_free(fx.f);
  }
  if (!self_tested) {
    printf("FAIL: the self-test did not run (conv2d_3x3.safetensors missing or failing)\n");
    failed++;
  }
  for (int k = 0; all_types[k]; k++)
    if (!covered[k]) {
      printf("FAIL: no fixture for layer type %s\n", all_types[k]);
      failed++;
    }
  if (missing[0]) {
    printf("FAIL: layer types not registered:%s\n", missing);
    failed++;
  }
  for (int i = 0; i < n; i++)
    free(files[i]);
  gp_backend_destroy(be);
  printf("%d fixtures; %d passed, %d failed\n", n, passed, failed);
  return failed ? 1 : 0;
}
