/* --precision bf16-mixed on the CPU (core/exec/pass.c rounds activations and their gradients
 * to bf16 through be->round_bf16): the rounding op against an independent reference (ties to
 * even, NaN and Inf kept, every thread count), and three small models (an MLP with a skip
 * connection and dropout; a CNN with groupnorm, silu, upsample and conv_transpose2d; a Llama
 * block with rmsnorm, rope and grouped-query attention over packed rows, silu * up) trained a
 * few steps: K = 3, M = 4 (1F1B, ZB-H1, GPipe with recompute) give K = 1, M = 1's losses and
 * weights, and the mode does something: it differs from fp32 and from bf16 (operands only). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/train/stage_params.h"

static int failures, passes;

/* The tolerances, with their reasons. */
/* K, M and the schedule change only the summation order of the micro-batches' weight
 * gradients (f32), as in fp32 (tests/train/test_pipeline_equiv.c): the rounding is per element
 * at the same points. */
#define TOL_EQUIV 1e-5
/* bf16 keeps 8 significant bits (relative rounding up to 2^-9 = 2e-3 per activation): after
 * a few steps the losses of bf16-mixed and fp32 differ by far more than this. */
#define MIN_VS_FP32 1e-4
/* bf16 (operands only) already rounds what GEMMs read; bf16-mixed also rounds what the
 * activations, norms and element-wise layers read and write: still well above summation
 * order (1e-7). */
#define MIN_VS_BF16 1e-5

/* ---- the op: be->round_bf16 against a reference written another way ---- */

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The nearer of the two bf16 values around x (truncation and the next one up in magnitude),
 * ties to the one whose last kept bit is 0, by comparing the dropped half-word with 0x8000;
 * NaN: a quiet NaN with x's sign. */
static uint32_t reference(float x) {
  uint32_t u = bits(x);
  if (isnan(x)) return (u & 0x80000000u) | 0x7fc00000u | (u & 0x007f0000u);
  uint32_t down = u & 0xffff0000u, up = down + 0x10000u, low = u & 0xffffu;
  if (low < 0x8000u) return down;
  if (low > 0x8000u) return up;
  return (down & 0x10000u) ? up : down;
}

