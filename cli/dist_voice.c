/* One voice across processes, the agreed setup and the gathered statistics of gpipe-train and
 * gpipe-bench (cli/dist_voice.h). */
#include "cli/dist_voice.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/interrupt.h"

static int err_fd = -1; /* ranks but 0: the real stderr, kept for errors */

gp_status gp_cli_dist_start(gp_dist *d, const char *prog, double liveness_s) {
  GP_TRY(gp_dist_init(d));
  if (d->world > 1 && d->rank != 0) {
    /* one voice: progress, notes and results are rank 0's; errors go to the kept stderr */
    fflush(stdout);
    fflush(stderr);
    err_fd = dup(2);
    int null = open("/dev/null", O_WRONLY);
    if (err_fd < 0 || null < 0)
      return GP_ERR(GP_ERR_IO, "cannot quiet the output of rank %d", d->rank);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  /* from the start: a process stopped while the others load would hang their first agreement */
  gp_dist_on_end(d, gp_interrupt_quiet); /* another process's line says why */
  return gp_dist_liveness_start(d, liveness_s, prog, err_fd < 0 ? 2 : err_fd);
}

void gp_cli_dist_speak(void) {
  if (err_fd >= 0) dup2(err_fd, 2);
}

void gp_cli_dist_setup_failed(gp_dist *d, const char *prog, int reported_elsewhere) {
  gp_interrupt_quiet();
  if (!reported_elsewhere) {
    gp_cli_dist_speak();
    fprintf(stderr, "%s: %s: %s\n", prog, gp_dist_who(d), gp_error_message());
  }
  if (gp_dist_barrier(d) != GP_OK) gp_error_clear(); /* the line above is said already */
}

gp_status gp_cli_dist_agree(gp_dist *d, gp_status s, int *reported_elsewhere) {
  *reported_elsewhere = 0;
  if (d->world == 1) return s;
  /* the lowest failing rank reports: -rank maximized; W stands for none */
  int64_t v[2] = {s != GP_OK ? -(int64_t)d->rank : -(int64_t)d->world,
                  s != GP_OK ? (int64_t)gp_status_exit_code(s) : 0};
  gp_status e = gp_dist_max(d, v, 2);
  if (e != GP_OK) return e;
  if (v[0] == -(int64_t)d->world) return GP_OK;
  if (-v[0] == d->rank) return s;
  *reported_elsewhere = 1;
  return v[1] == 2 ? GP_ERR_USAGE : GP_ERR_RUNTIME;
}

/* The numbers of a stage's statistics that the reports read, as integers (times in ns). */
enum {
  ST_MEM,
  ST_ACT,
  ST_SENT,
  ST_STEPS,
  ST_SPAN,
  ST_BUSY,
  ST_FWD,
  ST_BWD,
  ST_DEV,
  ST_AR,
  ST_ARW,
  ST_ARB,
  ST_ARS,
  ST_KIND,
  ST_N = ST_KIND + GP_A_KINDS
};

static void pack(const gp_stage_stats *ss, int64_t *v) {
  const double ns = 1e9;
  v[ST_MEM] = (int64_t)ss->mem_peak;
  v[ST_ACT] = (int64_t)ss->peak_act_bytes;
  v[ST_SENT] = ss->sent_bytes;
  v[ST_STEPS] = ss->steps;
  v[ST_SPAN] = (int64_t)(ss->span_s * ns);
  v[ST_BUSY] = (int64_t)(ss->wall_busy_s * ns);
  v[ST_FWD] = (int64_t)(ss->fwd_s * ns);
  v[ST_BWD] = (int64_t)(ss->bwd_s * ns);
  v[ST_DEV] = ss->device_time;
  v[ST_AR] = (int64_t)(ss->allreduce_s * ns);
  v[ST_ARW] = (int64_t)(ss->allreduce_wait_s * ns);
  v[ST_ARB] = ss->allreduce_bytes;
  v[ST_ARS] = ss->allreduce_steps;
  for (int k = 0; k < GP_A_KINDS; k++)
    v[ST_KIND + k] = (int64_t)(ss->wall_s[k] * ns);
}

static void unpack(const int64_t *v, gp_stage_stats *ss) {
  const double ns = 1e-9;
  ss->mem_peak = (size_t)v[ST_MEM];
  ss->peak_act_bytes = (size_t)v[ST_ACT];
  ss->sent_bytes = v[ST_SENT];
  ss->steps = v[ST_STEPS];
  ss->span_s = (double)v[ST_SPAN] * ns;
  ss->wall_busy_s = (double)v[ST_BUSY] * ns;
  ss->fwd_s = (double)v[ST_FWD] * ns;
  ss->bwd_s = (double)v[ST_BWD] * ns;
  ss->device_time = (int)v[ST_DEV];
  ss->allreduce_s = (double)v[ST_AR] * ns;
  ss->allreduce_wait_s = (double)v[ST_ARW] * ns;
  ss->allreduce_bytes = v[ST_ARB];
  ss->allreduce_steps = v[ST_ARS];
  for (int k = 0; k < GP_A_KINDS; k++)
    ss->wall_s[k] = (double)v[ST_KIND + k] * ns;
}

gp_status gp_cli_dist_stats(gp_dist *d, const gp_pipeline *pl, gp_stage_stats *all) {
  const int k = gp_pipeline_stages(pl);
  for (int s = 0; s < k; s++)
    gp_pipeline_stats(pl, s, &all[s]);
  if (d->world == 1) return GP_OK;
  int64_t *v = calloc((size_t)k * ST_N, sizeof *v);
  if (!v) return GP_ERR(GP_ERR_NOMEM, "out of memory for the stages' statistics");
  for (int s = 0; s < k; s++)
    if (gp_pipeline_local(pl, s)) pack(&all[s], v + (size_t)s * ST_N);
  gp_status st = gp_dist_max(d, v, k * ST_N);
  for (int s = 0; st == GP_OK && s < k; s++)
    unpack(v + (size_t)s * ST_N, &all[s]);
  free(v);
  return st;
}

int gp_cli_dist_fail(gp_dist *d, const char *prog, gp_status s, const char *hint) {
  gp_cli_dist_speak();
  char lost[256];
  if (gp_dist_lost(d, lost, sizeof lost)) /* the cause of the MPI error it made here */
    fprintf(stderr, "%s: %s: %s: ending the run\n", prog, gp_dist_who(d), lost);
  else if (!gp_dist_ended(d)) /* else another process said why the run ends */
    fprintf(stderr, "%s: %s: %s%s\n", prog, gp_dist_who(d), gp_error_message(), hint ? hint : "");
  fflush(stderr);
  int code = gp_status_exit_code(s);
  gp_dist_abort(d, code ? code : 1);
  return code;
}
