/* CUDA graphs on a GPU (core/exec/graphs.c, core/cuda/graph.cu): training with them gives the
 * weights and losses of training without (GP_CUDA_GRAPHS=0), bit for bit, over one stage and a
 * pipeline, with batch norm (statistics counted on the host), dropout (never recorded), a
 * Transformer block (attention, norms, GELU) and a batch that changes (arenas re-planned); and
 * the graphs were replayed, not only recorded. Exits 77 (skipped) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/probe.h"
#include "core/exec/graphs.h"
#include "core/exec/pipeline.h"
#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/support/train.h"
#include "tests/train/stage_params.h"

static int failures, passes;

/* Convolutions through cuDNN, batch norm, a skip connection, GEMMs, AdamW with clipping. */
static const char *convnet =
    "name: c\n"
    "inputs: {x: [3, 8, 8], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1, "
    "bias: false, name: c0}\n"
    "  - {type: batchnorm}\n"
    "  - {type: relu}\n"
    "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1, name: c2}\n"
    "  - {type: add, from: [c2, c0]}\n"
    "  - {type: maxpool, kernel: 2}\n"
    "  - {type: flatten}\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: gelu}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
    "train: {clip_grad_norm: 1.0, optimizer: {type: adamw, lr: 0.01}}\n";

/* The same with dropout: its layers run outside the graphs (their key changes each step). */
static const char *convnet_dropout = "name: c\n"
                                     "inputs: {x: [3, 8, 8], label: {shape: [], dtype: i32}}\n"
                                     "layers:\n"
                                     "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1}\n"
                                     "  - {type: relu}\n"
                                     "  - {type: dropout, p: 0.2}\n"
                                     "  - {type: maxpool, kernel: 2}\n"
                                     "  - {type: flatten}\n"
                                     "  - {type: linear, out_features: 16}\n"
                                     "  - {type: gelu}\n"
                                     "  - {type: dropout, p: 0.1}\n"
                                     "  - {type: linear, out_features: 5}\n"
                                     "loss: {type: softmax_cross_entropy}\n"
                                     "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* A pre-norm attention block over 8 positions of 16 features, per-position classes. */
static const char *block = "name: t\n"
                           "inputs: {x: [8, 16], label: {shape: [8], dtype: i32}}\n"
                           "layers:\n"
                           "  - {type: layernorm}\n"
                           "  - {type: attention, heads: 2, causal: true, name: att}\n"
                           "  - {type: add, from: [att, x], name: r1}\n"
                           "  - {type: layernorm}\n"
                           "  - {type: linear, out_features: 32}\n"
                           "  - {type: gelu}\n"
                           "  - {type: linear, out_features: 16, name: f2}\n"
                           "  - {type: add, from: [f2, r1]}\n"
                           "  - {type: linear, out_features: 5}\n"
                           "loss: {type: softmax_cross_entropy}\n"
                           "train: {optimizer: {type: adamw, lr: 0.01}}\n";

typedef struct cfg {
  const char *name, *text;
  int k, m;
  gp_schedule_kind sched;
  gp_remat remat;
  const int64_t *batches; /* per step, 0-terminated */
} cfg;

#define MAX_STEPS 16

typedef struct run_out {
  double loss[MAX_STEPS];
  double eval[4]; /* evaluation forwards after training */
  float *w, *buf;
  int64_t n_w, n_buf;
} run_out;

