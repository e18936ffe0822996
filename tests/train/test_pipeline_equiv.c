/* GPipe's promise, tested: K, M, the schedule and re-materialization change neither the losses
 * nor the weights. Five models without batch norm (an MLP, a CNN, a skip connection over two
 * stage boundaries, untrained first units, tied weights), with dropout, trained a few steps
 * against K = 1, M = 1 over a covering design of K in 1..4, M in {1, 2, 4, 8}, every schedule
 * and mode, hand-offs in place or by copies, even and uneven micro-batches: every pair of
 * levels at least once (tests/support/covering.h). Zero-bubble is also bit for bit 1F1B's;
 * interleaved (V chunks a stage) and several threads a stage have their own cases. With batch
 * norm, every mode and schedule gives identical running statistics. A failing stage stops the
 * others and is named with its micro-batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/train/stage_params.h"
#include "tests/support/check.h"
#include "tests/support/covering.h"
#include "tests/support/train.h"

/* Summation order over micro-batches only: a few float roundings per step. */
#define TOL_REL 1e-5

static const char *mlp =
    "name: mlp\n"
    "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: relu}\n"
    "  - {type: dropout, p: 0.25}\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: gelu}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
    "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01}}\n";

static const char *cnn = "name: cnn\n"
                         "inputs: {x: [2, 8, 8], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
                         "  - {type: relu}\n"
                         "  - {type: maxpool, kernel: 2}\n"
                         "  - {type: conv2d, out_channels: 6, kernel: [1, 3], padding: [0, 1]}\n"
                         "  - {type: tanh}\n"
                         "  - {type: flatten}\n"
                         "  - {type: dropout, p: 0.2}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* 'a' (unit 0) is read by unit 5: with balance 2,2,2,2 it crosses two stage boundaries. */
static const char *skip =
    "name: skip\n"
    "inputs: {x: [10], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: linear, out_features: 12, name: a}\n"
    "  - {type: tanh}\n"
    "  - {type: linear, out_features: 12}\n"
    "  - {type: sigmoid}\n"
    "  - {type: linear, out_features: 12, name: b}\n"
    "  - {type: add, from: [b, a]}\n"
    "  - {type: dropout, p: 0.3}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train: {clip_grad_norm: 0.5, optimizer: {type: rmsprop, lr: 0.01, momentum: 0.5}}\n";

/* Three parameter-free units on the input: nothing there trains, so the gradients handed back
 * across the first cuts are zeros, but they must still come: they tell the producer its slot
 * is free (skipping them let 1F1B reuse a slot under its consumer). */
static const char *prefix = "name: prefix\n"
                            "inputs: {x: [2, 3, 2], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: flatten}\n"
                            "  - {type: tanh}\n"
                            "  - {type: sigmoid}\n"
                            "  - {type: linear, out_features: 9}\n"
                            "  - {type: relu}\n"
                            "  - {type: linear, out_features: 5}\n"
                            "loss: {type: softmax_cross_entropy}\n"
                            "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

static const char *bn = "name: bn\n"
                        "inputs: {x: [2, 6, 6], label: {shape: [], dtype: i32}}\n"
                        "layers:\n"
                        "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                        "  - {type: batchnorm}\n"
                        "  - {type: relu}\n"
                        "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
                        "  - {type: batchnorm, name: bn2}\n"
                        "  - {type: dropout, p: 0.1}\n"
                        "  - {type: global_avgpool}\n"
                        "  - {type: linear, out_features: 5}\n"
                        "loss: {type: softmax_cross_entropy}\n"
                        "train: {optimizer: {type: sgd, lr: 0.05, momentum: 0.9}}\n";

#define STEPS 3
static int passed, failed;

typedef struct run_out {
  double loss[STEPS];
  float *w;   /* trainable parameters, all stages in order */
  float *buf; /* buffers (running statistics), all stages in order */
  int64_t n_w, n_buf;
} run_out;

typedef struct cfg {
  int k, m;
  gp_schedule_kind sched;
  gp_remat remat;
  const int *balance; /* NULL: automatic */
  int64_t batch;
  int copy_all;     /* hand tensors between stages by copies (gp_pipeline_opts.channels) */
  int cores;        /* shared by the stages (gp_pipeline_opts.cores); 0: one */
  size_t mem_limit; /* per stage, what remat auto fits (gp_pipeline_spec.mem_limit); 0: none */
  int v;            /* interleaved: chunks per stage (balance: k v entries); 0: one */
} cfg;

