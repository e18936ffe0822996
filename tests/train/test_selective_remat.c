/* Selective re-materialization (remat auto under a memory limit): a stage first drops the
 * activations of its cheap layers (batch norm, element-wise ones, adds) in as few micro-batches
 * as fit, recomputing those layers alone before the backward, and drops whole micro-batches only
 * beyond that. Tested: the planner's choices as the limit tightens (selective before whole,
 * none where one micro-batch is in flight), the estimate within the limit, the measured
 * activation peak below remat never's, and training bit for bit remat never's at the same K, M
 * and schedule (forwards are deterministic; batch-norm running statistics included), also
 * where the loss's stage drops the logits' producer (the loss then keeps its state apart). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/pass.h"
#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/support/train.h"
#include "tests/train/stage_params.h"

/* A residual block whose add ends stage 0 (balance 9, 7): its output, a cheap layer's, is
 * handed on; relu runs in place over batch norm; dropout and gelu in stage 1. */
static const char *res = "name: res\n"
                         "inputs: {x: [2, 6, 6], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                         "  - {type: batchnorm}\n"
                         "  - {type: relu, name: a}\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                         "  - {type: batchnorm}\n"
                         "  - {type: relu}\n"
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

/* Layer norm (saved state per sample), gelu, dropout and a residual add over linears: the
 * transformer's cheap layers. Balance 5, 5: stage 0 ends in layer norm. */
static const char *ln = "name: ln\n"
                        "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                        "layers:\n"
                        "  - {type: linear, out_features: 16, name: a}\n"
                        "  - {type: layernorm}\n"
                        "  - {type: gelu}\n"
                        "  - {type: linear, out_features: 16, name: b}\n"
                        "  - {type: add, from: [b, a]}\n"
                        "  - {type: layernorm}\n"
                        "  - {type: dropout, p: 0.25}\n"
                        "  - {type: linear, out_features: 16}\n"
                        "  - {type: relu}\n"
                        "  - {type: linear, out_features: 5}\n"
                        "loss: {type: softmax_cross_entropy}\n"
                        "train: {optimizer: {type: adamw, lr: 0.01}}\n";

#define STEPS 3
#define BATCH 16
static const int bal_res[] = {9, 7}, bal_ln[] = {5, 5};
static const char *text = NULL; /* the model under test: res or ln */
static const int *bal = NULL;
static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL: %s: %s\n", text == res ? "res" : "ln", what);
  }
}

typedef struct run_out {
  double loss[STEPS];
  float *w, *buf;
  int64_t n_w, n_buf;
  size_t peak0; /* stage 0's measured activation peak */
} run_out;

