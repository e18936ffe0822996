/* Benchmark: does the partitioner's cost model predict real stage times? Measures every unit's
 * forward+backward time (--by time), solves the split, trains real steps through the pipeline
 * with that split, and prints each stage's predicted and measured compute time per step.
 *   bench-partition-check MODEL.yaml --stages K [--micro-batches M] [--batch-size B]
 *                         [--steps N] [--by time|flops] [--cache-dir DIR]
 * Measured = time inside the stage's forwards and backwards (waiting excluded), per step.
 * With --candidates: the automatic split as gpipe-train makes it (--by, the model file's
 * schedule and re-materialization) against the splits around it (each boundary moved by one
 * unit either way), every stage timed alone as one piece with a stage's threads (--rounds
 * times, alternating, the fastest kept); prints each split's slowest stage and the ratio of the
 * automatic split's to the best (issue 50: within 1.05). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/machine.h"
#include "core/rng.h"
#include "core/spec/spec.h"
#include "core/plan/plan.h"
#include "core/plan/solve.h"
#include "core/plan/split.h"
#include "core/train/trainer.h"
#include "tests/support/train.h"

/* a stage's units, timed whole: the fastest of the rounds */
typedef struct piece {
  int first, end;
  double fwd, bwd;
} piece;

static int find_piece(piece *p, int *n, int first, int end) {
  for (int i = 0; i < *n; i++)
    if (p[i].first == first && p[i].end == end) return i;
  p[*n] = (piece){first, end, INFINITY, INFINITY};
  return (*n)++;
}

static double unit_sum(const gp_unit_costs *c, int first, int end, int bwd) {
  double t = 0;
  for (int u = first; u < end; u++)
    t += bwd ? c->bwd[u] : c->fwd[u];
  return t;
}

/* the units' own pieces, timed in this run */
static double fresh_sum(piece *p, int *n, int first, int end, int bwd) {
  double t = 0;
  for (int u = first; u < end; u++) {
    const piece *q = &p[find_piece(p, n, u, u + 1)];
    t += bwd ? q->bwd : q->fwd;
  }
  return t;
}

