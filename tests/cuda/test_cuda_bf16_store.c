/* --precision bf16-mixed's 16-bit activation storage (core/exec/bfstore.c) on the CUDA backend:
 * be->pack_bf16 and be->unpack_bf16 against the CPU's bit for bit (every bf16 pattern), and a
 * few training steps of a Llama block and a small GPT block (layernorm, attention, gelu,
 * dropout) through two stages on cuda:0 with GP_BF16_STORE=1: bit for bit GP_BF16_STORE=0's
 * (the same values in f32 storage; cuda:0 runs deterministic kernels), stage 0's measured
 * activation peak lower, and within bf16-mixed's tolerance of the CPU's emulation. Exits 77
 * (skipped) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/cuda/cuda_check.h"
#include "tests/support/check.h"

static int failures, passes;

/* The tolerances, each with its reason. */
/* Pack and unpack move bits: the CPU's exactly. Storage on against off: the same values at the
 * same points, so the same bits. */
/* Against the CPU: the same bf16 roundings, f32 sums in other orders (cuBLAS, cuDNN); a sum
 * within ~1e-7 of a rounding boundary rounds the other way (2^-8 of that value), through 3
 * steps; as test_cuda_bf16_mixed.c. */
#define TOL_TRAIN 2e-3

static void test_ops(cc_ctx *c) {
  enum { N = 65536 + 4099 };
  uint32_t *h = malloc(sizeof(uint32_t) * N);
  if (!h) exit(1);
  gp_rng r;
  gp_rng_seed(&r, 5);
  /* every bf16 pattern (NaNs, Infs, subnormals, -0) as f32, then random ones */
  for (int i = 0; i < N; i++)
    h[i] = (i < 65536 ? (uint32_t)i : (uint32_t)gp_rng_below(&r, 65536)) << 16;
  cc_pair x, packed, back;
  if (cc_pair_alloc(c, sizeof(uint32_t) * N, h, &x) != GP_OK ||
      cc_pair_alloc(c, sizeof(uint16_t) * N, NULL, &packed) != GP_OK ||
      cc_pair_alloc(c, sizeof(uint32_t) * N, NULL, &back) != GP_OK) {
    printf("FAIL: alloc: %s\n", gp_error_message());
    exit(1);
  }
  CHECK(c->cpu->pack_bf16(c->cpu, N, x.cpu.p, packed.cpu.p) == GP_OK, "cpu pack_bf16");
  CHECK(c->gpu->pack_bf16(c->gpu, N, x.gpu.p, packed.gpu.p) == GP_OK, "cuda pack_bf16");
  CHECK(cc_pair_equal(&packed, "pack_bf16"), "pack_bf16: the CPU's bits");
  CHECK(c->cpu->unpack_bf16(c->cpu, N, packed.cpu.p, back.cpu.p) == GP_OK, "cpu unpack_bf16");
  CHECK(c->gpu->unpack_bf16(c->gpu, N, packed.gpu.p, back.gpu.p) == GP_OK, "cuda unpack_bf16");
  CHECK(cc_pair_equal(&back, "unpack_bf16"), "unpack_bf16: the CPU's bits");
  uint32_t *got = malloc(sizeof(uint32_t) * N);
  CHECK(got && cc_buf_download(&back.gpu, got, sizeof(uint32_t) * N) == GP_OK &&
            memcmp(got, h, sizeof(uint32_t) * N) == 0,
        "cuda: unpack(pack(x)) is x on the grid");
  CHECK(c->gpu->pack_bf16(c->gpu, 0, NULL, NULL) == GP_OK &&
            c->gpu->unpack_bf16(c->gpu, 0, NULL, NULL) == GP_OK,
        "cuda: n = 0 reads nothing");
  free(got);
  cc_pair_free(&x);
  cc_pair_free(&packed);
  cc_pair_free(&back);
  free(h);
}

