/* Benchmark: does the partitioner's cost model predict real stage times? Measures every unit's
 * forward+backward time (--by time), solves the split, trains real steps through the pipeline
 * with that split, and prints each stage's predicted and measured compute time per step.
 *   bench-partition-check MODEL.yaml --stages K [--micro-batches M] [--batch-size B]
 *                         [--steps N] [--by time|flops] [--cache-dir DIR]
 * Measured = time inside the stage's forwards and backwards (waiting excluded), per step. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/machine.h"
#include "core/rng.h"
#include "core/spec/spec.h"
#include "core/plan/solve.h"
#include "core/train/trainer.h"
#include "tests/support/train.h"

int main(int argc, char **argv) {
  gp_flag flags[] = {
      {"--stages", GP_FLAG_INT, "K", "stages (default 4)", 1},
      {"--micro-batches", GP_FLAG_INT, "M", "micro-batches (default 4)", 1},
      {"--batch-size", GP_FLAG_INT, "B", "mini-batch (default: the model file's)", 1},
      {"--steps", GP_FLAG_INT, "N", "measured steps (default 4)", 1},
      {"--by", GP_FLAG_STR, "time|flops", "cost basis (default time)", 0},
      {"--cache-dir", GP_FLAG_STR, "DIR", "measurement cache (default: none)", 0},
      {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
      {NULL},
  };
  const char *pos[1];
  int npos;
  gp_model *m = NULL;
  gp_unit_costs c = {0};
  gp_trainer t = {0};
  float *x = NULL;
  int32_t *y = NULL;
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s == GP_OK && gp_args_get(flags, "--help")->given) {
    gp_args_usage("bench-partition-check", "MODEL.yaml [--stages K] [flags]", flags);
    return 0;
  }
  if (s == GP_OK && npos != 1)
    s = GP_ERR(GP_ERR_USAGE, "usage: bench-partition-check MODEL.yaml --stages K");
  if (s == GP_OK) gp_blas_pick_kernels(argv); /* as gpipe-train runs: see machine.h */
  int k = flags[0].given ? (int)flags[0].i : 4, mb = flags[1].given ? (int)flags[1].i : 4;
  int steps = flags[3].given ? (int)flags[3].i : 4;
  gp_cost_by by = flags[4].given && flags[4].s[0] == 'f' ? GP_COST_FLOPS : GP_COST_TIME;
  if (s == GP_OK) s = gp_model_load(pos[0], NULL, 0, &m);
  int64_t b = 0, micro = 0;
  if (s == GP_OK) {
    b = flags[2].given ? flags[2].i : m->train.batch_size;
    micro = (b + mb - 1) / mb;
    /* one core per stage when K <= cores; the time model assumes what the executor gives */
    int threads = gp_cpu_cores() / k > 1 ? gp_cpu_cores() / k : 1;
    s = gp_unit_costs_compute(m, micro, by, threads, flags[5].given ? flags[5].s : NULL, &c);
  }
  gp_partition part;
  gp_partition_req req = {.stages = k,
                          .micro = mb,
                          .schedule = GP_SCHED_GPIPE,
                          .remat = GP_REMAT_NEVER,
                          .optim_slots = m ? gp_optimizer_slots(&m->train) : 0};
  if (s == GP_OK) s = gp_partition_solve(&c, &req, &part);
  gp_plan plan;
  if (s == GP_OK) {
    gp_pipeline_spec ps = m->pipeline;
    ps.stages = k;
    ps.micro_batches = mb;
    ps.schedule = GP_SCHED_GPIPE;
    ps.remat = GP_REMAT_NEVER;
    ps.n_balance = k;
    for (int i = 0; i < k; i++)
      ps.balance[i] = part.first[i + 1] - part.first[i];
    s = gp_plan_make(m, &ps, &plan);
  }
  gp_pipeline_opts po = {.cores = gp_cpu_cores(), .pin = 1};
  if (s == GP_OK) s = gp_trainer_init(&t, m, &plan, &po, 1);
  if (s == GP_OK) {
    int xi = m->label_input == 0 ? 1 : 0;
    int64_t per = gp_shape_numel(&m->inputs[xi].shape);
    const gp_layer *o = &m->nodes[m->output_node].layer;
    x = malloc(sizeof(float) * (size_t)(b * per));
    y = malloc(sizeof(int32_t) * (size_t)b);
    gp_rng r;
    gp_rng_seed(&r, 5);
    for (int64_t i = 0; i < b * per; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    for (int64_t i = 0; i < b; i++)
      y[i] = (int32_t)gp_rng_below(&r, (uint64_t)o->out_shape.d[o->out_shape.ndim - 1]);
  }
  gp_metrics mt;
  for (int i = 0; s == GP_OK && i < 2; i++)
    s = gp_t_step_xy(&t, x, y, b, 1e-4, &mt);
  if (s == GP_OK) gp_pipeline_reset_stats(t.pl);
  for (int i = 0; s == GP_OK && i < steps; i++)
    s = gp_t_step_xy(&t, x, y, b, 1e-4, &mt);
  if (s == GP_OK) {
    printf("model %s: %d units, K=%d, M=%d, micro-batch %" PRId64 ", costs by %s, %d steps\n",
           m->name, m->n_units, k, mb, micro, by == GP_COST_TIME ? "measured time" : "FLOPs",
           steps);
    printf("%-6s %-10s %14s %14s %8s\n", "stage", "units", "predicted ms", "measured ms", "error");
    double worst = 0, scale = 1;
    if (by == GP_COST_FLOPS) { /* FLOPs are not seconds: scale by the total measured time */
      double pt = 0, mt_all = 0;
      for (int st = 0; st < k; st++) {
        gp_stage_stats ss;
        gp_pipeline_stats(t.pl, st, &ss);
        pt += part.time[st] * mb;
        mt_all += (ss.fwd_s + ss.bwd_s) / (double)steps;
      }
      scale = mt_all / pt;
    }
    for (int st = 0; st < k; st++) {
      gp_stage_stats ss;
      gp_pipeline_stats(t.pl, st, &ss);
      double pred = part.time[st] * mb * scale, meas = (ss.fwd_s + ss.bwd_s) / (double)steps;
      double err = (pred - meas) / meas;
      worst = fmax(worst, fabs(err));
      char units[32];
      snprintf(units, sizeof units, "%d..%d", part.first[st], part.first[st + 1] - 1);
      printf("%-6d %-10s %14.2f %14.2f %+7.1f%%\n", st, units, pred * 1e3, meas * 1e3, 100 * err);
    }
    printf("worst stage error: %.1f%%\n", 100 * worst);
  }
  free(x);
  free(y);
  if (t.m) gp_trainer_free(&t);
  gp_unit_costs_free(&c);
  gp_model_free(m);
  gp_args_free(flags);
  if (s != GP_OK) {
    fprintf(stderr, "bench-partition-check: %s\n", gp_error_message());
    return gp_status_exit_code(s);
  }
  return 0;
}