static void batch_data(const gp_model *mo, int64_t batch, int step, float *x, int32_t *y) {
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  gp_rng r;
  gp_rng_seed(&r, 1000 + (uint64_t)step);
  for (int64_t i = 0; i < batch * per; i++)
    x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
  for (int64_t i = 0; i < batch; i++)
    y[i] = (int32_t)gp_rng_below(&r, 5);
}

static void train(const char *text, const cfg *c, run_out *o) {
  gp_model *mo;
  if (gp_model_load_string(text, "equiv.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = c->k;
  mo->pipeline.micro_batches = c->m;
  mo->pipeline.schedule = c->sched;
  mo->pipeline.remat = c->remat;
  mo->pipeline.mem_limit = c->mem_limit;
  mo->pipeline.virtual_stages = c->v > 1 ? c->v : 1;
  mo->pipeline.n_balance = 0;
  if (c->balance) {
    mo->pipeline.n_balance = c->k * mo->pipeline.virtual_stages;
    for (int s = 0; s < mo->pipeline.n_balance; s++)
      mo->pipeline.balance[s] = c->balance[s];
  }
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = c->cores > 0 ? c->cores : 1,
                         .channels = c->copy_all ? GP_CHAN_FORCE_COPY : GP_CHAN_AUTO};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die("init");
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  float *x = malloc(sizeof(float) * (size_t)(c->batch * per));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)c->batch);
  for (int s = 0; s < STEPS; s++) {
    gp_metrics mt;
    batch_data(mo, c->batch, s, x, y);
    if (gp_t_step_xy(&t, x, y, c->batch, mo->train.lr, &mt) != GP_OK) gp_t_die("step");
    o->loss[s] = mt.loss;
  }
  o->w = stage_params_gather(&t, 0, &o->n_w);
  o->buf = stage_params_gather(&t, 1, &o->n_buf);
  free(x);
  free(y);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static void compare(const char *model, const cfg *c, const run_out *got, const run_out *want,
                    int exact_buffers) {
  const char *const *sn = gp_schedule_names(), *const *rn = gp_remat_names();
  double dl = 0, dw = stage_params_rel_diff(got->w, want->w, want->n_w);
  for (int s = 0; s < STEPS; s++)
    dl = fmax(dl, fabs(got->loss[s] - want->loss[s]) / fabs(want->loss[s]));
  int ok = got->n_w == want->n_w && dl <= TOL_REL && dw <= TOL_REL;
  if (exact_buffers)
    ok =
        ok && got->n_buf == want->n_buf &&
        (want->n_buf == 0 || memcmp(got->buf, want->buf, sizeof(float) * (size_t)want->n_buf) == 0);
  if (ok) {
    passed++;
    return;
  }
  failed++;
  printf("FAIL: %s K=%d V=%d M=%d batch=%lld %s remat=%s%s: loss rel diff %.3g, weight rel diff "
         "%.3g%s\n",
         model, c->k, c->v > 1 ? c->v : 1, c->m, (long long)c->batch, sn[c->sched], rn[c->remat],
         c->copy_all ? " copies" : "", dl, dw, exact_buffers ? " (buffers must be identical)" : "");
}

static void free_out(run_out *o) {
  free(o->w);
  free(o->buf);
}

/* Two weights tied across stages (a's and c's: one parameter, its gradients summed, one
 * update), and across chunks: with K = 2 or 4 and V = 2, on one device in different chunks;
 * with K = 3, on two devices. AdamW's eps is a model file's 1e-9. */
static const char *tied =
    "name: tied\n"
    "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: linear, out_features: 12, name: a}\n"
    "  - {type: tanh}\n"
    "  - {type: linear, out_features: 12, name: b}\n"
    "  - {type: sigmoid}\n"
    "  - {type: linear, out_features: 12, name: c}\n"
    "  - {type: tanh}\n"
    "  - {type: dropout, p: 0.2}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "tied: {w: {params: [a.weight, c.weight]}}\n"
    "train: {clip_grad_norm: 0.5, optimizer: {type: adamw, lr: 0.01, eps: 1e-9}}\n";

