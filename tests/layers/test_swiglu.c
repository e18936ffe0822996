/* A Llama-style SwiGLU MLP (rmsnorm, linear gate and up, silu, mul, linear down, residual)
 * written in YAML, through the executor: it loads with the parameters its layers describe,
 * `init: normal` draws N(0, std^2) per parameter from (seed, name) alone (so a stage that
 * holds only some layers draws the same values: K changes nothing), its whole-model gradient
 * matches finite differences, micro-batches and B-then-W halves give the same gradients, and
 * a few steps of SGD fit its small batch.
 * Usage: test_layers_swiglu MODEL_YAML */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/pass.h"
#include "core/train/params.h"
#include "tests/layers/harness.h"

static int passed, failed;

static void tally(int ok, const char *what) {
  lt_tally(ok, what, &passed, &failed);
}

#define MB 4
#define MT 6
/* The embedding starts at std 0.02 and rmsnorm divides by its rows' size (~0.06): a step of
 * 1e-3 is 5% of a weight and the curvature shows (9 gradients 4% off); at 1e-4 the truncation
 * is 100x smaller and the f32 rounding of the loss (~1e-7 / 2e-4) stays inside fd_norm. */
#define FD_H 1e-4

typedef struct rig {
  gp_model *m;
  gp_backend *be;
  gp_arena arena;
  gp_params params;
} rig;

static const int32_t tokens[MB * MT] = {3, 7, 1, 0, 9, 2, 5, 5, 9, 10, 2,  4,
                                        6, 8, 0, 1, 3, 3, 2, 2, 7, 4,  10, 6};
static const int32_t labels[MB] = {1, 3, 0, 2};

/* The mean loss of samples [first, first + n) as part of a mini-batch of MB; grads +=
 * (backward 1: gp_pass_backward; 2: its halves, B then W) */
static gp_status loss_of(rig *r, int first, int n, int backward, double *loss) {
  gp_model *m = r->m;
  gp_pass p;
  gp_exec e = {.be = r->be,
               .arena = &r->arena,
               .training = 1,
               .seed = 9,
               .step = 1,
               .sample_offset = first,
               .loss_count = MB,
               .binds = r->params.bind};
  GP_TRY(gp_pass_init(&p, m, 0, m->n_nodes, n));
  const void *src[2] = {tokens + first * MT, labels + first};
  for (int i = 0; i < 2; i++)
    p.val[i] = (gp_tensor){(void *)src[i], gp_shape_batch(n, &m->inputs[i].shape), GP_I32, -1};
  gp_status s = gp_pass_forward(&p, &e);
  if (s == GP_OK && backward == 1) s = gp_pass_backward(&p, &e);
  if (s == GP_OK && backward == 2) s = gp_pass_backward_input(&p, &e);
  if (s == GP_OK && backward == 2) s = gp_pass_backward_weight(&p, &e);
  gp_pass_free(&p);
  gp_arena_reset(&r->arena);
  *loss = e.loss_sum;
  return s;
}

static int node_named(const gp_model *m, const char *path) {
  for (int i = 0; i < m->n_nodes; i++)
    if (strcmp(m->nodes[i].layer.path, path) == 0) return i;
  return -1;
}

/* Sample standard deviation (about 0) of parameter 0 of node i. */
static double weight_std(rig *r, int node, int64_t *n) {
  const gp_layer *l = &r->m->nodes[node].layer;
  *n = gp_shape_numel(&l->pdesc[0].shape);
  const float *w = gp_params_bind(&r->params, node)->param[0];
  double s = 0;
  for (int64_t i = 0; i < *n; i++)
    s += (double)w[i] * w[i];
  return sqrt(s / (double)*n);
}

/* init: normal: std as written (0.02 by default), drawn from (seed, name): a stage holding
 * only the layers from `layers.1` on draws the same values as the whole model. */
static void check_init(rig *r) {
  static const struct {
    const char *path;
    double std;
  } want[] = {
      {"embed", 0.02}, {"layers.0.gate_proj", 0.3}, {"layers.1.down_proj", 0.3}, {"logits", 0.02}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    int i = node_named(r->m, want[k].path);
    int64_t n = 0;
    double sd = i >= 0 ? weight_std(r, i, &n) : 0;
    /* n >= 88 draws: the sample std is within 4 of its standard errors (sd / sqrt(2n), at
     * most 7.5%) of the true one but with chance 1e-4 */
    int ok = i >= 0 && r->m->nodes[i].layer.pdesc[0].init == GP_INIT_NORMAL_STD &&
             fabs(sd / want[k].std - 1.0) < 4.0 / sqrt(2.0 * (double)n);
    char what[160];
    snprintf(what, sizeof what, "init: normal: %s.weight has std %.4f over %lld values (want %g)",
             want[k].path, sd, (long long)n, want[k].std);
    tally(ok, what);
  }
  int first = node_named(r->m, "layers.1.norm");
  gp_params part;
  int ok = first > 0 && gp_params_init(&part, r->m, first, r->m->n_nodes, r->be, 3) == GP_OK;
  if (ok) {
    const float *whole = gp_params_bind(&r->params, first)->param[0];
    ok = memcmp(part.train, whole, (size_t)part.n_train * sizeof(float)) == 0;
    gp_params_free(&part);
  }
  tally(ok, "init: a stage from layers.1 on draws the whole model's values for its layers");
}

