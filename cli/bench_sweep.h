/* gpipe-bench's sweep: what to run (the K x M x schedule x re-materialization lists and the
 * reference runs the speed-ups need) and running it (bench_sweep.c); the flags, the setup and
 * the report are bench.c's. */
#ifndef GP_CLI_BENCH_SWEEP_H
#define GP_CLI_BENCH_SWEEP_H

#include "cli/bench.h"
#include "cli/split.h"
#include "core/backend.h"
#include "core/dist/dist.h"
#include "data/data.h"

#define MAX_LIST 64 /* values of a list flag */
#define MAX_RUNS 512

/* What to sweep, after the flags, the plan and the model file's defaults. */
typedef struct gp_bench_sweep {
  int ks[MAX_LIST], nk, ms[MAX_LIST], nm, scheds[8], ns, remats[4], nr;
  int vs;                 /* V, the chunks a stage of the interleaved runs (the others: 1) */
  int rs[MAX_LIST], nrep; /* replicas */
  int n_dev;
  char devices[GP_MAX_DEVICES][16];
  int bal_k; /* the chunks (K, or K V) that `balance` is for (the plan's, or the model file's),
                else 0 */
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
  int remat_given;       /* --remat (else the zero-bubble schedules run with never) */
  const char *partition; /* --partition's file, or NULL */
  const char *trace;     /* --trace's file, or NULL */
  gp_dist dist;          /* the processes: one, unless launched by mpirun or srun */
  gp_cli_split split;    /* --by and --cache-dir: the automatic split of runs without a balance */
} gp_bench_ctx;

/* The runs of the lists, plus the baselines (naive-K and one stage) they need; every plan is
 * made now, so a bad device fails before the sweep. */
gp_status gp_bench_make_runs(gp_bench_ctx *c);
/* Measures every run (reps times, keeping the fastest) with a progress line on a terminal,
 * then derives speed-ups and bubbles; GP_ERR_FULL when no run fits. */
gp_status gp_bench_sweep_all(gp_bench_ctx *c);
/* Distinct CUDA devices among the stages of a K-stage run (as the runs place them). */
int gp_bench_gpus_of(const gp_bench_sweep *w, int k);

/* bench_dist.c: across processes */
/* The links between the processes, measured once (W > 1; every process calls it). */
gp_status gp_bench_dist_links(gp_bench_ctx *c);
/* Run r's layout over the processes, made the runtime's (every process, the same runs in the
 * same order); NULL in one process: what gp_pipeline_opts.dist takes. */
gp_status gp_bench_dist_layout(gp_bench_ctx *c, const gp_bench_run *r, int chunks, gp_dist **out);
/* What schedule auto charges a run over P processes a replica (each stage on `per` threads):
 * every hand-off between them on the link measured, FLOPs at rank 0's GEMM rate. */
void gp_bench_dist_spec(const gp_bench_ctx *c, int procs, int per, gp_pipeline_spec *ps);
/* Whether W processes can hold K stages as R replicas: GP_OK, or the one-line reason in buf. */
int gp_bench_layout_fits(const gp_bench_ctx *c, int k, int replicas, char *why, size_t n);
/* The step times and the stages' per-step sums of steps steps, combined over the processes:
 * each step's time the slowest process's; busy and rec (the stages' wall time in actions and in
 * recomputing) summed over a replica's processes, the replicas' mean. */
gp_status gp_bench_dist_steps(gp_bench_ctx *c, int steps, double *s, double *busy, double *rec);

#endif
