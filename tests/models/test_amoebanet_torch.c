/* models/amoebanet-d.yaml against PyTorch: the small AmoebaNet-D(6, 16), 5 classes, 64x64,
 * batch 16, trained two SGD steps here and by tests/models/make_amoebanet_fixture.py, a
 * PyTorch model written from the specification's cell tables (not from the model file),
 * computed in float64.
 * Both sides compute the same weights, inputs and labels from a hash of the name and index,
 * so the fixture holds only results: the losses, every parameter's gradient norm, a few full
 * gradients and weights and running statistics after the steps. What a parameter count
 * cannot see is checked here: which state each operation reads, strides, the
 * FactorizedReduce shift, the packing of the two previous cells, the classifier.
 * Float32 cannot match the reference everywhere to its own rounding error: wherever a ReLU or
 * max-pool input lies within rounding of its threshold, a float32 run may take either branch,
 * and in the last cells (2x2 maps: 64 values per batch-norm channel) one branch moves late
 * gradients by ~1.5% and every earlier one with them. So the fixture also holds each
 * quantity's float32 spread: how far 24 PyTorch float32 runs landed from the reference, with
 * the input and weights as they are and moved by one unit in the last place either way. A
 * tolerance here is never tighter than SPREAD_MARGIN times that spread, so the test passes
 * with any float32 rounding (any BLAS kernels) and stays as tight as the table where no
 * branch moves a quantity.
 * Usage: test_amoebanet_torch models/amoebanet-d.yaml
 * tests/models/fixtures/amoebanet_small.safetensors */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/models/amoeba_set.h"
#include "tests/support/train.h"

static int failures, passes;
static int64_t widened, compared; /* values whose tolerance is the spread's, and all */

/* One table: what is compared and how closely, and why. The reference is float64 (from the
 * same float32 weights and inputs); ours is float32, so each tolerance is about 10x the float32
 * error measured here, which is the size of PyTorch's own float32 error against the reference. */
typedef struct tol {
  double atol, rtol;
} tol;
/* The first loss: f32 convolutions and batch norms ~50 layers deep. Measured 7.5e-7. */
static const tol TOL_LOSS0 = {0, 1e-5};
/* The second loss, weights and running statistics after the steps: the first step's float32
 * gradients moved the weights. Measured 1.0e-6 relative (loss), 4e-6 relative and 1.8e-7
 * absolute (running means, some near 0). */
static const tol TOL_LATER = {1e-6, 5e-5};
/* Gradient norms per parameter: sums over the batch and positions in other orders, then back
 * through ~50 layers with batch norm's division by the standard deviation. Measured 4.3e-5. */
static const tol TOL_GRAD = {1e-7, 5e-4};
/* Gradient elements, as a fraction of their tensor's largest: small elements are sums that
 * nearly cancel, so their own relative error is large. Measured 2.1e-5 (PyTorch float32
 * against the reference: 3.2e-5). */
#define GRAD_OF_MAX 2e-4
/* How far beyond the largest float32 spread seen in the fixture's runs a value may land. */
#define SPREAD_MARGIN 2.0

#define L 6
#define D 16
#define CLASSES 5
#define IMAGE 64
#define BATCH 16
#define STEPS 2
#define LR 1e-4

/* ---- the values both sides compute (make_amoebanet_fixture.py: fixture_values) ---- */
static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
  return h;
}

static uint64_t splitmix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fixture_values(const char *key, float *out, int64_t n, double scale, double offset) {
  uint64_t h = fnv1a(key);
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(splitmix(h + (uint64_t)i) >> 11) * 0x1.0p-53;
    out[i] = (float)(offset + scale * (2.0 * u - 1.0));
  }
}

/* Every parameter and buffer of the model from its name, as the fixture script makes them:
 * conv and linear U(-b, b) with b = 1/sqrt(fan_in); batch norm weight 1 +- 0.25, bias
 * +- 0.25, running mean 0 and variance 1. */
/* The one stage's parameters (K = 1), and layer l's bindings in it. */
static gp_params *stage_params;
static gp_layer_bind *bind_of(const gp_model *m, const gp_layer *l) {
  int i = 0;
  while (&m->nodes[i].layer != l)
    i++;
  return gp_params_bind(stage_params, i);
}

static int fill_weights(gp_model *m) {
  for (int i = 0; i < m->n_nodes; i++) {
    gp_layer *l = &m->nodes[i].layer;
    const char *ty = l->type->name;
    for (int j = 0; j < l->n_params; j++) {
      const gp_param_desc *p = &l->pdesc[j];
      int64_t n = gp_shape_numel(&p->shape);
      char name[512];
      snprintf(name, sizeof name, "%s.%s", l->path, p->name);
      if (!strcmp(ty, "conv2d") || !strcmp(ty, "linear")) {
        fixture_values(name, bind_of(m, l)->param[j], n, 1.0 / sqrt((double)l->pdesc[0].fan_in),
                       0.0);
      } else if (!strcmp(ty, "batchnorm")) {
        if (!strcmp(p->name, "weight"))
          fixture_values(name, bind_of(m, l)->param[j], n, 0.25, 1.0);
        else if (!strcmp(p->name, "bias"))
          fixture_values(name, bind_of(m, l)->param[j], n, 0.25, 0.0);
        else
          for (int64_t k = 0; k < n; k++)
            bind_of(m, l)->param[j][k] = strcmp(p->name, "running_var") ? 0.0f : 1.0f;
      } else {
        printf("FAIL: %s: a parameter of a %s layer; the fixture knows conv2d, linear and "
               "batchnorm\n",
               name, ty);
        return 0;
      }
    }
  }
  return 1;
}