/* The models of the covering design, with their balances per K (NULL: automatic). */
static const int b1[] = {8}, b2[] = {4, 4}, b3[] = {2, 2, 4}, b4[] = {2, 2, 2, 2};
static const int p1[] = {6}, p2[] = {1, 5}, p3[] = {1, 1, 4}, p4[] = {1, 1, 1, 3};
static const struct {
  const char *name, **text;
  const int *balance[4];
} models[] = {{"mlp", &mlp, {0}},
              {"cnn", &cnn, {0}},
              {"skip", &skip, {b1, b2, b3, b4}}, /* 'a' crosses two stage boundaries */
              {"prefix", &prefix, {p1, p2, p3, p4}},
              {"tied", &tied, {0}}};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

/* The factors: model, K in 1..4, M in {1, 2, 4, 8}, every schedule and re-materialization mode
 * the names list, hand-offs in place or by copies, and a batch of 8 or 10 (10 splits unevenly
 * into 4 and 8 micro-batches). */
enum { F_MODEL, F_K, F_M, F_SCHED, F_REMAT, F_COPY, F_BATCH, F_N };
static const int ms[] = {1, 2, 4, 8};

static int n_names(const char *const *names) {
  int n = 0;
  while (names[n])
    n++;
  return n;
}

static cfg row_cfg(const int *row) {
  int k = row[F_K] + 1;
  cfg c = {k,
           ms[row[F_M]],
           (gp_schedule_kind)row[F_SCHED],
           (gp_remat)row[F_REMAT],
           models[row[F_MODEL]].balance[k - 1],
           row[F_BATCH] ? 10 : 8,
           row[F_COPY]};
  return c;
}

/* A row runs when its schedule can be built for it (the builders refuse what a schedule cannot
 * do: those are checked to be refused, below). */
static int row_allowed(const int *row, void *ctx) {
  (void)ctx;
  cfg c = row_cfg(row);
  gp_schedule sc;
  if (gp_schedule_build(c.sched, c.remat, c.k, c.m, &sc) != GP_OK) return 0;
  gp_schedule_free(&sc);
  return 1;
}

static double row_cost(const int *row, void *ctx) {
  (void)ctx;
  return (row[F_K] + 1) * ms[row[F_M]];
}

/* GPipe's promise over the covering design: each row's losses and weights within TOL_REL of
 * K = 1, M = 1 on the same model and batch. Every pair of levels of two factors that a
 * runnable row holds is in some row; a pair no schedule can run is refused in one line. */
static void covering_grid(void) {
  gp_cover_spec sp = {
      .factors = F_N,
      .levels = {N_MODELS, 4, 4, n_names(gp_schedule_names()), n_names(gp_remat_names()), 2, 2},
      .allowed = row_allowed,
      .cost = row_cost};
  int *rows, n, pairs, missing;
  if (gp_cover_pairs(&sp, &rows, &n, &pairs, &missing) != 0) gp_t_die("covering design");
  run_out want[N_MODELS][2];
  int have[N_MODELS][2] = {{0}};
  for (int r = 0; r < n; r++) {
    const int *row = rows + r * F_N;
    cfg c = row_cfg(row);
    int mi = row[F_MODEL], bi = row[F_BATCH];
    if (!have[mi][bi]) {
      cfg ref = {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, c.batch, 0};
      train(*models[mi].text, &ref, &want[mi][bi]);
      have[mi][bi] = 1;
    }
    run_out got;
    train(*models[mi].text, &c, &got);
    compare(models[mi].name, &c, &got, &want[mi][bi], 0);
    free_out(&got);
  }
  for (int mi = 0; mi < N_MODELS; mi++)
    for (int bi = 0; bi < 2; bi++)
      if (have[mi][bi]) free_out(&want[mi][bi]);
  printf("covering design: %d runs cover %d pairs of levels (%d pairs no runnable row holds)\n", n,
         pairs, missing);
  free(rows);
}

/* What a schedule cannot run (its builder refuses K, M and the mode) is refused in one line
 * when the pipeline is made, before any step. */
