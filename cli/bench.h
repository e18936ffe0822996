/* gpipe-bench's results, shared by the sweep (cli/bench.c) and its writers (cli/bench_out.c):
 * the aligned table, CSV, JSON and the SVG speed-up plot. */
#ifndef GP_CLI_BENCH_H
#define GP_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/spec/spec.h"
#include "core/status.h"
#include "core/plan/plan.h"

/* One configuration of the sweep and what was measured for it (the best repetition's). */
typedef struct gp_bench_run {
  int k, m;
  int replicas; /* R: data-parallel replicas over the launch's processes (1 in one process) */
  gp_schedule_kind schedule; /* GP_SCHED_AUTO: the planner's choice (schedule: auto) */
  char sched_name[48];       /* "1f1b", or "auto" and once run "auto:1f1b" (gp_bench_chosen_name) */
  gp_remat remat;
  int baseline;   /* added only as a reference for the speed-ups, not asked for */
  int naive, one; /* indices of its references: (K, 1, gpipe, never) and (1, 1, gpipe, never) */
  char balance[GP_PLAN_BALANCE_LEN]; /* any K's, whole */
  char devices[GP_MAX_DEVICES][16];
  /* per stage: micro-batches re-materialized (remat auto's choice), and those recomputing their
   * cheap layers alone (selective) */
  int recomputed[GP_MAX_DEVICES], selective[GP_MAX_DEVICES];
  int cores_used; /* min(C, K * max(1, C / K)), or K x T with --threads-per-stage; under W
                     processes, W times that of a process's ceil(K / P) stages */
  int gpus_used;  /* distinct CUDA devices of its stages (its utilization is against them) */
  double samples_per_s;
  double speedup_naive, speedup_single;
  double speedup_ideal; /* over naive-K with the theory's bubble: K M / (M + K - 1) */
  double bubble_measured, bubble_theory;
  double bubble_sim;     /* the schedule simulated with this run's measured stage times */
  double bubble_replay;  /* the run's steps replayed with each action's own time */
  double bubble_slowest; /* the idle share of each step's busiest stage (the pace-setter) */
  double bubble_stage[GP_MAX_DEVICES];
  double busy_ms[GP_MAX_DEVICES];      /* compute (forward + backward) per step */
  double wall_busy_ms[GP_MAX_DEVICES]; /* wall time inside actions per step (bubble's busy) */
  double recompute_ms[GP_MAX_DEVICES]; /* of it, in re-materializing forwards (0 under never) */
  /* the median step (of an even count, the two middle ones' mean): its time, and its stages'
   * wall time in actions and in recomputing, summed; samples_per_s is the batch over step_s */
  double step_s, step_busy_ms, step_recompute_ms;
  size_t peak_bytes[GP_MAX_DEVICES];
  size_t mem_bytes[GP_MAX_DEVICES];   /* the stage's backend peak: weights, state, scratch too */
  int64_t sent_bytes[GP_MAX_DEVICES]; /* per step */
  double gflops, utilization;
  /* R > 1: the gradients' all-reduce a step (the slowest stage's: they run side by side), the
   * share of it that ran under the backward (1 - the step's wait for it / its time), and the
   * bytes summed a step; NAN and 0 at R = 1 */
  double allreduce_ms, allreduce_hidden;
  int64_t allreduce_bytes;
  /* of the time the process's CPUs had work during the timed steps, the share the hypervisor
   * ran something else (/proc/stat's steal over busy + steal; the whole machine's, not this
   * run's alone); -1 where unknown: no readable /proc/stat steal field, or no busy or steal
   * tick (10 ms) counted during the timed steps */
  double steal;
  /* its memory would pass --memory-limit on some stage (in any repetition): it does not fit,
   * and has no measured numbers (they and the speed-ups against it are NAN); why is the error
   * (stage, bytes asked for, bytes in use) */
  int over_limit;
  char why[256];
} gp_bench_run;

typedef struct gp_bench {
  /* machine */
  char cpu_model[128];
  int cores;     /* cores this process may run on */
  int threads;   /* C: cores given to the stages */
  int per_stage; /* T of --threads-per-stage (each run's stages get K x T cores), or 0 */
  double sgemm_per_core;
  double gpu_gemm; /* GEMM GFLOP/s of the first CUDA device of the sweep (0: none) */
  /* W processes (mpirun, srun; 1 without a launcher), and with W > 1 the links measured once
   * at the start: the one-way time of 8 bytes between ranks 0 and 1, their bandwidth with
   * 4 MiB messages, and the bus bandwidth of a 16 MiB all-reduce over all W (2 (W-1)/W of the
   * bytes over its time) */
  int processes;
  double handoff_latency_s, handoff_bytes_per_s, allreduce_bytes_per_s;
  char gpu_name[16]; /* that device ("cuda:0") */
  /* model and settings */
  const char *model_file;
  const char *model;
  int units;
  int64_t params;
  double flops_per_sample; /* forward + backward, analytic */
  int64_t batch;
  int steps, warmup, reps;
  const char *data;      /* "synthetic" or "real" */
  const char *precision; /* of GEMMs and convolutions: "fp32" or "bf16" */
  int nondeterministic;  /* --nondeterministic */
  size_t mem_limit;      /* --memory-limit per stage in bytes, 0 = none */
  /* runs, in the order they ran */
  int n_runs;
  gp_bench_run *runs;
  /* configurations left out (M > batch; K x T > cores; M x R > batch; a layout of K and R
   * that W processes cannot hold), as text for the notes: each M and each K of the lists at
   * most once, then the (M, R) and (K, R) pairs up to the room left (the last note counts the
   * rest) */
  int n_skipped;
  char skipped[192][256];
} gp_bench;

const char *gp_bench_schedule_name(gp_schedule_kind s); /* GP_SCHED_AUTO: "auto" */
/* What auto chose, as one token in buf: "auto:zb-h1", "auto:interleaved-v2" (its V). */
void gp_bench_chosen_name(const gp_plan *plan, char *buf, size_t n);
const char *gp_bench_remat_name(gp_remat r);

/* Flushes f: GP_ERR_IO "path: writing failed[: reason]" when that or an earlier write to it
 * failed (stdout on a full disk), else GP_OK. */
gp_status gp_bench_stream_status(FILE *f, const char *path);

/* Each returns GP_ERR_IO naming path when the stream fails. */
/* What a run that does not fit did not fit: "12.00 MiB" (--memory-limit), else its GPU's
 * memory. */
const char *gp_bench_fit_what(const gp_bench *b, char *buf, size_t n);
gp_status gp_bench_write_table(FILE *f, const gp_bench *b);
gp_status gp_bench_write_csv(FILE *f, const char *path, const gp_bench *b);
gp_status gp_bench_write_json(FILE *f, const char *path, const gp_bench *b);
/* x = K, y = speed-up over one stage, one polyline per M with the ideal K*M/(M+K-1) dashed. */
gp_status gp_bench_write_svg(FILE *f, const char *path, const gp_bench *b);

#endif