/* ---- comparisons ---- */
static int close_to(double got, double want, tol t) {
  return fabs(got - want) <= t.atol + t.rtol * fmax(fabs(got), fabs(want));
}

static double worst_rel;  /* largest |got - want| / |want| seen (|want| > 1e-3) */
static double worst_grad; /* largest gradient error as a fraction of its tensor's largest */

/* got against want, each value within t or, where wider, SPREAD_MARGIN x its float32 spread
 * (spread[i], or spread[0] for all when ns is 1). */
static void compare(const char *what, const float *got, const float *want, int64_t n, tol t,
                    const float *spread, int64_t ns) {
  int64_t bad = 0, at = 0;
  double err = 0;
  for (int64_t i = 0; i < n; i++) {
    tol ti = t;
    double wide = spread ? SPREAD_MARGIN * spread[ns == 1 ? 0 : i] : 0;
    if (wide > t.atol + t.rtol * fabs(want[i])) ti.atol = wide, widened++;
    compared++;
    double e = fabs((double)got[i] - want[i]);
    if (!close_to(got[i], want[i], ti) || isnan(e)) {
      if (!bad || e > err) err = e, at = i;
      bad++;
    }
    if (fabs(want[i]) > 1e-3) worst_rel = fmax(worst_rel, e / fabs(want[i]));
  }
  CHECK(bad == 0, "%s: %lld of %lld values off; worst at %lld: got %.8g, want %.8g", what,
        (long long)bad, (long long)n, (long long)at, bad ? got[at] : 0.0, bad ? want[at] : 0.0);
}

static const float *expect(const gp_st_file *f, const char *name, int64_t n) {
  const gp_st_entry *e = gp_st_find(f, name);
  if (!e || e->dtype != GP_F32 || gp_shape_numel(&e->shape) != n) {
    CHECK(0, "fixture tensor %s is missing or has not %lld f32 values", name, (long long)n);
    return NULL;
  }
  return gp_st_data(f, e);
}

/* The fixture's float32 spread of quantity `name`: n values, or 1 for a whole tensor. */
static const float *spread_of(const gp_st_file *f, const char *name, int64_t n, int64_t *ns) {
  char key[600];
  snprintf(key, sizeof key, "spread.%s", name);
  const gp_st_entry *e = gp_st_find(f, key);
  *ns = e ? gp_shape_numel(&e->shape) : 0;
  if (!e || e->dtype != GP_F32 || (*ns != n && *ns != 1)) {
    CHECK(0,
          "fixture tensor %s is missing or has not 1 or %lld f32 values: regenerate the "
          "fixture with make_amoebanet_fixture.py",
          key, (long long)n);
    return NULL;
  }
  return gp_st_data(f, e);
}

/* The layer holding parameter "path.name", and its index. */
static gp_layer *find_param(gp_model *m, const char *full, int *idx) {
  for (int i = 0; i < m->n_nodes; i++) {
    gp_layer *l = &m->nodes[i].layer;
    size_t pl = strlen(l->path);
    if (strncmp(full, l->path, pl) || full[pl] != '.') continue;
    for (int j = 0; j < l->n_params; j++)
      if (!strcmp(full + pl + 1, l->pdesc[j].name)) {
        *idx = j;
        return l;
      }
  }
  return NULL;
}

/* Every tensor "prefix<param name>" of the fixture against the model's current values (or
 * gradients). */
static void compare_prefixed(gp_model *m, const gp_st_file *f, const char *prefix, int grads) {
  tol t = TOL_LATER;
  size_t n = strlen(prefix);
  for (int i = 0; i < gp_st_count(f); i++) {
    const gp_st_entry *e = gp_st_entry_at(f, i);
    if (strncmp(e->name, prefix, n)) continue;
    int j;
    gp_layer *l = find_param(m, e->name + n, &j);
    CHECK(l != NULL, "the model has no parameter %s", e->name + n);
    if (!l) continue;
    int64_t cnt = gp_shape_numel(&l->pdesc[j].shape);
    const float *want = expect(f, e->name, cnt);
    if (!want) continue;
    const float *got = grads ? bind_of(m, l)->grad[j] : bind_of(m, l)->param[j];
    if (grads) {
      double big = 0, err = 0;
      for (int64_t k = 0; k < cnt; k++) {
        big = fmax(big, fabs(want[k]));
        err = fmax(err, fabs((double)got[k] - want[k]));
      }
      t = (tol){GRAD_OF_MAX * big, 0};
      worst_grad = fmax(worst_grad, err / big);
    }
    int64_t ns;
    const float *spread = spread_of(f, e->name, cnt, &ns);
    compare(e->name, got, want, cnt, t, spread, ns);
  }
}

