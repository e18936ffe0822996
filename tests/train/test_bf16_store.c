/* --precision bf16-mixed's activations kept in 16 bits (core/exec/bfstore.c): the pack and
 * unpack ops bit for bit (every value on the bf16 grid, NaNs and Infs included), and training
 * with GP_BF16_STORE=1 (the default) bit for bit GP_BF16_STORE=0's (f32 storage of the same
 * values) on an MLP, a CNN with an in-place relu, a Llama block and a tiny transformer-lm (the
 * model file, --set smaller), at K = 1 and K = 2, M = 2 (GPipe, GPipe with re-materialization,
 * 1F1B, ZB-H1's deferred weight half) and selective re-materialization, with stage 0's measured
 * activation peak lower where the slots keep activations; the planner's estimate lower too.
 * argv[1]: models/transformer-lm.yaml. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan/cost.h"
#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/train/stage_params.h"

static int failures, passes;

/* ---- the ops ---- */

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

static void check_ops(int threads) {
  gp_backend *be;
  if (gp_cpu_backend_create(threads, &be) != GP_OK) gp_t_die("backend");
  enum { N = 70001 };
  float *x = NULL, *y = NULL;
  uint16_t *h = NULL;
  if (be->alloc(be, sizeof(float) * N, (void **)&x) != GP_OK ||
      be->alloc(be, sizeof(float) * N, (void **)&y) != GP_OK ||
      be->alloc(be, sizeof(uint16_t) * N, (void **)&h) != GP_OK)
    gp_t_die("alloc");
  gp_rng r;
  gp_rng_seed(&r, 11);
  /* every 16-bit pattern (NaNs, Infs, subnormals, -0), then random ones */
  for (int i = 0; i < N; i++)
    x[i] = from_bits((i < 65536 ? (uint32_t)i : (uint32_t)gp_rng_below(&r, 65536)) << 16);
  CHECK(be->pack_bf16(be, N, x, h) == GP_OK && be->unpack_bf16(be, N, h, y) == GP_OK,
        "pack and unpack %d values", N);
  int bad = -1;
  for (int i = 0; i < N && bad < 0; i++)
    if (h[i] != (uint16_t)(bits(x[i]) >> 16) || bits(y[i]) != bits(x[i])) bad = i;
  CHECK(bad < 0, "%d threads: value %d (0x%08x): packed 0x%04x, back 0x%08x", threads, bad,
        bad < 0 ? 0 : bits(x[bad]), bad < 0 ? 0 : h[bad], bad < 0 ? 0 : bits(y[bad]));
  CHECK(be->pack_bf16(be, 0, NULL, NULL) == GP_OK && be->unpack_bf16(be, 0, NULL, NULL) == GP_OK,
        "n = 0 reads nothing");
  be->free(be, x);
  be->free(be, y);
  be->free(be, h);
  gp_backend_destroy(be);
}

/* ---- training ---- */

static const char *mlp = "name: mlp\n"
                         "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: linear, out_features: 16, name: a}\n"
                         "  - {type: layernorm}\n"
                         "  - {type: gelu}\n"
                         "  - {type: dropout, p: 0.25}\n"
                         "  - {type: linear, out_features: 16, name: b}\n"
                         "  - {type: add, from: [b, a]}\n"
                         "  - {type: relu}\n"
                         "  - {type: linear, out_features: 16}\n"
                         "  - {type: tanh}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
                         "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* relu in place over batch norm (one storage, packed once under both names) */
static const char *cnn = "name: cnn\n"
                         "inputs: {x: [2, 6, 6], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                         "  - {type: batchnorm}\n"
                         "  - {type: relu, name: a}\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                         "  - {type: batchnorm, name: b}\n"
                         "  - {type: add, from: [b, a]}\n"
                         "  - {type: relu}\n"
                         "  - {type: dropout, p: 0.2}\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
                         "  - {type: batchnorm}\n"
                         "  - {type: gelu}\n"
                         "  - {type: global_avgpool}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {optimizer: {type: sgd, lr: 0.05, momentum: 0.9}}\n";

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