static void refusals(void) {
  int seen = 0;
  for (int si = 0; gp_schedule_names()[si]; si++)
    for (int ri = 0; gp_remat_names()[ri]; ri++)
      for (int k = 1; k <= 4; k++)
        for (int mi = 0; mi < 4; mi++) {
          gp_schedule sc;
          gp_error_clear();
          if (gp_schedule_build((gp_schedule_kind)si, (gp_remat)ri, k, ms[mi], &sc) == GP_OK) {
            gp_schedule_free(&sc);
            continue;
          }
          seen++;
          gp_model *mo;
          if (gp_model_load_string(mlp, "equiv.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
          mo->pipeline.stages = k;
          mo->pipeline.micro_batches = ms[mi];
          mo->pipeline.schedule = (gp_schedule_kind)si;
          mo->pipeline.remat = (gp_remat)ri;
          gp_plan plan;
          gp_trainer t;
          gp_pipeline_opts po = {.cores = 1};
          gp_status st = gp_plan_make(mo, &mo->pipeline, &plan);
          if (st == GP_OK) {
            st = gp_trainer_init(&t, mo, &plan, &po, 42);
            if (st == GP_OK) gp_trainer_free(&t);
          }
          const char *msg = gp_error_message();
          if (st != GP_OK && msg[0] && !strchr(msg, '\n')) {
            passed++;
          } else {
            failed++;
            printf("FAIL: %s remat=%s K=%d M=%d: the builder refuses it, the pipeline %s\n",
                   gp_schedule_names()[si], gp_remat_names()[ri], k, ms[mi],
                   st == GP_OK ? "was made" : "failed without one line");
          }
          gp_model_free(mo);
        }
  printf("refused combinations: %d\n", seen);
}

/* The zero-bubble schedules (the backward split into B and a deferred W): over the same models,
 * every K in 1..4 and every M in {1, 2, 4, 8} at least once per schedule (a Latin square of K and
 * M: cheap enough for the sanitizer builds), within TOL_REL of K = 1, M = 1; and bit for bit
 * 1F1B's at the same K and M, since W adds each micro-batch's weight gradients in 1F1B's order
 * and B then W gives the whole backward's bytes. */
static void zero_bubble(const char *name, const char *text, const int *const *balances) {
  static const int km[2][4][2] = {{{1, 2}, {2, 8}, {3, 4}, {4, 1}},
                                  {{1, 4}, {2, 1}, {3, 8}, {4, 2}}};
  cfg base = {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 8};
  run_out want;
  train(text, &base, &want);
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 4; i++) {
      int k = km[h][i][0];
      cfg c = {k,
               km[h][i][1],
               h ? GP_SCHED_ZB_H2 : GP_SCHED_ZB_H1,
               GP_REMAT_NEVER,
               balances ? balances[k - 1] : NULL,
               8};
      cfg f = c;
      f.sched = GP_SCHED_1F1B;
      run_out got, ref;
      train(text, &c, &got);
      train(text, &f, &ref);
      compare(name, &c, &got, &want, 0);
      if (got.n_w == ref.n_w && memcmp(got.loss, ref.loss, sizeof ref.loss) == 0 &&
          memcmp(got.w, ref.w, sizeof(float) * (size_t)ref.n_w) == 0) {
        passed++;
      } else {
        failed++;
        printf("FAIL: %s K=%d M=%d zb-h%d: not bit for bit 1f1b's (weight rel diff %.3g)\n", name,
               c.k, c.m, h + 1, stage_params_rel_diff(got.w, ref.w, ref.n_w));
      }
      free_out(&got);
      free_out(&ref);
    }
  free_out(&want);
}

/* The step stays synchronous with W deferred: a NaN loss in the second step (stage 0's
 * outputs of micro-batch 0 made NaN, GP_TEST_NAN_STAGE) fails it before any stage updates, so
 * every stage's weights are still the first step's, bit for bit (mlp: no clipping, so no
 * barrier at the step: the order of the actions alone guarantees it). */
static void zero_bubble_nan(void) {
  for (int h = 0; h < 2; h++) {
    gp_trainer t[2];
    gp_model *mo[2];
    float *w[2];
    int64_t n[2];
    gp_status second = GP_OK;
    for (int i = 0; i < 2; i++) {
      if (gp_model_load_string(mlp, "nan.yaml", NULL, 0, &mo[i]) != GP_OK) gp_t_die("load");
      mo[i]->pipeline.stages = 3;
      mo[i]->pipeline.micro_batches = 4;
      mo[i]->pipeline.schedule = h ? GP_SCHED_ZB_H2 : GP_SCHED_ZB_H1;
      mo[i]->pipeline.remat = GP_REMAT_NEVER;
      gp_plan plan;
      gp_pipeline_opts po = {.cores = 1};
      if (i) setenv("GP_TEST_NAN_STAGE", "0", 1);
      if (gp_plan_make(mo[i], &mo[i]->pipeline, &plan) != GP_OK ||
          gp_trainer_init(&t[i], mo[i], &plan, &po, 42) != GP_OK)
        gp_t_die("init");
      unsetenv("GP_TEST_NAN_STAGE");
      float x[8 * 12];
      int32_t y[8];
      gp_metrics mt;
      batch_data(mo[i], 8, 0, x, y);
      if (gp_t_step_xy(&t[i], x, y, 8, mo[i]->train.lr, &mt) != GP_OK) gp_t_die("step");
      if (i) {
        batch_data(mo[i], 8, 1, x, y);
        second = gp_t_step_xy(&t[i], x, y, 8, mo[i]->train.lr, &mt);
      }
      w[i] = stage_params_gather(&t[i], 0, &n[i]);
    }
    if (second != GP_OK && strstr(gp_error_message(), "NaN") && n[0] == n[1] &&
        memcmp(w[0], w[1], sizeof(float) * (size_t)n[0]) == 0) {
      passed++;
    } else {
      failed++;
      printf("FAIL: zb-h%d K=3 M=4: a NaN loss in step 2 (status %d: %s) left weights that are "
             "not step 1's (rel diff %.3g)\n",
             h + 1, (int)second, second ? gp_error_message() : "none",
             stage_params_rel_diff(w[1], w[0], n[0]));
    }
    for (int i = 0; i < 2; i++) {
      free(w[i]);
      gp_trainer_free(&t[i]);
      gp_model_free(mo[i]);
    }
  }
}

/* With batch norm the statistics are per micro-batch (as in GPipe), so compare at the same K
 * and M: every re-materialization mode gives bit-identical running statistics (and weights);
 * the two schedules sum gradients in another order (GPipe's backwards run in reverse), so
 * they agree within TOL_REL. */
static void batchnorm_modes(void) {
  for (int k = 1; k <= 3; k += 2) {
    run_out want[2];
    for (int sched = 0; sched < 2; sched++) {
      cfg ref = {k, 4, (gp_schedule_kind)sched, GP_REMAT_NEVER, NULL, 8};
      train(bn, &ref, &want[sched]);
      for (int r = 0; r < 2; r++) {
        cfg c = {k, 4, (gp_schedule_kind)sched, (gp_remat)r, NULL, 8};
        run_out got;
        train(bn, &c, &got);
        compare("batchnorm", &c, &got, &want[sched], 1);
        free_out(&got);
      }
    }
    cfg c = {k, 4, GP_SCHED_1F1B, GP_REMAT_NEVER, NULL, 8};
    compare("batchnorm 1f1b vs gpipe", &c, &want[1], &want[0], 0);
    double d = stage_params_rel_diff(want[1].buf, want[0].buf, want[0].n_buf);
    if (d > TOL_REL) {
      printf("FAIL: batchnorm K=%d running statistics, 1f1b vs gpipe: %.3g\n", k, d);
      failed++;
    }
    free_out(&want[0]);
    free_out(&want[1]);
  }
}

/* The running statistics are the mini-batch's, however it is split: with weights that do not
 * move (lr 1e-30 is below float resolution), the first batch norm sees the same inputs at
 * every K and M, so its running mean and variance (its first 8 buffer floats) must match
 * K = 1, M = 1 up to rounding: uneven micro-batches (10 into 4: 3, 3, 2, 2) and micro-batches
 * of one sample included. Averaging the micro-batches' statistics missed the spread between
 * their means and weighted a 2-sample micro-batch as a 3-sample one (up to 20% off). */
static void batchnorm_any_m(void) {
  char text[2048];
  const char *at = strstr(bn, "lr: 0.05");
  snprintf(text, sizeof text, "%.*slr: 1e-30%s", (int)(at - bn), bn, at + strlen("lr: 0.05"));
  static const cfg cs[] = {{1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 10},
                           {1, 4, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 10},
                           {3, 10, GP_SCHED_1F1B, GP_REMAT_ALWAYS, NULL, 10},
                           {2, 3, GP_SCHED_GPIPE, GP_REMAT_EXCEPT_LAST, NULL, 10}};
  run_out want;
  train(text, &cs[0], &want);
  for (size_t i = 1; i < sizeof cs / sizeof cs[0]; i++) {
    run_out got;
    train(text, &cs[i], &got);
    double d = got.n_buf == want.n_buf && want.n_buf >= 8
                   ? stage_params_rel_diff(got.buf, want.buf, 8)
                   : INFINITY;
    if (d <= TOL_REL) {
      passed++;
    } else {
      failed++;
      printf("FAIL: batch norm running statistics at K=%d M=%d (batch 10) vs M=1: %.3g\n", cs[i].k,
             cs[i].m, d);
    }
    free_out(&got);
  }
  free_out(&want);
}

/* remat auto under a memory limit that binds: stage 0 of K = 2, M = 8 recomputes some of its
 * micro-batches but not all (the limit is found from the plan's estimates), and the training
 * is K = 1, M = 1's within TOL_REL. */
static void remat_auto(void) {
  static const int bal[] = {4, 4};
  cfg c = {2, 8, GP_SCHED_GPIPE, GP_REMAT_AUTO, bal, 8};
  gp_model *mo;
  if (gp_model_load_string(cnn, "equiv.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = 2;
  mo->pipeline.micro_batches = 8;
  mo->pipeline.schedule = GP_SCHED_GPIPE;
  mo->pipeline.remat = GP_REMAT_AUTO;
  mo->pipeline.n_balance = 2;
  memcpy(mo->pipeline.balance, bal, sizeof bal);
  gp_plan plan;
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan without a limit");
  double never = plan.mem_est[0];
  int drop = plan.remat_drop[0];
  for (double f = 0.99; f > 0.2 && (drop <= 0 || drop >= plan.micro); f -= 0.01) {
    mo->pipeline.mem_limit = (size_t)(never * f);
    drop = gp_plan_make(mo, &mo->pipeline, &plan) == GP_OK ? plan.remat_drop[0] : 0;
  }
  c.mem_limit = mo->pipeline.mem_limit;
  gp_model_free(mo);
  if (drop <= 0 || drop >= 8) {
    failed++;
    printf("FAIL: remat auto: no limit under %.0f bytes made stage 0 drop some of 8 (%d)\n", never,
           drop);
    return;
  }
  cfg base = {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 8};
  run_out want, got;
  train(cnn, &base, &want);
  train(cnn, &c, &got);
  compare("cnn remat auto", &c, &got, &want, 0);
  free_out(&want);
  free_out(&got);
}

/* Stages that do not share memory (each its own device) get copies of the tensors they read
 * and send gradients back by copies: the same arithmetic, so bit-identical to hand-offs in
 * place, for every schedule and re-materialization, skip tensors and batch norm included. */
static void copies(void) {
  struct {
    const char *name, *text;
    const int *balance;
  } ms[] = {{"cnn", cnn, NULL}, {"skip", skip, b4}, {"batchnorm", bn, NULL}};
  for (int i = 0; i < 3; i++)
    for (int v = 0; v < 8; v++) { /* 6, 7: the zero-bubble schedules */
      cfg c = {4,
               4,
               v < 6 ? (gp_schedule_kind)(v % 2) : (gp_schedule_kind)(v - 4),
               v < 6 ? (gp_remat)(v % 3) : GP_REMAT_NEVER,
               ms[i].balance,
               10,
               0};
      run_out want, got;
      train(ms[i].text, &c, &want);
      c.copy_all = 1;
      train(ms[i].text, &c, &got);
      int same =
          got.n_w == want.n_w && got.n_buf == want.n_buf &&
          memcmp(got.loss, want.loss, sizeof want.loss) == 0 &&
          memcmp(got.w, want.w, sizeof(float) * (size_t)want.n_w) == 0 &&
          (want.n_buf == 0 || memcmp(got.buf, want.buf, sizeof(float) * (size_t)want.n_buf) == 0);
      if (same) {
        passed++;
      } else {
        failed++;
        printf("FAIL: %s K=4 M=4 variant %d: copies between stages differ from hand-offs\n",
               ms[i].name, v);
      }
      free_out(&want);
      free_out(&got);
    }
}

/* Interleaved 1F1B: K devices of V chunks each (chunk c of device d runs the model's part
 * c K + d), against K = 1, M = 1: V = 2 at K = 2, 3, 4 and V = 3 once, M multiples of K, the
 * skip tensor across chunks (on one device at K = 2: chunk 0 to chunk 1; across devices
 * otherwise), tied weights, uneven micro-batches, and copies between chunks. */
static void interleaved(void) {
  static const int s8[] = {2, 2, 2, 2}, s1[] = {1, 1, 1, 1, 1, 1, 1, 1};
  const struct {
    const char *name, *text;
    cfg c;
  } cases[] = {
      {"skip", skip, {2, 4, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, s8, 8, 0, 0, 0, 2}},
      {"skip", skip, {4, 4, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, s1, 8, 0, 0, 0, 2}},
      {"skip", skip, {3, 6, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, NULL, 8, 0, 0, 0, 2}},
      {"skip", skip, {2, 2, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, NULL, 8, 0, 0, 0, 3}},
      {"cnn", cnn, {2, 8, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, NULL, 8, 0, 0, 0, 2}},
      {"cnn", cnn, {3, 3, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, NULL, 8, 1, 0, 0, 2}},
      {"tied", tied, {2, 4, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, s8, 8, 0, 0, 0, 2}},
      {"tied", tied, {4, 4, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, s1, 8, 0, 0, 0, 2}},
      {"tied", tied, {3, 3, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, NULL, 8, 0, 2, 0, 2}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cfg base = {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 8};
    run_out want, got;
    train(cases[i].text, &base, &want);
    train(cases[i].text, &cases[i].c, &got);
    compare(cases[i].name, &cases[i].c, &got, &want, 0);
    free_out(&want);
    free_out(&got);
  }
}

/* Stages with several threads each (the CPU backend splits convolutions over them): the
 * same training within rounding, one thread or two per stage. The convolutions are wide
 * enough to split: 4 samples of 16x16 per micro-batch, 32 channels. */
static const char *wide = "name: wide\n"
                          "inputs: {x: [8, 16, 16], label: {shape: [], dtype: i32}}\n"
                          "layers:\n"
                          "  - {type: conv2d, out_channels: 32, kernel: 3, padding: 1}\n"
                          "  - {type: relu}\n"
                          "  - {type: conv2d, out_channels: 32, kernel: 3, padding: 1}\n"
                          "  - {type: relu}\n"
                          "  - {type: global_avgpool}\n"
                          "  - {type: linear, out_features: 5}\n"
                          "loss: {type: softmax_cross_entropy}\n"
                          "train: {optimizer: {type: sgd, lr: 0.05, momentum: 0.9}}\n";

static void threaded_stages(void) {
  cfg base = {1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 8, 0, 1};
  cfg variants[] = {{1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, NULL, 8, 0, 3},
                    {2, 2, GP_SCHED_GPIPE, GP_REMAT_ALWAYS, NULL, 8, 0, 4},
                    {2, 2, GP_SCHED_1F1B, GP_REMAT_EXCEPT_LAST, NULL, 8, 0, 6}};
  run_out want;
  train(wide, &base, &want);
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    run_out got;
    train(wide, &variants[i], &got);
    compare("wide, threaded stages", &variants[i], &got, &want, 0);
    free_out(&got);
  }
  free_out(&want);
}

/* A label out of range in micro-batch 2 fails the loss on the last stage: every stage
 * stops, the error names the stage and micro-batch, the call returns (no hang), and the next
 * step runs. Interleaved (v = 2): the last chunk (stage 3 of 2 devices x 2 chunks) is run by its
 * device's first chunk's thread, and the error still names the chunk. */
static void bad_label(const char *what, const char *text, int k, int v, const char *names) {
  gp_model *mo;
  if (gp_model_load_string(text, "fail.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = 4;
  if (v > 1) {
    mo->pipeline.virtual_stages = v;
    mo->pipeline.schedule = GP_SCHED_INTERLEAVED;
    mo->pipeline.remat = GP_REMAT_NEVER;
  }
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .watchdog_s = 20};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 1) != GP_OK) gp_t_die("init");
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  float *x = malloc(sizeof(float) * (size_t)(8 * per));
  int32_t y[8];
  batch_data(mo, 8, 0, x, y);
  y[5] = 99; /* micro-batch 2 holds samples 4 and 5 */
  gp_metrics mt;
  gp_status s = gp_t_step_xy(&t, x, y, 8, 0.1, &mt);
  const char *msg = gp_error_message();
  if (s == GP_OK || !strstr(msg, names) || !strstr(msg, "loss")) {
    printf("FAIL: %s: a bad label should stop the pipeline naming %s and the loss layer; got "
           "status %d: %s\n",
           what, names, (int)s, msg);
    failed++;
  } else {
    passed++;
  }
  batch_data(mo, 8, 1, x, y);
  if (gp_t_step_xy(&t, x, y, 8, 0.1, &mt) != GP_OK) {
    printf("FAIL: %s: a step after a failed one: %s\n", what, gp_error_message());
    failed++;
  } else {
    passed++;
  }
  free(x);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

/* A stage that waits longer than the watchdog's limit is reported (here the limit is far
 * below the time stage 0's forward takes), and every stage stops. */
static void watchdog(void) {
  static const char *slow = "name: slow\n"
                            "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: linear, out_features: 2048}\n"
                            "  - {type: linear, out_features: 2048}\n"
                            "  - {type: linear, out_features: 5}\n"
                            "loss: {type: softmax_cross_entropy}\n";
  gp_model *mo;
  if (gp_model_load_string(slow, "slow.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = 2;
  mo->pipeline.n_balance = 2;
  mo->pipeline.balance[0] = 2;
  mo->pipeline.balance[1] = 1;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .watchdog_s = 1e-5};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 1) != GP_OK) gp_t_die("init");
  float x[64 * 12];
  int32_t y[64];
  batch_data(mo, 64, 0, x, y);
  gp_metrics mt;
  gp_status s = gp_t_step_xy(&t, x, y, 64, 0.1, &mt);
  const char *msg = gp_error_message();
  if (s == GP_OK || !strstr(msg, "watchdog: stage 1 waited")) {
    printf("FAIL: the watchdog should report stage 1 waiting; got status %d: %s\n", (int)s, msg);
    failed++;
  } else {
    passed++;
  }
  gp_trainer_free(&t);
  gp_model_free(mo);
}

/* A stage that does not stop after another fails (stuck in a library call: OpenBLAS retries a
 * failed allocation forever under a small `ulimit -v`) is reported stop_s after the failure,
 * naming it, where the main thread used to wait for it forever. Here stage 0 is in a long
 * forward (a 4096-wide GEMM on 1024 samples) when stage 1's loss fails on micro-batch 0's bad
 * label. The pipeline is wedged, refusing work, while stage 0 runs; it finishes here, so the
 * pipeline can then be freed. */
static void stuck_stage(void) {
  static const char *wide = "name: wide\n"
                            "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: linear, out_features: 4096}\n"
                            "  - {type: linear, out_features: 4096}\n"
                            "  - {type: linear, out_features: 5}\n"
                            "loss: {type: softmax_cross_entropy}\n";
  gp_model *mo;
  gp_trainer t;
  enum { B = 2048 };
  static float x[B * 12];
  static int32_t y[B];
  if (gp_model_load_string(wide, "wide.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = 2;
  mo->pipeline.micro_batches = 2;
  mo->pipeline.n_balance = 2;
  mo->pipeline.balance[0] = 2;
  mo->pipeline.balance[1] = 1;
  gp_plan plan;
  gp_pipeline_opts po = {.cores = 1, .stop_s = 0.02};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 1) != GP_OK) gp_t_die("init");
  batch_data(mo, B, 0, x, y);
  y[0] = 99;
  gp_metrics mt;
  gp_status s = gp_t_step_xy(&t, x, y, B, 0.1, &mt);
  const char *msg = gp_error_message();
  if (s != GP_OK && strstr(msg, "stage 1, micro-batch 0") &&
      strstr(msg, "stage 0 did not stop within 0.02 s") && gp_pipeline_wedged(t.pl) &&
      gp_t_step_xy(&t, x, y, B, 0.1, &mt) != GP_OK &&
      strstr(gp_error_message(), "the pipeline is stopped")) {
    passed++;
  } else {
    printf("FAIL: a stage still computing after a failure should be named after stop_s and "
           "the pipeline refuse more work; got status %d: %s\n",
           (int)s, msg);
    failed++;
  }
  for (int i = 0; i < 3000 && gp_pipeline_wedged(t.pl); i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  if (gp_pipeline_wedged(t.pl)) {
    printf("FAIL: stage 0 did not finish its forward within 30 s\n");
    exit(1);
  }
  gp_trainer_free(&t);
  gp_model_free(mo);
}

int main(void) {
  covering_grid();
  refusals();
  for (int i = 0; i < 3; i++) /* mlp, cnn, skip */
    zero_bubble(models[i].name, *models[i].text, models[i].balance);
  zero_bubble_nan();
  batchnorm_modes();
  batchnorm_any_m();
  remat_auto();
  copies();
  threaded_stages();
  interleaved();
  bad_label("3 stages", mlp, 3, 1, "stage 2, micro-batch 2");
  bad_label("interleaved", skip, 2, 2, "stage 3, micro-batch 2");
  watchdog();
  stuck_stage();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
