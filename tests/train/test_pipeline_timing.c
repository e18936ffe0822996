/* Device time: a GPU stage's actions are timed by timers on its compute queue, read after the
 * step, instead of by the host, which only launches them. The same path runs on CPU stages
 * when gp_pipeline_opts.device_timing asks (the CPU's timers mark the moment of their record),
 * and is checked here: the numbers do not change; every action of every step has one device
 * span, tagged as its host span; a stage's device spans follow each other on one queue and lie
 * inside the step; the statistics are the sums of those spans; the replay of the spans fits in
 * the measured step; and without the option CPU stages keep host times and one trace row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/exec/internal.h"
#include "tests/train/device_spans.h"
#include "tests/support/check.h"

/* A skip connection over the stage cuts (so a stage hands gradients back to two producers),
 * and clipping (so the optimizer step waits at its barrier). */
static const char *mlp = "name: timed\n"
                         "inputs: {x: [24], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: linear, out_features: 32, name: in}\n"
                         "  - {type: gelu}\n"
                         "  - {type: linear, out_features: 32}\n"
                         "  - {type: tanh}\n"
                         "  - {type: linear, out_features: 32, name: mid}\n"
                         "  - {type: add, from: [mid, in]}\n"
                         "  - {type: dropout, p: 0.1}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {clip_grad_norm: 1.0, optimizer: {type: sgd, lr: 0.05}}\n";

#define STEPS 3
#define BATCH 12
#define K 3
#define M 4
static int failed, checks;

static void check(int ok, const char *what, const char *cfg) {
  checks++;
  if (ok) return;
  failed++;
  printf("FAIL: %s: %s\n", cfg, what);
}

typedef struct run {
  double loss[STEPS];
  gp_pipeline *pl;
  gp_model *mo;
} run;

/* v: chunks a stage (interleaved, on 2 stages), else K stages */
static void train(gp_schedule_kind sched, gp_remat remat, int device_timing, int v, run *r) {
  if (gp_model_load_string(mlp, "timing.yaml", NULL, 0, &r->mo) != GP_OK) gp_t_die("load");
  r->mo->pipeline.stages = v > 1 ? 2 : K;
  r->mo->pipeline.virtual_stages = v;
  r->mo->pipeline.micro_batches = M;
  r->mo->pipeline.schedule = sched;
  r->mo->pipeline.remat = remat;
  r->mo->pipeline.n_balance = 0;
  gp_plan plan;
  if (gp_plan_make(r->mo, &r->mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  gp_pipeline_opts po = {.cores = 1, .trace = 1, .device_timing = device_timing};
  if (gp_pipeline_create(r->mo, &plan, 42, &po, &r->pl) != GP_OK) gp_t_die("create");
  float x[BATCH * 24];
  int32_t y[BATCH];
  for (int s = 0; s < STEPS; s++) {
    gp_rng g;
    gp_rng_seed(&g, 7 + (uint64_t)s);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
      x[i] = 2.0f * gp_rng_uniform(&g) - 1.0f;
    for (int i = 0; i < BATCH; i++)
      y[i] = (int32_t)gp_rng_below(&g, 5);
    gp_batch b = {.in = {x, y}, .n = BATCH};
    gp_step_result res;
    if (gp_pipeline_train_step(r->pl, &b, s, 0.01, &res) != GP_OK) gp_t_die("step");
    r->loss[s] = res.loss_sum;
  }
}

static void run_free(run *r) {
  gp_pipeline_free(r->pl);
  gp_model_free(r->mo);
}

/* argv[1], if given: where to write the trace of the first device-timed run (for
 * pipeline_timing.sh, which checks it as JSON). */
int main(int argc, char **argv) {
  static const char *sn[] = {"gpipe", "1f1b"}, *rn[] = {"always", "except_last", "never"};
  /* the six schedules and modes, then interleaved (2 stages x 2 chunks, remat never) */
  for (int sc = 0; sc < 2; sc++)
    for (int rm = 0; rm < 3 + (sc == 1); rm++) {
      const int inter = rm == 3;
      const gp_schedule_kind kind = inter ? GP_SCHED_INTERLEAVED : (gp_schedule_kind)sc;
      const gp_remat remat = inter ? GP_REMAT_NEVER : (gp_remat)rm;
      char cfg[64];
      if (inter)
        snprintf(cfg, sizeof cfg, "K=2 V=2 M=%d interleaved remat=never", M);
      else
        snprintf(cfg, sizeof cfg, "K=%d M=%d %s remat=%s", K, M, sn[sc], rn[rm]);
      run host, dev;
      train(kind, remat, 0, inter ? 2 : 1, &host);
      train(kind, remat, 1, inter ? 2 : 1, &dev);
      check(memcmp(host.loss, dev.loss, sizeof host.loss) == 0, "device timing changes the losses",
            cfg);
      failed += device_spans_check(dev.pl, STEPS, M, cfg, &checks);
      if (argc > 1 && sc == 0 && rm == 0 && gp_pipeline_write_trace(dev.pl, argv[1]) != GP_OK)
        gp_t_die("trace");
      int rows = 0;
      for (int s = 0; s < gp_pipeline_stages(host.pl); s++) {
        gp_stage_stats ss;
        gp_pipeline_stats(host.pl, s, &ss);
        check(host.pl->st[s].rec.tm == NULL && ss.device_time == 0, "a CPU stage keeps host times",
              cfg);
        for (int64_t i = 0; i < host.pl->st[s].rec.n_ev; i++)
          rows += host.pl->st[s].rec.ev[i].device;
      }
      check(rows == 0, "no device rows without device timing", cfg);
      run_free(&host);
      run_free(&dev);
    }
  printf("%d checks, %d failed\n", checks, failed);
  return failed ? 1 : 0;
}