/* models/transformer-lm.yaml, small: d 32, 2 heads, 2 layers, T 12, vocabulary 13 */
static const gp_override lm_set[] = {
    {"blocks.layer.params.d", "32", NULL},  {"blocks.layer.params.heads", "2", NULL},
    {"blocks.layer.params.ff", "64", NULL}, {"layers.0.num_embeddings", "13", NULL},
    {"layers.0.dim", "32", NULL},           {"layers.1.max_len", "12", NULL},
    {"layers.3.repeat", "2", NULL},         {"layers.5.out_features", "13", NULL},
    {"inputs.tokens.shape.0", "12", NULL},  {"inputs.seg.shape.0", "12", NULL},
    {"inputs.pos.shape.0", "12", NULL},     {"inputs.label.shape.0", "12", NULL},
};
static const char *lm_file;

#define STEPS 3
#define BATCH 8

typedef struct run_out {
  double loss[STEPS];
  float *w, *buf;
  int64_t n_w, n_buf;
  size_t peak0; /* stage 0's measured activation peak */
} run_out;

/* Step s's mini-batch: f32 inputs uniform in [-1, 1]; i32 ones by name: segment ids (two
 * packed rows a sample), positions restarting with each, labels and tokens below 13 or 5. */
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

typedef struct run_case {
  int k, m;
  gp_schedule_kind sched;
  gp_remat remat;
  int selective; /* remat auto under a limit where stage 0 drops some slots' cheap layers */
} run_case;

static gp_model *load(const char *text) {
  gp_model *mo;
  gp_status s = text ? gp_model_load_string(text, "bf16_store.yaml", NULL, 0, &mo)
                     : gp_model_load(lm_file, lm_set, sizeof lm_set / sizeof lm_set[0], &mo);
  if (s != GP_OK) gp_t_die("load");
  return mo;
}

static void setup(gp_model *mo, const run_case *c, size_t limit) {
  mo->pipeline.stages = c->k;
  mo->pipeline.micro_batches = c->m;
  mo->pipeline.schedule = c->sched;
  mo->pipeline.remat = c->selective ? GP_REMAT_AUTO : c->remat;
  mo->pipeline.mem_limit = limit;
  mo->pipeline.n_balance = 0;
  mo->train.batch_size = BATCH;
}

/* A limit under which stage 0 drops the cheap layers of some micro-batches alone (the
 * planner's estimate, f32 storage: it holds under 16-bit storage too), or 0 where none. */
static size_t selective_limit(const char *text, const run_case *c) {
  gp_plan plan;
  gp_model *mo = load(text);
  setup(mo, c, 0);
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  double never = plan.mem_est[0];
  size_t found = 0;
  for (double f = 0.99; f > 0.05 && !found; f -= 0.01) {
    size_t lim = (size_t)(never * f);
    mo->pipeline.mem_limit = lim;
    gp_status st = gp_plan_make(mo, &mo->pipeline, &plan);
    gp_error_clear();
    if (st != GP_OK) break;
    if (plan.remat_drop[0] == 0 && plan.remat_sel[0] > 0 && plan.remat_sel[0] < c->m) found = lim;
  }
  gp_model_free(mo);
  return found;
}

static void train(const char *text, const run_case *c, size_t limit, int store, run_out *o) {
  setenv("GP_BF16_STORE", store ? "1" : "0", 1);
  gp_model *mo = load(text);
  setup(mo, c, limit);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .precision = GP_PREC_BF16_MIXED};
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
  gp_stage_stats ss;
  gp_pipeline_stats(t.pl, 0, &ss);
  o->peak0 = ss.peak_act_bytes;
  o->w = stage_params_gather(&t, 0, &o->n_w);
  o->buf = stage_params_gather(&t, 1, &o->n_buf);
  gp_batch_buffers_free(&bufs);
  gp_trainer_free(&t);
  gp_model_free(mo);
  unsetenv("GP_BF16_STORE");
}

/* Bit for bit: the losses, the weights and the buffers (running statistics). */
static int same(const run_out *a, const run_out *b) {
  for (int s = 0; s < STEPS; s++)
    if (memcmp(&a->loss[s], &b->loss[s], sizeof a->loss[s]) != 0) return 0;
  return a->n_w == b->n_w && a->n_buf == b->n_buf &&
         memcmp(a->w, b->w, sizeof(float) * (size_t)a->n_w) == 0 &&
         memcmp(a->buf, b->buf, sizeof(float) * (size_t)a->n_buf) == 0;
}

