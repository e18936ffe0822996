/* gpipe-bench across processes (mpirun, srun): each run's layout of K stages and R replicas over
 * the W processes, the links between them measured once (schedule auto weighs them), and a
 * run's step times combined over the processes. Every MPI call is behind core/dist/dist.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_sweep.h"

#define PING_BYTES 8
#define PING_TRIPS 200
#define BULK_BYTES ((size_t)4 << 20)
#define BULK_TRIPS 20
#define SUM_BYTES ((size_t)16 << 20)
#define SUM_REPS 5

gp_status gp_bench_dist_links(gp_bench_ctx *c) {
  gp_bench *b = &c->b;
  gp_dist *d = &c->dist;
  if (d->world < 2) return GP_OK;
  if (!c->quiet && c->tty)
    fprintf(stderr, "gpipe-bench: measuring the links between the processes...");
  double lat, bulk, sum;
  GP_TRY(gp_dist_pingpong(d, PING_BYTES, PING_TRIPS, &lat));
  GP_TRY(gp_dist_pingpong(d, BULK_BYTES, BULK_TRIPS, &bulk));
  GP_TRY(gp_dist_allreduce_time(d, SUM_BYTES, SUM_REPS, &sum));
  if (!c->quiet && c->tty) fprintf(stderr, "\r\033[K");
  b->handoff_latency_s = lat;
  b->handoff_bytes_per_s = bulk > 0 ? (double)BULK_BYTES / bulk : 0;
  /* a ring all-reduce moves 2 (W-1)/W of the bytes through each process: its bus bandwidth */
  const double W = d->world;
  b->allreduce_bytes_per_s = sum > 0 ? 2 * (W - 1) / W * (double)SUM_BYTES / sum : 0;
  /* every process plans every run alike: schedule auto weighs FLOPs at rank 0's rates */
  GP_TRY(gp_dist_bcast(d, &b->sgemm_per_core, sizeof b->sgemm_per_core, 0));
  return gp_dist_bcast(d, &b->gpu_gemm, sizeof b->gpu_gemm, 0);
}

void gp_bench_dist_spec(const gp_bench_ctx *c, int procs, int per, gp_pipeline_spec *ps) {
  const gp_bench *b = &c->b;
  ps->across_procs = procs;
  ps->link_latency_s = b->handoff_latency_s;
  ps->link_bytes_per_s = b->handoff_bytes_per_s;
  const double g = strncmp(ps->devices[0], "cuda", 4) ? b->sgemm_per_core * per : b->gpu_gemm;
  ps->seconds_per_flop = g > 0 ? 1 / (g * 1e9) : 0;
}

int gp_bench_layout_fits(const gp_bench_ctx *c, int k, int replicas, char *why, size_t n) {
  static gp_layout lay; /* 16 KiB: not on the stack of every check */
  gp_status s = gp_layout_make(c->dist.world, c->dist.rank, replicas, k, NULL, &lay);
  if (s == GP_OK) return 1;
  snprintf(why, n, "%s", gp_error_message());
  gp_error_clear();
  return 0;
}

gp_status gp_bench_dist_layout(gp_bench_ctx *c, const gp_bench_run *r, int chunks, gp_dist **out) {
  *out = NULL;
  if (c->dist.world == 1) return GP_OK;
  static gp_layout lay;
  GP_TRY(gp_layout_make(c->dist.world, c->dist.rank, r->replicas, r->k, NULL, &lay));
  gp_layout_interleave(&lay, chunks); /* interleaved: a process holds its stages' chunks */
  GP_TRY(gp_dist_set_layout(&c->dist, &lay));
  *out = &c->dist;
  return GP_OK;
}

gp_status gp_bench_dist_steps(gp_bench_ctx *c, int steps, double *s, double *busy, double *rec) {
  gp_dist *d = &c->dist;
  if (d->world == 1) return GP_OK;
  int64_t *ns = malloc(sizeof *ns * (size_t)steps);
  double *sums = malloc(sizeof *sums * 2 * (size_t)steps);
  if (!ns || !sums) {
    free(ns);
    free(sums);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the step times");
  }
  for (int i = 0; i < steps; i++) {
    ns[i] = (int64_t)(s[i] * 1e9);
    sums[i] = busy[i];
    sums[steps + i] = rec[i];
  }
  gp_status st = gp_dist_max(d, ns, steps);
  if (st == GP_OK) st = gp_dist_sum_doubles(d, sums, 2 * (int64_t)steps, 1);
  const double R = d->lay.replicas;
  for (int i = 0; st == GP_OK && i < steps; i++) {
    s[i] = (double)ns[i] * 1e-9;
    busy[i] = sums[i] / R;
    rec[i] = sums[steps + i] / R;
  }
  free(ns);
  free(sums);
  return st;
}