static void check_op(int threads) {
  gp_backend *be;
  if (gp_cpu_backend_create(threads, &be) != GP_OK) gp_t_die("backend");
  be->precision = GP_PREC_BF16_MIXED;
  /* hand-picked: exact, the two ties (to even: down and up), just past a tie, the largest
   * bf16, what rounds to Inf, Inf, NaNs, signed zero, a subnormal */
  static const uint32_t picked[][2] = {
      {0x3f800000u, 0x3f800000u}, /* 1 */
      {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: a tie, to the even 1 */
      {0x3f818000u, 0x3f820000u}, /* 1 + 3 2^-8: a tie, to the even 1 + 2^-6 */
      {0x3f808001u, 0x3f810000u}, /* just past the tie: up */
      {0xbf808001u, 0xbf810000u}, /* negative */
      {0x7f7f0000u, 0x7f7f0000u}, /* the largest bf16 */
      {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX rounds to Inf */
      {0x7f800000u, 0x7f800000u}, /* Inf */
      {0xff800000u, 0xff800000u}, /* -Inf */
      {0x7fc00000u, 0x7fc00000u}, /* NaN */
      {0xffa00001u, 0xffe00000u}, /* a signalling NaN, negative: quieted, sign kept */
      {0x80000000u, 0x80000000u}, /* -0 */
      {0x00018000u, 0x00020000u}, /* a subnormal tie: to even */
  };
  enum { NP = sizeof picked / sizeof picked[0], N = 100003 };
  float *x = NULL;
  if (be->alloc(be, sizeof(float) * N, (void **)&x) != GP_OK) gp_t_die("alloc");
  for (int i = 0; i < NP; i++)
    x[i] = from_bits(picked[i][0]);
  gp_rng r;
  gp_rng_seed(&r, 7);
  float *want = malloc(sizeof(float) * N);
  if (!want) gp_t_die("malloc");
  for (int i = NP; i < N; i++) /* every exponent, and a tie in every 16th */
    x[i] = from_bits((uint32_t)gp_rng_below(&r, 1ull << 32) & (i % 16 ? 0xffffffffu : 0xffff8000u));
  for (int i = 0; i < N; i++)
    want[i] = from_bits(reference(x[i]));
  CHECK(be->round_bf16(be, N, x) == GP_OK, "round_bf16 over %d values", N);
  int bad = -1;
  for (int i = 0; i < N && bad < 0; i++)
    if (bits(x[i]) != bits(want[i])) bad = i;
  CHECK(bad < 0, "%d threads: value %d: got 0x%08x, want 0x%08x", threads, bad,
        bad < 0 ? 0 : bits(x[bad]), bad < 0 ? 0 : bits(want[bad]));
  for (int i = 0; i < NP; i++)
    CHECK(bits(x[i]) == picked[i][1], "0x%08x -> 0x%08x, want 0x%08x", picked[i][0], bits(x[i]),
          picked[i][1]);
  CHECK(be->round_bf16(be, 0, NULL) == GP_OK, "n = 0 reads nothing");
  free(want);
  be->free(be, x);
  gp_backend_destroy(be);
}

/* ---- training ---- */

static const char *mlp = "name: mlp\n"
                         "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: linear, out_features: 16, name: a}\n"
                         "  - {type: gelu}\n"
                         "  - {type: dropout, p: 0.25}\n"
                         "  - {type: linear, out_features: 16}\n"
                         "  - {type: silu}\n"
                         "  - {type: linear, out_features: 16, name: b}\n"
                         "  - {type: add, from: [b, a]}\n"
                         "  - {type: tanh}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
                         "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

static const char *cnn = "name: cnn\n"
                         "inputs: {x: [2, 8, 8], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
                         "  - {type: groupnorm, groups: 2}\n"
                         "  - {type: silu}\n"
                         "  - {type: maxpool, kernel: 2}\n"
                         "  - {type: upsample, scale_factor: 2, mode: bilinear}\n"
                         "  - {type: conv_transpose2d, out_channels: 3, kernel: 3, padding: 1}\n"
                         "  - {type: relu}\n"
                         "  - {type: maxpool, kernel: 2}\n"
                         "  - {type: flatten}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {optimizer: {type: adamw, lr: 0.01}}\n";

static const char *llama =
    "name: llama\n"
    "inputs:\n"
    "  tokens: {shape: [6], dtype: i32}\n"
    "  seg: {shape: [6], dtype: i32}\n"
    "  pos: {shape: [6], dtype: i32}\n"
    "  label: {shape: [6], dtype: i32}\n"
    "blocks:\n"
    "  layer:\n"
    "    inputs: [x, seg, pos]\n"
    "    layers:\n"
    "      - {type: rmsnorm, from: x, name: n1}\n"
    "      - {type: attention, heads: 4, kv_heads: 2, dim: 16, bias: false, causal: true,\n"
    "         rope: {theta: 10000}, from: [n1, seg, pos], inputs: [query, segments, pos],\n"
    "         name: att}\n"
    "      - {type: add, from: [att, x], name: res1}\n"
    "      - {type: rmsnorm, name: n2}\n"
    "      - {type: linear, out_features: 24, bias: false, init: normal, std: 0.2, name: gate}\n"
    "      - {type: silu, name: act}\n"
    "      - {type: linear, out_features: 24, bias: false, init: normal, std: 0.2, from: n2,\n"
    "         name: up}\n"
    "      - {type: mul, from: [act, up]}\n"
    "      - {type: linear, out_features: 16, bias: false, init: normal, std: 0.2, name: down}\n"
    "      - {type: add, from: [down, res1]}\n"
    "layers:\n"
    "  - {type: embedding, num_embeddings: 13, dim: 16, init: normal, std: 0.5, from: tokens,\n"
    "     name: embed}\n"
    "  - {block: layer, from: [embed, seg, pos], repeat: 2, name: layers}\n"
    "  - {type: rmsnorm, name: norm}\n"
    "  - {type: linear, out_features: 13, bias: false, name: head}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train: {optimizer: {type: adamw, lr: 0.01}}\n";

#define STEPS 3
#define BATCH 8

typedef struct run_out {
  double loss[STEPS];
  float *w;
  int64_t n_w;
} run_out;

/* Step s's mini-batch: f32 inputs uniform in [-1, 1]; i32 ones by name: segment ids (two
 * packed rows a sample), positions restarting with each, labels and tokens below 5 or the
 * vocabulary. */
static void fill(const gp_model *mo, int step, gp_batch_buffers *b) {
  gp_rng r;
  gp_rng_seed(&r, 900 + (uint64_t)step);
  for (int i = 0; i < mo->n_inputs; i++) {
    int64_t per = gp_shape_numel(&mo->inputs[i].shape);
    const char *name = mo->inputs[i].name;
    for (int64_t k = 0; k < BATCH * per; k++) {
      int64_t j = k % per, half = (per + 1) / 2;
      if (mo->inputs[i].dtype == GP_F32)
        ((float *)b->in[i])[k] = 2.0f * gp_rng_uniform(&r) - 1.0f;
      else if (strcmp(name, "seg") == 0)
        ((int32_t *)b->in[i])[k] = j < half ? 1 : 2;
      else if (strcmp(name, "pos") == 0)
        ((int32_t *)b->in[i])[k] = (int32_t)(j < half ? j : j - half);
      else
        ((int32_t *)b->in[i])[k] = (int32_t)gp_rng_below(&r, per > 1 ? 13 : 5);
    }
  }
}

static void train(const char *text, gp_precision prec, int k, int m, gp_schedule_kind sched,
                  gp_remat remat, run_out *o) {
  gp_model *mo;
  if (gp_model_load_string(text, "bf16_mixed.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = m;
  mo->pipeline.schedule = sched;
  mo->pipeline.remat = remat;
  mo->pipeline.n_balance = 0;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .precision = prec};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die("init");
  gp_batch_buffers bufs;
  if (gp_batch_buffers_alloc(mo, BATCH, &bufs) != GP_OK) gp_t_die("buffers");
  for (int s = 0; s < STEPS; s++) {
    gp_metrics mt;
    fill(mo, s, &bufs);
    gp_batch b = gp_batch_of(&bufs, BATCH);
    if (gp_trainer_step(&t, &b, mo->train.lr, &mt) != GP_OK) gp_t_die("step");
    o->loss[s] = mt.loss;
  }
  o->w = stage_params_gather(&t, 0, &o->n_w);
  gp_batch_buffers_free(&bufs);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static double loss_diff(const run_out *a, const run_out *b) {
  double d = 0;
  for (int s = 0; s < STEPS; s++)
    d = fmax(d, fabs(a->loss[s] - b->loss[s]) / fabs(b->loss[s]));
  return d;
}

static void check_model(const char *name, const char *text) {
  static const struct {
    int k, m;
    gp_schedule_kind sched;
    gp_remat remat;
  } cases[] = {
      {3, 4, GP_SCHED_1F1B, GP_REMAT_NEVER},
      {3, 4, GP_SCHED_ZB_H1, GP_REMAT_NEVER},
      {2, 2, GP_SCHED_1F1B, GP_REMAT_EXCEPT_LAST},
      {3, 4, GP_SCHED_GPIPE, GP_REMAT_ALWAYS},
  };
  run_out fp32, bf16, want;
  train(text, GP_PREC_FP32, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &fp32);
  train(text, GP_PREC_BF16, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &bf16);
  train(text, GP_PREC_BF16_MIXED, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &want);
  double d32 = loss_diff(&want, &fp32), d16 = loss_diff(&want, &bf16);
  printf("%s: losses fp32 %.7f, bf16 %.7f, bf16-mixed %.7f (last step); bf16-mixed's relative "
         "difference to fp32 %.3g, to bf16 %.3g\n",
         name, fp32.loss[STEPS - 1], bf16.loss[STEPS - 1], want.loss[STEPS - 1], d32, d16);
  CHECK(d32 > MIN_VS_FP32, "%s: bf16-mixed's losses are fp32's (relative difference %.3g)", name,
        d32);
  CHECK(d16 > MIN_VS_BF16, "%s: bf16-mixed's losses are bf16's (relative difference %.3g)", name,
        d16);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    run_out got;
    train(text, GP_PREC_BF16_MIXED, cases[c].k, cases[c].m, cases[c].sched, cases[c].remat, &got);
    double dl = loss_diff(&got, &want), dw = stage_params_rel_diff(got.w, want.w, want.n_w);
    CHECK(got.n_w == want.n_w && dl <= TOL_EQUIV && dw <= TOL_EQUIV,
          "%s K=%d M=%d %s remat %s against K=1 M=1: loss rel diff %.3g, weight rel diff %.3g",
          name, cases[c].k, cases[c].m, gp_schedule_names()[cases[c].sched],
          gp_remat_names()[cases[c].remat], dl, dw);
    free(got.w);
  }
  free(fp32.w);
  free(bf16.w);
  free(want.w);
}

int main(void) {
  check_op(1);
  check_op(2);
  check_model("mlp", mlp);
  check_model("cnn", cnn);
  check_model("llama", llama);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