static void check_model(const char *name, const char *text) {
  static const run_case cases[] = {
      {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, 0},  {2, 2, GP_SCHED_GPIPE, GP_REMAT_NEVER, 0},
      {2, 2, GP_SCHED_GPIPE, GP_REMAT_ALWAYS, 0}, {2, 2, GP_SCHED_1F1B, GP_REMAT_NEVER, 0},
      {2, 4, GP_SCHED_ZB_H1, GP_REMAT_NEVER, 0},  {2, 4, GP_SCHED_GPIPE, GP_REMAT_NEVER, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const run_case *c = &cases[i];
    size_t limit = c->selective ? selective_limit(text, c) : 0;
    if (c->selective && !limit) {
      printf("%s: no limit with selective re-materialization alone: case skipped\n", name);
      continue;
    }
    run_out off, on;
    train(text, c, limit, 0, &off);
    train(text, c, limit, 1, &on);
    const char *how = c->selective ? "selective" : gp_remat_names()[c->remat];
    printf("%s K=%d M=%d %s remat %s: stage 0 peak %zu bytes in 16 bits, %zu in f32 (%.2f)\n", name,
           c->k, c->m, gp_schedule_names()[c->sched], how, on.peak0, off.peak0,
           (double)on.peak0 / (double)off.peak0);
    CHECK(same(&on, &off), "%s K=%d M=%d %s remat %s: 16-bit storage changed the numbers", name,
          c->k, c->m, gp_schedule_names()[c->sched], how);
    /* remat always keeps no activations in the slots: nothing to pack. The cnn's stage 0 at
     * K = 2 packs one tensor (its other outputs are stage 1's, f32): what two slots save, one
     * widened copy takes back while a node reads it. */
    if (c->remat == GP_REMAT_ALWAYS || (text == cnn && c->k > 1))
      CHECK(on.peak0 <= off.peak0, "%s K=%d remat %s: peak %zu above f32's %zu", name, c->k, how,
            on.peak0, off.peak0);
    else
      CHECK(on.peak0 < off.peak0, "%s K=%d M=%d %s remat %s: peak %zu not below f32's %zu", name,
            c->k, c->m, gp_schedule_names()[c->sched], how, on.peak0, off.peak0);
    free(off.w);
    free(off.buf);
    free(on.w);
    free(on.buf);
  }
}

/* The planner's activation bytes (gpipe-partition --precision bf16-mixed): lower in total, and
 * in each unit by at most half (outputs are packed, saved state is not). */
static void check_estimate(const char *name, const char *text) {
  gp_model *mo = load(text);
  gp_unit_costs f32, b16;
  if (gp_unit_costs_compute(mo, BATCH, GP_COST_FLOPS, 1, NULL, &f32) != GP_OK ||
      gp_unit_costs_compute(mo, BATCH, GP_COST_FLOPS, 1, NULL, &b16) != GP_OK ||
      gp_unit_costs_bf16_store(mo, &b16) != GP_OK)
    gp_t_die("costs");
  int64_t a = 0, b = 0;
  for (int u = 0; u < f32.n; u++) {
    a += f32.act_bytes[u];
    b += b16.act_bytes[u];
    CHECK(b16.act_bytes[u] <= f32.act_bytes[u] && 2 * b16.act_bytes[u] >= f32.act_bytes[u],
          "%s unit %d: %lld bytes in 16 bits against %lld", name, u, (long long)b16.act_bytes[u],
          (long long)f32.act_bytes[u]);
  }
  printf("%s: planner's activation bytes %lld in 16 bits, %lld in f32 (%.2f)\n", name, (long long)b,
         (long long)a, (double)b / (double)a);
  CHECK(b < a, "%s: the estimate did not drop (%lld against %lld)", name, (long long)b,
        (long long)a);
  gp_unit_costs_free(&f32);
  gp_unit_costs_free(&b16);
  gp_model_free(mo);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_bf16_store models/transformer-lm.yaml\n");
    return 2;
  }
  lm_file = argv[1];
  check_ops(1);
  check_ops(2);
  check_model("mlp", mlp);
  check_model("cnn", cnn);
  check_model("llama", llama);
  check_model("transformer-lm", NULL);
  check_estimate("llama", llama);
  check_estimate("transformer-lm", NULL);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