static const char *llama =
    "name: llama\n"
    "inputs:\n"
    "  tokens: {shape: [8], dtype: i32}\n"
    "  seg: {shape: [8], dtype: i32}\n"
    "  pos: {shape: [8], dtype: i32}\n"
    "  label: {shape: [8], dtype: i32}\n"
    "blocks:\n"
    "  layer:\n"
    "    inputs: [x, seg, pos]\n"
    "    layers:\n"
    "      - {type: rmsnorm, from: x, name: n1}\n"
    "      - {type: attention, heads: 4, kv_heads: 2, dim: 32, bias: false, causal: true,\n"
    "         rope: {theta: 10000}, from: [n1, seg, pos], inputs: [query, segments, pos],\n"
    "         name: att}\n"
    "      - {type: add, from: [att, x], name: res1}\n"
    "      - {type: rmsnorm, name: n2}\n"
    "      - {type: linear, out_features: 48, bias: false, init: normal, std: 0.2, name: gate}\n"
    "      - {type: silu, name: act}\n"
    "      - {type: linear, out_features: 48, bias: false, init: normal, std: 0.2, from: n2,\n"
    "         name: up}\n"
    "      - {type: mul, from: [act, up]}\n"
    "      - {type: linear, out_features: 32, bias: false, init: normal, std: 0.2, name: down}\n"
    "      - {type: add, from: [down, res1]}\n"
    "layers:\n"
    "  - {type: embedding, num_embeddings: 13, dim: 32, init: normal, std: 0.5, from: tokens,\n"
    "     name: embed}\n"
    "  - {block: layer, from: [embed, seg, pos], repeat: 2, name: layers}\n"
    "  - {type: rmsnorm, name: norm}\n"
    "  - {type: linear, out_features: 13, bias: false, name: head}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* models/transformer-lm.yaml's block, small */
static const char *gpt =
    "name: gpt\n"
    "inputs:\n"
    "  tokens: {shape: [8], dtype: i32}\n"
    "  seg: {shape: [8], dtype: i32}\n"
    "  pos: {shape: [8], dtype: i32}\n"
    "  label: {shape: [8], dtype: i32}\n"
    "blocks:\n"
    "  layer:\n"
    "    inputs: [x, seg]\n"
    "    layers:\n"
    "      - {type: layernorm, name: ln1, from: x}\n"
    "      - {type: attention, heads: 2, dim: 32, dropout: 0.1, causal: true, from: [ln1, seg],\n"
    "         inputs: [query, segments], name: att}\n"
    "      - {type: dropout, p: 0.1, name: att_drop}\n"
    "      - {type: add, from: [att_drop, x], name: res1}\n"
    "      - {type: layernorm, name: ln2}\n"
    "      - {type: linear, out_features: 64, name: ff1}\n"
    "      - {type: gelu}\n"
    "      - {type: linear, out_features: 32, name: ff2}\n"
    "      - {type: dropout, p: 0.1, name: ff_drop}\n"
    "      - {type: add, from: [ff_drop, res1]}\n"
    "layers:\n"
    "  - {type: embedding, num_embeddings: 13, dim: 32, from: tokens, name: embed}\n"
    "  - {type: positional, max_len: 8, kind: learned, from: [embed, pos], name: pos}\n"
    "  - {type: dropout, p: 0.1, name: drop}\n"
    "  - {block: layer, from: [drop, seg], repeat: 2, name: h}\n"
    "  - {type: layernorm, name: ln_f}\n"
    "  - {type: linear, out_features: 13, name: logits}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train: {optimizer: {type: adamw, lr: 0.001}}\n";

#define STEPS 3
#define BATCH 8

/* As tests/train/test_bf16_mixed.c: f32 inputs uniform, i32 ones by name. */
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

typedef struct run_out {
  double loss[STEPS];
  float *w;
  int64_t n_w;
  size_t peak0;
} run_out;

/* STEPS steps of bf16-mixed, 2 stages, 2 micro-batches on device, with 16-bit storage or not:
 * losses, weights, stage 0's activation peak. 0 (message printed) when it could not run. */