/* The automatic split against its neighbours, each stage timed whole. */
static gp_status candidates(gp_model *m, int k, int mb, int64_t micro, gp_cost_by by,
                            const char *cache, int rounds) {
  gp_pipeline_spec ps = m->pipeline;
  ps.stages = k;
  ps.micro_batches = mb;
  ps.n_balance = 0;
  ps.n_devices = 1; /* the CPU: the timer's backend */
  snprintf(ps.devices[0], sizeof ps.devices[0], "cpu");
  ps.replicas = 1;
  const int threads = gp_cpu_cores() / k > 1 ? gp_cpu_cores() / k : 1;
  gp_split_opts o = {.by = by, .threads = threads, .cache_dir = cache};
  gp_unit_costs c;
  GP_TRY(gp_split_costs(m, &ps, &o, &c));
  gp_plan plan;
  gp_status s = gp_plan_make_from(m, &ps, &c, &plan);
  if (s != GP_OK) {
    gp_unit_costs_free(&c);
    return s;
  }
  /* the splits: the automatic one, then each boundary moved by one unit either way */
  enum { MAXS = 2 * 64 + 1 };
  static int split[MAXS][65];
  static piece pieces[MAXS * 64 + 1024];
  int ns = 0, np = 0;
  /* interleaved: the plan's K V chunks, chunk c on device c mod K; a device's time is its
   * chunks' together, and every chunk boundary moves */
  const int nc = plan.stages;
  for (int i = 0; i < nc; i++)
    split[0][i] = plan.st[i].first_unit;
  split[0][nc] = m->n_units;
  ns = 1;
  for (int b = 1; b < nc; b++)
    for (int d = -1; d <= 1; d += 2) {
      memcpy(split[ns], split[0], sizeof split[0]);
      split[ns][b] += d;
      if (split[ns][b] > split[ns][b - 1] && split[ns][b] < split[ns][b + 1]) ns++;
    }
  gp_partition_req req;
  gp_plan_partition_req(m, &ps, &req);
  req.schedule = plan.schedule; /* what the plan resolved auto to: the stages timed recompute */
  req.remat = plan.remat;       /* as the run would */
  for (int i = 0; i < ns; i++)
    for (int st = 0; st < nc; st++)
      find_piece(pieces, &np, split[i][st], split[i][st + 1]);
  /* every unit alone too, timed beside the stages: whether unit times add up to a stage's */
  const int detail = getenv("GP_SPLIT_CHECK_STAGES") != NULL;
  for (int u = 0; detail && u < m->n_units; u++)
    find_piece(pieces, &np, u, u + 1);
  printf("model %s: %d units, K=%d (%d chunk%s), M=%d, micro-batch %" PRId64
         ", %d thread%s a stage, %s schedule, re-materialization %s, split by %s\n",
         m->name, m->n_units, k, nc, nc == 1 ? "" : "s", mb, micro, threads,
         threads == 1 ? "" : "s", gp_schedule_names()[plan.schedule], gp_remat_names()[plan.remat],
         c.by == GP_COST_TIME    ? "measured time"
         : c.by == GP_COST_FLOPS ? "FLOPs"
                                 : "parameters");
  fflush(stdout);
  /* rounds alternate over every stage, so a busy moment of the machine spreads over them all */
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < np && s == GP_OK; i++) {
      double f, bw;
      s = gp_units_time(m, pieces[i].first, pieces[i].end, micro, threads, &f, &bw);
      if (s == GP_OK && f + bw < pieces[i].fwd + pieces[i].bwd)
        pieces[i].fwd = f, pieces[i].bwd = bw;
    }
  double best = INFINITY, mine = 0;
  printf("%-10s %-28s %14s %14s\n", "split", "balance", "slowest ms", "sum-of-units");
  for (int i = 0; i < ns && s == GP_OK; i++) {
    double slow = 0, pred = 0, dev[64] = {0}, dpred[64] = {0};
    char bal[256] = "";
    for (int st = 0; st < nc; st++) {
      const piece *p = &pieces[find_piece(pieces, &np, split[i][st], split[i][st + 1])];
      int remat = nc == k && gp_partition_remats(&req, k, st); /* (interleaved: never) */
      double t = p->fwd * (1 + remat) + p->bwd, u = 0;
      for (int x = split[i][st]; x < split[i][st + 1]; x++)
        u += c.by == GP_COST_TIME ? c.fwd[x] * (1 + remat) + c.bwd[x] : 0;
      if (detail)
        printf("  stage %d units %d..%d: whole fwd %.3f bwd %.3f ms; its units, cached: fwd %.3f "
               "bwd %.3f ms, timed now: fwd %.3f bwd %.3f ms\n",
               st, split[i][st], split[i][st + 1] - 1, p->fwd * 1e3, p->bwd * 1e3,
               unit_sum(&c, split[i][st], split[i][st + 1], 0) * 1e3,
               unit_sum(&c, split[i][st], split[i][st + 1], 1) * 1e3,
               fresh_sum(pieces, &np, split[i][st], split[i][st + 1], 0) * 1e3,
               fresh_sum(pieces, &np, split[i][st], split[i][st + 1], 1) * 1e3);
      dev[st % k] += t;
      dpred[st % k] += u;
      slow = fmax(slow, dev[st % k]);
      pred = fmax(pred, dpred[st % k]);
      size_t l = strlen(bal);
      snprintf(bal + l, sizeof bal - l, st ? ",%d" : "%d", split[i][st + 1] - split[i][st]);
    }
    if (i == 0) mine = slow;
    best = fmin(best, slow);
    printf("%-10s %-28s %14.3f %14.3f\n", i == 0 ? "automatic" : "neighbour", bal, slow * 1e3,
           pred * 1e3);
  }
  if (s == GP_OK)
    printf("ratio %.3f (the automatic split's slowest stage / the best of these; target <= 1.05)\n",
           mine / best);
  gp_unit_costs_free(&c);
  return s;
}

int main(int argc, char **argv) {
  gp_flag flags[] = {
      {"--stages", GP_FLAG_INT, "K", "stages (default 4)", 1},
      {"--micro-batches", GP_FLAG_INT, "M", "micro-batches (default 4)", 1},
      {"--batch-size", GP_FLAG_INT, "B", "mini-batch (default: the model file's)", 1},
      {"--steps", GP_FLAG_INT, "N", "measured steps (default 4)", 1},
      {"--by", GP_FLAG_STR, "time|flops", "cost basis (default time)", 0},
      {"--cache-dir", GP_FLAG_STR, "DIR", "measurement cache (default: none)", 0},
      {"--candidates", GP_FLAG_BOOL, NULL, "the automatic split against its neighbours", 0},
      {"--rounds", GP_FLAG_INT, "R", "--candidates: times each stage is timed (default 2)", 1},
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
    m->train.batch_size = b;
    micro = (b + mb - 1) / mb;
  }
  if (s == GP_OK && (k < 1 || k > 64 || k > m->n_units))
    s = GP_ERR(GP_ERR_USAGE, "--stages: 1..64, at most the units");
  if (s == GP_OK && flags[6].given) {
    s = candidates(m, k, mb, micro, by, flags[5].given ? flags[5].s : NULL,
                   flags[7].given ? (int)flags[7].i : 2);
    gp_model_free(m);
    gp_args_free(flags);
    if (s != GP_OK) fprintf(stderr, "bench-partition-check: %s\n", gp_error_message());
    return s == GP_OK ? 0 : gp_status_exit_code(s);
  }
  if (s == GP_OK) {
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