static void check_gradient(rig *r, float *g, int64_t n) {
  double l0 = 0, lp = 0, lm = 0;
  gp_params_zero_grad(&r->params);
  gp_status s = loss_of(r, 0, MB, 1, &l0);
  double *fd = malloc((size_t)n * sizeof *fd);
  memcpy(g, r->params.grad, (size_t)n * sizeof *g);
  for (int64_t i = 0; i < n && s == GP_OK; i++) {
    float w = r->params.train[i];
    r->params.train[i] = w + (float)FD_H;
    double xp = r->params.train[i];
    s = loss_of(r, 0, MB, 0, &lp);
    r->params.train[i] = w - (float)FD_H;
    double xm = r->params.train[i];
    if (s == GP_OK) s = loss_of(r, 0, MB, 0, &lm);
    r->params.train[i] = w;
    fd[i] = (lp - lm) / (xp - xm);
  }
  double err = 0;
  int ok = s == GP_OK && isfinite(l0) &&
           lt_compare("SwiGLU: gradient vs finite differences", g, fd, n, LT_TOL_FD_NORM, &err);
  if (s != GP_OK) printf("  FAIL pass: %s\n", gp_error_message());
  char what[200];
  snprintf(what, sizeof what,
           "SwiGLU: whole-model gradient of %lld parameters vs finite differences (loss %.4f, "
           "max error %.2g)",
           (long long)n, l0, err);
  tally(ok, what);
  free(fd);
}

/* Samples 0..2, then 3, as micro-batches, with the whole backward and with B then W. */
static void check_micro(rig *r, const float *g, int64_t n) {
  double la = 0, lb = 0;
  float *g2 = malloc((size_t)n * sizeof *g2);
  gp_params_zero_grad(&r->params);
  gp_status s = loss_of(r, 0, 3, 1, &la);
  if (s == GP_OK) s = loss_of(r, 3, 1, 1, &lb);
  int ok = s == GP_OK && lt_compare_f("SwiGLU: gradients of 2 micro-batches", r->params.grad, g, n,
                                      LT_TOL_MICRO, NULL);
  tally(ok, "SwiGLU: micro-batches of 3 + 1 samples give the whole batch's gradients");
  memcpy(g2, r->params.grad, (size_t)n * sizeof *g2);
  gp_params_zero_grad(&r->params);
  s = loss_of(r, 0, 3, 2, &la);
  if (s == GP_OK) s = loss_of(r, 3, 1, 2, &lb);
  int64_t diff = 0;
  for (int64_t i = 0; i < n; i++)
    diff += memcmp(&r->params.grad[i], &g2[i], sizeof *g2) != 0;
  if (s != GP_OK) printf("  FAIL pass: %s\n", gp_error_message());
  if (diff) printf("  %lld of %lld gradients differ\n", (long long)diff, (long long)n);
  tally(s == GP_OK && diff == 0, "SwiGLU: 3 + 1 samples with the backward as B then W give the "
                                 "combined backward's gradients, bit for bit");
  free(g2);
}

/* Plain SGD on the one batch: the block can fit 4 samples, so the loss must fall well below
 * chance (ln 4 = 1.39). */
static void check_trains(rig *r, int64_t n) {
  double first = 0, loss = 0;
  gp_status s = GP_OK;
  for (int step = 0; step < 60 && s == GP_OK; step++) {
    gp_params_zero_grad(&r->params);
    s = loss_of(r, 0, MB, 1, &loss);
    if (step == 0) first = loss;
    for (int64_t i = 0; i < n; i++)
      r->params.train[i] -= 0.5f * r->params.grad[i];
  }
  char what[160];
  snprintf(what, sizeof what, "SwiGLU: 60 SGD steps take the loss from %.4f to %.4f (< 0.1)", first,
           loss);
  if (s != GP_OK) printf("  FAIL pass: %s\n", gp_error_message());
  tally(s == GP_OK && first > 1.0 && loss < 0.1, what);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    printf("usage: %s MODEL_YAML\n", argv[0]);
    return 2;
  }
  rig r = {0};
  if (gp_cpu_backend_create(1, &r.be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  if (gp_model_load(argv[1], NULL, 0, &r.m) != GP_OK) {
    printf("FAIL %s: %s\n", argv[1], gp_error_message());
    gp_backend_destroy(r.be);
    return 1;
  }
  gp_model *m = r.m;
  /* embedding 11 x 8; per block: rmsnorm 8, gate and up 8 x 12, down 12 x 8; norm 8;
   * classifier 48 -> 4 with bias */
  const int64_t d = 8, ff = 12;
  int64_t want = 11 * d + 2 * (d + 3 * d * ff) + d + (MT * d * 4 + 4);
  int gated = node_named(m, "layers.1.gated");
  int ok = m->n_params == want && m->n_units == 6 && gated >= 0 &&
           strcmp(m->nodes[gated].layer.type->name, "mul") == 0 && m->nodes[gated].n_in == 2;
  if (!ok)
    printf("  got %lld parameters (want %lld), %d units\n", (long long)m->n_params, (long long)want,
           m->n_units);
  tally(ok, "SwiGLU: loads with 6 units, mul of two inputs, and its layers' parameter count");
  if (ok && gp_params_init(&r.params, m, 0, m->n_nodes, r.be, 3) == GP_OK) {
    gp_arena_init(&r.arena, r.be, 0);
    int64_t n = r.params.n_train;
    float *g = malloc((size_t)n * sizeof *g);
    check_init(&r);
    check_gradient(&r, g, n);
    check_micro(&r, g, n);
    check_trains(&r, n);
    free(g);
    gp_params_free(&r.params);
    gp_arena_free(&r.arena);
  } else if (ok) {
    printf("  FAIL params: %s\n", gp_error_message());
    failed++;
  }
  gp_model_free(m);
  gp_backend_destroy(r.be);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