static int train(const char *text, const char *device, int store, run_out *o) {
  gp_model *mo = NULL;
  o->w = NULL;
  setenv("GP_BF16_STORE", store ? "1" : "0", 1);
  if (gp_model_load_string(text, "bf16_store.yaml", NULL, 0, &mo) != GP_OK) {
    printf("FAIL: load: %s\n", gp_error_message());
    return 0;
  }
  mo->pipeline.stages = 2;
  mo->pipeline.micro_batches = 2;
  mo->pipeline.n_balance = 0;
  mo->pipeline.n_devices = 1;
  snprintf(mo->pipeline.devices[0], sizeof mo->pipeline.devices[0], "%s", device);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .precision = GP_PREC_BF16_MIXED};
  int ok = gp_plan_make(mo, &mo->pipeline, &plan) == GP_OK &&
           gp_trainer_init(&t, mo, &plan, &po, 42) == GP_OK;
  if (!ok) {
    printf("FAIL: %s: pipeline: %s\n", device, gp_error_message());
    gp_model_free(mo);
    return 0;
  }
  gp_batch_buffers bufs;
  ok = gp_batch_buffers_alloc(mo, BATCH, &bufs) == GP_OK;
  for (int s = 0; ok && s < STEPS; s++) {
    gp_metrics mt;
    fill(mo, s, &bufs);
    gp_batch b = gp_batch_of(&bufs, BATCH);
    ok = gp_trainer_step(&t, &b, mo->train.lr, &mt) == GP_OK;
    if (ok) o->loss[s] = mt.loss;
  }
  ok = ok && gp_pipeline_sync(t.pl) == GP_OK;
  gp_stage_stats ss;
  gp_pipeline_stats(t.pl, 0, &ss);
  o->peak0 = ss.peak_act_bytes;
  o->n_w = 0;
  for (int s = 0; s < gp_pipeline_stages(t.pl); s++)
    o->n_w += gp_pipeline_params(t.pl, s)->n_train;
  o->w = malloc(sizeof(float) * (size_t)(o->n_w + 1));
  ok = ok && o->w;
  int64_t at = 0;
  for (int s = 0; ok && s < gp_pipeline_stages(t.pl); s++) {
    gp_params *p = gp_pipeline_params(t.pl, s);
    gp_backend *be = gp_pipeline_backend(t.pl, s);
    ok = be->to_host(be, o->w + at, p->train, sizeof(float) * (size_t)p->n_train) == GP_OK;
    at += p->n_train;
  }
  if (!ok) printf("FAIL: %s: training: %s\n", device, gp_error_message());
  gp_batch_buffers_free(&bufs);
  gp_trainer_free(&t);
  gp_model_free(mo);
  unsetenv("GP_BF16_STORE");
  return ok;
}

static double rel_diff(const run_out *a, const run_out *b) {
  double ref = 1e-30, d = 0;
  for (int s = 0; s < STEPS; s++)
    d = fmax(d, fabs(a->loss[s] - b->loss[s]) / fabs(b->loss[s]));
  double dw = 0;
  for (int64_t i = 0; i < a->n_w; i++) {
    dw = fmax(dw, fabs((double)a->w[i] - b->w[i]));
    ref = fmax(ref, fabs((double)b->w[i]));
  }
  return fmax(d, dw / ref);
}

static void test_training(const char *name, const char *text) {
  run_out on, off, cpu;
  int ok = train(text, "cuda:0", 1, &on);
  ok &= train(text, "cuda:0", 0, &off);
  ok &= train(text, "cpu", 1, &cpu);
  CHECK(ok && on.n_w == off.n_w && on.n_w == cpu.n_w, "%s: training ran", name);
  if (ok && on.n_w == off.n_w && on.n_w == cpu.n_w) {
    int same = memcmp(on.loss, off.loss, sizeof on.loss) == 0 &&
               memcmp(on.w, off.w, sizeof(float) * (size_t)on.n_w) == 0;
    double d = rel_diff(&on, &cpu);
    printf("%s: cuda:0 stage 0 peak %zu bytes in 16 bits, %zu in f32 (%.2f); %s; against the "
           "cpu: %.3g\n",
           name, on.peak0, off.peak0, (double)on.peak0 / (double)off.peak0,
           same ? "bit for bit" : "DIFFERENT", d);
    CHECK(same, "%s: cuda:0 16-bit storage changed the numbers (rel diff %.3g)", name,
          rel_diff(&on, &off));
    CHECK(on.peak0 < off.peak0, "%s: cuda:0 peak %zu not below f32's %zu", name, on.peak0,
          off.peak0);
    CHECK(d <= TOL_TRAIN, "%s: cuda:0 against the cpu: rel diff %.3g", name, d);
  }
  free(on.w);
  free(off.w);
  free(cpu.w);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_ops(&c);
  cc_close(&c);
  test_training("llama", llama);
  test_training("gpt", gpt);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