static gp_model *load(gp_schedule_kind sched, gp_remat remat, size_t limit) {
  gp_model *mo;
  if (gp_model_load_string(text, "selective.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = 2;
  mo->pipeline.micro_batches = 8;
  mo->pipeline.schedule = sched;
  mo->pipeline.remat = remat;
  mo->pipeline.mem_limit = limit;
  mo->pipeline.n_balance = 2;
  memcpy(mo->pipeline.balance, bal, 2 * sizeof *bal);
  mo->train.batch_size = BATCH;
  return mo;
}

static void plan_for(gp_schedule_kind sched, size_t limit, gp_plan *plan) {
  gp_model *mo = load(sched, GP_REMAT_AUTO, limit);
  if (gp_plan_make(mo, &mo->pipeline, plan) != GP_OK) {
    gp_t_die("plan");
  }
  gp_model_free(mo);
}

/* copies: stages hand tensors by copies, not in place (gp_pipeline_opts.channels) */
static void train_by(gp_schedule_kind sched, gp_remat remat, size_t limit, int copies, run_out *o) {
  gp_model *mo = load(sched, remat, limit);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .channels = copies ? GP_CHAN_FORCE_COPY : GP_CHAN_AUTO};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die("init");
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  float *x = malloc(sizeof(float) * (size_t)(BATCH * per));
  int32_t *y = malloc(sizeof(int32_t) * BATCH);
  if (!x || !y) gp_t_die("out of memory");
  for (int s = 0; s < STEPS; s++) {
    gp_rng r;
    gp_rng_seed(&r, 1000 + (uint64_t)s);
    for (int64_t i = 0; i < BATCH * per; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < BATCH; i++)
      y[i] = (int32_t)gp_rng_below(&r, 5);
    gp_metrics mt;
    if (gp_t_step_xy(&t, x, y, BATCH, mo->train.lr, &mt) != GP_OK) gp_t_die("step");
    o->loss[s] = mt.loss;
  }
  gp_stage_stats ss;
  gp_pipeline_stats(t.pl, 0, &ss);
  o->peak0 = ss.peak_act_bytes;
  o->w = stage_params_gather(&t, 0, &o->n_w);
  o->buf = stage_params_gather(&t, 1, &o->n_buf);
  free(x);
  free(y);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static void train(gp_schedule_kind sched, gp_remat remat, size_t limit, run_out *o) {
  train_by(sched, remat, limit, 0, o);
}

/* Bit for bit: the losses, the weights and the running statistics. */
static int same(const run_out *a, const run_out *b) {
  for (int s = 0; s < STEPS; s++)
    if (a->loss[s] != b->loss[s]) return 0;
  return a->n_w == b->n_w && a->n_buf == b->n_buf &&
         memcmp(a->w, b->w, sizeof(float) * (size_t)a->n_w) == 0 &&
         memcmp(a->buf, b->buf, sizeof(float) * (size_t)a->n_buf) == 0;
}

static void free_out(run_out *o) {
  free(o->w);
  free(o->buf);
}

/* The flagged layers of stage 0: batch norm, relu and add, never a convolution. */
static void layer_set(void) {
  gp_model *mo = load(GP_SCHED_GPIPE, GP_REMAT_AUTO, 0);
  int reader[64];
  unsigned char flag[64] = {0};
  if (mo->n_inputs + mo->n_nodes > 64) gp_t_die("model too large for the test's arrays");
  gp_model_readers(mo, reader);
  int64_t bytes = gp_stage_remat_set(mo, reader, 0, mo->unit_first[9], flag, NULL);
  int ok = bytes > 0;
  for (int i = 0; i < mo->unit_first[9]; i++) {
    const char *t = mo->nodes[i].layer.type->name;
    int cheap = strcmp(t, "conv2d") != 0;
    ok &= flag[i] == cheap;
    if (flag[i] != cheap) printf("  node %d (%s) flagged %d\n", i, t, flag[i]);
  }
  check(ok, "stage 0's selective layers are its batch norms, relus and add");
  gp_model_free(mo);
}

/* The planner's choices as the limit tightens, and training under them. */
static void model(void) {
  gp_plan plan;
  plan_for(GP_SCHED_GPIPE, 0, &plan);
  double never = plan.mem_est[0];
  check(plan.remat_sel[0] == 0 && plan.remat_drop[0] == 0, "no limit: nothing dropped");
  /* tighten the limit: the first that binds drops cheap layers alone, and whole micro-batches
   * drop only once every slot drops its cheap layers */
  size_t pure = 0, mixed = 0;
  int order_ok = 1;
  for (double f = 0.99; f > 0.05 && !mixed; f -= 0.01) {
    size_t lim = (size_t)(never * f);
    gp_model *mo = load(GP_SCHED_GPIPE, GP_REMAT_AUTO, lim);
    gp_status st = gp_plan_make(mo, &mo->pipeline, &plan);
    gp_model_free(mo);
    gp_error_clear();
    if (st != GP_OK) break;
    int d = plan.remat_drop[0], s = plan.remat_sel[0];
    if (plan.mem_est[0] > (double)lim) {
      order_ok = 0;
      printf("  limit %zu: estimate %.0f over it\n", lim, plan.mem_est[0]);
    }
    if (d > 0 && d + s != 8) order_ok = 0; /* whole drops before every slot is selective */
    if (!pure && d == 0 && s > 0 && s < 8) pure = lim;
    if (d > 0 && s > 0) mixed = lim;
  }
  check(order_ok, "each limit's estimate fits it; whole micro-batches drop only after all slots "
                  "drop their cheap layers");
  check(pure > 0, "a limit where stage 0 drops the cheap layers of some micro-batches alone");
  check(mixed > 0, "a limit where stage 0 drops whole micro-batches and the others' cheap layers");

  run_out want, got;
  train(GP_SCHED_GPIPE, GP_REMAT_NEVER, 0, &want);
  if (pure) {
    train(GP_SCHED_GPIPE, GP_REMAT_AUTO, pure, &got);
    check(same(&got, &want), "gpipe selective: bit for bit remat never");
    check(got.peak0 < want.peak0, "gpipe selective: stage 0's measured peak below remat never's");
    printf("%s gpipe selective at %zu: stage 0 peak %zu bytes against %zu\n",
           text == res ? "res" : "ln", pure, got.peak0, want.peak0);
    free_out(&got);
    train_by(GP_SCHED_GPIPE, GP_REMAT_AUTO, pure, 1, &got);
    check(same(&got, &want), "gpipe selective, hand-offs by copies: bit for bit remat never");
    free_out(&got);
  }
  if (mixed) {
    train(GP_SCHED_GPIPE, GP_REMAT_AUTO, mixed, &got);
    check(same(&got, &want), "gpipe whole and selective: bit for bit remat never");
    free_out(&got);
  }
  /* the loss's stage selective: in res its logits' producer (linear 4 -> 5) is cheap, so
   * dropped, and the loss keeps its probabilities apart there (gp_node_over_input), over
   * the logits elsewhere */
  size_t last = 0;
  for (double f = 0.99; f > 0.05 && !last; f -= 0.01) {
    size_t lim = (size_t)(never * f);
    gp_model *mo = load(GP_SCHED_GPIPE, GP_REMAT_AUTO, lim);
    gp_status st = gp_plan_make(mo, &mo->pipeline, &plan);
    gp_model_free(mo);
    gp_error_clear();
    if (st != GP_OK) break;
    if (plan.remat_sel[1] > 0 && plan.remat_sel[1] < 8) last = lim;
  }
  if (text == res) check(last > 0, "a limit where the loss's stage drops its cheap layers");
  if (last) {
    train(GP_SCHED_GPIPE, GP_REMAT_AUTO, last, &got);
    check(same(&got, &want), "gpipe, the loss's stage selective: bit for bit remat never");
    free_out(&got);
  }
  free_out(&want);

  /* 1F1B: stage 0 holds 2, stage 1 one micro-batch: stage 1 never drops anything */
  plan_for(GP_SCHED_1F1B, 0, &plan);
  double full = plan.mem_est[0];
  size_t lim = 0;
  for (double f = 0.99; f > 0.05 && !lim; f -= 0.01) {
    gp_model *mo = load(GP_SCHED_1F1B, GP_REMAT_AUTO, (size_t)(full * f));
    if (gp_plan_make(mo, &mo->pipeline, &plan) == GP_OK && plan.remat_sel[0] > 0)
      lim = (size_t)(full * f);
    gp_error_clear();
    gp_model_free(mo);
  }
  if (lim)
    check(plan.remat_sel[1] == 0 && plan.remat_drop[1] == 0,
          "1f1b: the last stage (one micro-batch in flight) drops nothing");
  train(GP_SCHED_1F1B, GP_REMAT_NEVER, 0, &want);
  train(GP_SCHED_1F1B, GP_REMAT_AUTO, lim, &got);
  check(plan.remat_sel[0] > 0, "1f1b: stage 0 drops its cheap layers under the limit");
  check(same(&got, &want), "1f1b selective: bit for bit remat never");
  free_out(&got);
  free_out(&want);
}

int main(void) {
  text = res;
  bal = bal_res;
  layer_set();
  model();
  text = ln;
  bal = bal_ln;
  model();
  printf("selective re-materialization: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