static int train(const cfg *c, int graphs, run_out *o) {
  memset(o, 0, sizeof *o);
  setenv("GP_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  gp_model *mo;
  gp_plan plan;
  gp_trainer t;
  if (gp_model_load_string(c->text, "g.yaml", NULL, 0, &mo) != GP_OK) gp_t_die(c->name);
  mo->pipeline.stages = c->k;
  mo->pipeline.micro_batches = c->m;
  mo->pipeline.schedule = c->sched;
  mo->pipeline.remat = c->remat;
  mo->pipeline.n_balance = 0;
  mo->pipeline.n_devices = c->k;
  for (int s = 0; s < c->k; s++)
    snprintf(mo->pipeline.devices[s], sizeof mo->pipeline.devices[s], "cuda:0");
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK ||
      gp_trainer_init(&t, mo, &plan, &po, 11) != GP_OK) {
    CHECK(0, "%s: setup", c->name);
    gp_model_free(mo);
    return 0;
  }
  const int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  const int64_t lab = gp_shape_numel(&mo->inputs[1].shape);
  float *x = malloc(sizeof(float) * (size_t)(32 * per));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)(32 * lab));
  int ok = x && y;
  for (int s = 0; ok && c->batches[s]; s++) {
    gp_rng r;
    gp_rng_seed(&r, 500 + (uint64_t)s);
    for (int64_t i = 0; i < 32 * per; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    for (int64_t i = 0; i < 32 * lab; i++)
      y[i] = (int32_t)gp_rng_below(&r, 5);
    gp_metrics mt;
    ok = gp_t_step_xy(&t, x, y, c->batches[s], mo->train.lr, &mt) == GP_OK;
    o->loss[s] = mt.loss;
  }
  for (int v = 0; ok && v < 4; v++) {
    gp_batch b = {.in = {x, y}, .n = 16};
    gp_step_result res = {0}; /* gp_pipeline_eval adds to it */
    ok = gp_pipeline_eval(t.pl, &b, &res) == GP_OK;
    o->eval[v] = res.loss_sum;
  }
  CHECK(ok, "%s with graphs %s: training", c->name, graphs ? "on" : "off");
  if (ok) {
    o->w = stage_params_gather(&t, 0, &o->n_w);
    o->buf = stage_params_gather(&t, 1, &o->n_buf);
  }
  free(x);
  free(y);
  gp_trainer_free(&t);
  gp_model_free(mo);
  unsetenv("GP_CUDA_GRAPHS");
  return ok;
}

static void check(const cfg *c) {
  run_out off, on;
  int64_t rec0 = gp_graphs_recorded(), launch0 = gp_graphs_launched();
  train(c, 0, &off);
  CHECK(gp_graphs_recorded() == rec0 && gp_graphs_launched() == launch0,
        "%s: graphs recorded with GP_CUDA_GRAPHS=0", c->name);
  train(c, 1, &on);
  int64_t rec = gp_graphs_recorded() - rec0, launched = gp_graphs_launched() - launch0;
  int same = off.w && on.w && off.n_w == on.n_w && off.n_buf == on.n_buf &&
             !memcmp(off.w, on.w, (size_t)off.n_w * sizeof *off.w) &&
             (!off.n_buf || !memcmp(off.buf, on.buf, (size_t)off.n_buf * sizeof *off.buf)) &&
             !memcmp(off.loss, on.loss, sizeof off.loss) &&
             !memcmp(off.eval, on.eval, sizeof off.eval);
  printf("%s: %lld graphs recorded, %lld launched (%lld replays); weights, statistics and losses "
         "%s\n",
         c->name, (long long)rec, (long long)launched, (long long)(launched - rec),
         same ? "the same" : "DIFFER");
  CHECK(same, "%s: weights, statistics or losses with CUDA graphs differ from without", c->name);
  CHECK(rec > 0 && launched > rec, "%s: %lld recorded, %lld launched: none replayed", c->name,
        (long long)rec, (long long)launched);
  free(off.w);
  free(off.buf);
  free(on.w);
  free(on.buf);
}

int main(void) {
  if (gp_cuda_device_count() < 1) {
    printf("skip: no CUDA device (or this build has no CUDA)\n");
    return 77;
  }
  static const int64_t six[] = {16, 16, 16, 16, 16, 16, 0};
  static const int64_t grow[] = {12, 12, 12, 12, 16, 12, 12, 12, 12, 0};
  const cfg cfgs[] = {
      {"convnet, one stage", convnet, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, six},
      {"convnet, K=2 M=4 1F1B remat always", convnet, 2, 4, GP_SCHED_1F1B, GP_REMAT_ALWAYS, six},
      {"convnet, K=2 M=2 ZB-H1", convnet, 2, 2, GP_SCHED_ZB_H1, GP_REMAT_NEVER, six},
      {"convnet with dropout, K=2 M=2", convnet_dropout, 2, 2, GP_SCHED_GPIPE, GP_REMAT_NEVER, six},
      {"attention block, one stage M=2", block, 1, 2, GP_SCHED_GPIPE, GP_REMAT_NEVER, six},
      {"attention block, changing batch", block, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, grow},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    check(&cfgs[i]);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
