/* gpipe-bench's sweep: what to run (the K x M x schedule x re-materialization lists and the
 * reference runs the speed-ups need) and running it (bench_sweep.c); the flags, the setup and
 * the report are bench.c's. */
#ifndef GP_CLI_BENCH_SWEEP_H
#define GP_CLI_BENCH_SWEEP_H

#include "cli/bench.h"
#include "core/backend.h"
#include "data/data.h"

#define MAX_LIST 64 /* values of a list flag */
#define MAX_RUNS 512

/* What to sweep, after the flags, the plan and the model file's defaults. */
typedef struct gp_bench_sweep {
  int ks[MAX_LIST], nk, ms[MAX_LIST], nm, scheds[2], ns, remats[3], nr;
  int n_dev;
  char devices[GP_MAX_DEVICES][16];
  int bal_k; /* the K that `balance` is for (the plan's, or the model file's), else 0 */
  int balance[GP_MAX_DEVICES];
} gp_bench_sweep;

typedef struct gp_bench_ctx {
  gp_model *m;
  gp_data data; /* its training split: image samples or token rows */
  gp_bench_sweep sw;
  gp_bench b;
  int tty, quiet, progress_open;
  double sweep_t0;        /* when the sweep's first run started, for the progress line's estimate */
  int traced;             /* --trace was written (not when its run did not fit the memory limit) */
  size_t mem_limit;       /* --memory-limit: per stage, 0 = none */
  gp_precision precision; /* --precision */
  /* the flags the sweep reads */
  int stages_given;      /* --stages */
  const char *partition; /* --partition's file, or NULL */
  const char *trace;     /* --trace's file, or NULL */
} gp_bench_ctx;

/* The runs of the lists, plus the baselines (naive-K and one stage) they need; every plan is
 * made now, so a bad device fails before the sweep. */
gp_status gp_bench_make_runs(gp_bench_ctx *c);
/* Measures every run (reps times, keeping the fastest) with a progress line on a terminal,
 * then derives speed-ups and bubbles; GP_ERR_FULL when no run fits. */
gp_status gp_bench_sweep_all(gp_bench_ctx *c);
/* Distinct CUDA devices among the stages of a K-stage run (as the runs place them). */
int gp_bench_gpus_of(const gp_bench_sweep *w, int k);

#endif