/* The fixture's parameter names (one per line) must be the model's trainable ones, and
 * every norm of the step-1 gradient must match. */
static void compare_norms(gp_model *m, const gp_st_file *f) {
  const char *names = gp_st_meta(f, "names");
  const gp_st_entry *norms = gp_st_find(f, "gnorm");
  CHECK(names && norms && norms->dtype == GP_F32, "the fixture has no names or no gnorm");
  if (!names || !norms || norms->dtype != GP_F32) return;
  const float *want = gp_st_data(f, norms);
  int64_t ns;
  const float *spread = spread_of(f, "gnorm", gp_shape_numel(&norms->shape), &ns);
  int count = 0, trainable = 0;
  for (const char *p = names; *p; count++) {
    size_t len = strcspn(p, "\n");
    char full[512];
    snprintf(full, sizeof full, "%.*s", (int)len, p);
    p += len + (p[len] == '\n');
    int j;
    gp_layer *l = find_param(m, full, &j);
    CHECK(l && l->pdesc[j].trainable, "the model has no trainable parameter %s", full);
    if (!l || !l->pdesc[j].trainable || count >= gp_shape_numel(&norms->shape)) continue;
    double ss = 0;
    for (int64_t k = 0; k < gp_shape_numel(&l->pdesc[j].shape); k++)
      ss += (double)bind_of(m, l)->grad[j][k] * bind_of(m, l)->grad[j][k];
    float got = (float)sqrt(ss);
    char what[560];
    snprintf(what, sizeof what, "gradient norm of %s", full);
    compare(what, &got, want + count, 1, TOL_GRAD, spread ? spread + count : NULL, 1);
  }
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].layer.n_params; j++)
      trainable += m->nodes[i].layer.pdesc[j].trainable;
  CHECK(count == trainable && count == gp_shape_numel(&norms->shape),
        "the fixture names %d trainable parameters (%lld norms), the model has %d", count,
        (long long)gp_shape_numel(&norms->shape), trainable);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    printf("usage: %s models/amoebanet-d.yaml FIXTURE.safetensors\n", argv[0]);
    return 2;
  }
  gp_st_file *f;
  if (gp_st_read(argv[2], &f) != GP_OK) {
    printf("FAIL: %s\n", gp_error_message());
    return 1;
  }
  gp_model *m = amoeba_load(argv[1], L, D, CLASSES, IMAGE);
  if (!m) return 1;
  m->train.optimizer = GP_OPT_SGD;
  m->train.momentum = m->train.weight_decay = 0;
  m->train.nesterov = 0;
  m->train.clip_grad_norm = 0;
  m->pipeline.stages = m->pipeline.micro_batches = 1;
  m->pipeline.n_balance = 0;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(m, &m->pipeline, &plan) != GP_OK || gp_trainer_init(&t, m, &plan, &po, 1)) {
    printf("FAIL: trainer: %s\n", gp_error_message());
    return 1;
  }
  stage_params = gp_pipeline_params(t.pl, 0);
  int ok = fill_weights(m);
  CHECK(ok, "weights");
  int64_t per = 3 * IMAGE * IMAGE;
  float *x = malloc(sizeof(float) * (size_t)(BATCH * per));
  int32_t y[BATCH];
  fixture_values("input", x, BATCH * per, 1.0, 0.0);
  for (int i = 0; i < BATCH; i++)
    y[i] = (i * 3 + 1) % CLASSES;
  const float *want_loss = expect(f, "loss", STEPS);
  int64_t ns;
  const float *spread = spread_of(f, "loss", STEPS, &ns);
  for (int s = 0; ok && want_loss && s < STEPS; s++) {
    gp_metrics mt;
    gp_status st = gp_t_step_xy(&t, x, y, BATCH, LR, &mt);
    CHECK(st == GP_OK, "step %d", s + 1);
    if (st != GP_OK) break;
    char what[32];
    snprintf(what, sizeof what, "loss of step %d", s + 1);
    float got = (float)mt.loss;
    compare(what, &got, &want_loss[s], 1, s == 0 ? TOL_LOSS0 : TOL_LATER,
            spread ? spread + s : NULL, 1);
    printf("step %d: loss %.7f, PyTorch %.7f\n", s + 1, mt.loss, want_loss[s]);
    if (s == 0) { /* the gradients of this step are still in the stage's buffer */
      compare_norms(m, f);
      compare_prefixed(m, f, "grad.", 1);
    }
  }
  compare_prefixed(m, f, "after.", 0);
  printf("largest difference: %.3g relative (where |want| > 1e-3); gradient elements %.3g of "
         "their tensor's largest; %lld of %lld values compared within %g x their float32 spread "
         "(wider than the table's tolerance)\n",
         worst_rel, worst_grad, (long long)widened, (long long)compared, SPREAD_MARGIN);
  free(x);
  gp_trainer_free(&t);
  gp_model_free(m);
  gp_st_free(f);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
