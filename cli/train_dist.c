/* gpipe-train across processes: the runtime started under mpirun or srun, the layout of the
 * plan over the processes, one voice (rank 0 prints; the others only their errors, which name
 * the rank and host), the setup's outcome agreed by every process, and --save by replica 0's
 * processes. W = 1 passes through all of it untouched. */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/train.h"
#include "core/cuda/probe.h"
#include "core/io/safetensors.h"
#include "core/train/checkpoint.h"

static int err_fd = -1; /* ranks but 0: the real stderr, kept for errors */

gp_status tr_dist_start(run *r) {
  GP_TRY(gp_dist_init(&r->dist));
  if (r->dist.world > 1 && r->dist.rank != 0) {
    /* one voice: progress, notes and results are rank 0's; errors go to the kept stderr */
    fflush(stdout);
    fflush(stderr);
    err_fd = dup(2);
    int null = open("/dev/null", O_WRONLY);
    if (err_fd < 0 || null < 0)
      return GP_ERR(GP_ERR_IO, "cannot quiet the output of rank %d", r->dist.rank);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  /* from the start: a process stopped while the others load would hang their first agreement */
  double t = tr_flags[F_LIVENESS].given ? (double)tr_flags[F_LIVENESS].i : 20;
  gp_dist_on_end(&r->dist, gp_interrupt_quiet); /* another process's line says why */
  return gp_dist_liveness_start(&r->dist, t, "gpipe-train", err_fd < 0 ? 2 : err_fd);
}

void tr_dist_speak(void) {
  if (err_fd >= 0) dup2(err_fd, 2);
}

int tr_dist_voice(const run *r) {
  return r->dist.rank == 0;
}

gp_status tr_dist_check(const run *r) {
  gp_layout lay;
  return gp_layout_make(r->dist.world, r->dist.rank, r->m->pipeline.replicas,
                        r->m->pipeline.stages, NULL, &lay);
}

gp_status tr_dist_layout(run *r, gp_plan *plan) {
  const gp_model *m = r->m;
  if (r->dist.world == 1 && m->pipeline.replicas == 1) return GP_OK;
  gp_layout lay;
  GP_TRY(gp_layout_make(r->dist.world, r->dist.rank, m->pipeline.replicas, plan->stages, NULL,
                        &lay));
  GP_TRY(gp_dist_set_layout(&r->dist, &lay));
  /* GPU stages take the host's GPUs by local rank (processes of a host sharing them in turn)
   * unless --devices names them */
  const int gpus = gp_cuda_device_count();
  for (int s = lay.first[lay.pos]; !tr_flags[F_DEVICES].given && s < lay.first[lay.pos + 1]; s++)
    if (strncmp(plan->st[s].device, "cuda", 4) == 0 && gpus > 0)
      snprintf(plan->st[s].device, sizeof plan->st[s].device, "cuda:%u",
               (unsigned)(r->dist.local_rank % gpus) % 10000u);
  return GP_OK;
}

gp_status tr_dist_agree(run *r, gp_status s, int *reported_elsewhere) {
  *reported_elsewhere = 0;
  if (r->dist.world == 1) return s;
  /* the lowest failing rank reports: -rank maximized; W stands for none */
  int64_t v[2] = {s != GP_OK ? -(int64_t)r->dist.rank : -(int64_t)r->dist.world,
                  s != GP_OK ? (int64_t)gp_status_exit_code(s) : 0};
  gp_status e = gp_dist_max(&r->dist, v, 2);
  if (e != GP_OK) return e;
  if (v[0] == -(int64_t)r->dist.world) return GP_OK;
  if (-v[0] == r->dist.rank) return s;
  *reported_elsewhere = 1;
  return v[1] == 2 ? GP_ERR_USAGE : GP_ERR_RUNTIME;
}

void tr_dist_note_share(const run *r) {
  const char *prefix = getenv("GP_TEST_SHARES");
  if (!prefix || !*prefix) return;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s.%d", prefix, r->dist.rank);
  FILE *fp = fopen(path, "a");
  if (!fp) return;
  int64_t first, n;
  gp_pipeline_share(r->t.pl, &first, &n);
  fprintf(fp, "%d %" PRId64 " %" PRId64 " %" PRId64 "\n", gp_pipeline_layout(r->t.pl)->replica,
          r->t.step, first, n);
  fclose(fp);
}

/* The numbers of a stage's statistics that the report reads, as integers (times in ns): the
 * maximum over the processes is the holder's (the others have zeros), or the slowest
 * replica's. */
enum { ST_MEM, ST_STEPS, ST_SPAN, ST_BUSY, ST_FWD, ST_BWD, ST_DEV, ST_AR, ST_ARW, ST_ARB, ST_ARS,
       ST_KIND, ST_N = ST_KIND + GP_A_KINDS };

static void pack(const gp_stage_stats *ss, int64_t *v) {
  const double ns = 1e9;
  v[ST_MEM] = (int64_t)ss->mem_peak;
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

gp_status tr_dist_stats(run *r, gp_stage_stats *all) {
  const int k = gp_pipeline_stages(r->t.pl);
  for (int s = 0; s < k; s++)
    gp_pipeline_stats(r->t.pl, s, &all[s]);
  if (r->dist.world == 1) return GP_OK;
  int64_t *v = calloc((size_t)k * ST_N, sizeof *v);
  if (!v) return GP_ERR(GP_ERR_NOMEM, "out of memory for the stages' statistics");
  for (int s = 0; s < k; s++)
    if (gp_pipeline_local(r->t.pl, s)) pack(&all[s], v + (size_t)s * ST_N);
  gp_status st = gp_dist_max(&r->dist, v, k * ST_N);
  for (int s = 0; st == GP_OK && s < k; s++)
    unpack(v + (size_t)s * ST_N, &all[s]);
  free(v);
  return st;
}

int tr_dist_fail(run *r, gp_status s, const char *hint) {
  if (r->dist.world == 1) return gp_cli_fail("gpipe-train", s, hint);
  if (s == GP_ERR_INTERRUPTED && gp_interrupted()) {
    /* a signal every process agreed on (the same step, the same checkpoint): rank 0 says so,
     * and they all end as one process would */
    if (r->dist.rank == 0) fprintf(stderr, "gpipe-train: %s%s\n", gp_error_message(), hint ? hint : "");
    gp_dist_finalize(&r->dist);
    return gp_interrupt_exit_code();
  }
  tr_dist_speak();
  char lost[256];
  if (gp_dist_lost(&r->dist, lost, sizeof lost)) /* the cause of the MPI error it made here */
    fprintf(stderr, "gpipe-train: %s: %s: ending the run\n", gp_dist_who(&r->dist), lost);
  else if (!gp_dist_ended(&r->dist)) /* else another process said why the run ends */
    fprintf(stderr, "gpipe-train: %s: %s%s\n", gp_dist_who(&r->dist), gp_error_message(),
            hint ? hint : "");
  fflush(stderr);
  int code = gp_status_exit_code(s);
  gp_dist_abort(&r->dist, code ? code : 1);
  return code;
}

/* Every process's outcome: GP_OK when all wrote their part, else this one's error or a line
 * saying another's (which reports it). */
static gp_status all_wrote(run *r, gp_status s, const char *what) {
  int all;
  gp_status a = gp_dist_all(&r->dist, s == GP_OK, &all);
  if (s != GP_OK) return s;
  if (a != GP_OK) return a;
  return all ? GP_OK
             : GP_ERR(GP_ERR_IO, "%s: another process could not write its part (its line says "
                      "why)", what);
}

gp_status tr_dist_save_weights(run *r, const char *path) {
  const gp_layout *l = gp_pipeline_layout(r->t.pl);
  if (r->dist.world == 1) return gp_trainer_save_weights(&r->t, path);
  if (l->procs == 1) /* each process holds a whole replica: rank 0 writes */
    return all_wrote(r, r->dist.rank == 0 ? gp_trainer_save_weights(&r->t, path) : GP_OK, path);
  GP_TRY(all_wrote(r, gp_weights_write_part(&r->t, path, l, 0), path));
  return all_wrote(r, gp_weights_commit(&r->t, path, l), path);
}

gp_status tr_dist_save_checkpoint(run *r, const char *dir, const gp_ckpt_pos *pos) {
  const gp_layout *l = gp_pipeline_layout(r->t.pl);
  if (r->dist.world == 1) return gp_trainer_save_checkpoint(&r->t, dir, pos);
  if (l->procs == 1)
    return all_wrote(r, r->dist.rank == 0 ? gp_trainer_save_checkpoint(&r->t, dir, pos) : GP_OK,
                     dir);
  GP_TRY(all_wrote(r, gp_ckpt_write_part(&r->t, dir, pos, l, 0), dir));
  return all_wrote(r, gp_ckpt_commit(&r->t, dir, pos, l), dir);
}

gp_status tr_dist_shared_dir(run *r) {
  if (r->dist.world == 1 || !tr_flags[F_CKPT_DIR].given) return GP_OK;
  char probe[PATH_MAX];
  snprintf(probe, sizeof probe, "%.4000s/.shared-by-rank-0", tr_flags[F_CKPT_DIR].s);
  int64_t host[2] = {0, 0}; /* rank 0's pid and a nonce, written there and read back */
  if (r->dist.rank == 0) {
    host[0] = (int64_t)getpid();
    host[1] = (int64_t)time(NULL);
    FILE *f = fopen(probe, "w");
    if (f) {
      fprintf(f, "%" PRId64 " %" PRId64 "\n", host[0], host[1]);
      fclose(f);
    }
  }
  GP_TRY(gp_dist_bcast(&r->dist, host, sizeof host, 0));
  int64_t seen[2] = {-1, -1};
  FILE *f = fopen(probe, "r");
  if (f) {
    if (fscanf(f, "%" SCNd64 " %" SCNd64, &seen[0], &seen[1]) != 2) seen[0] = -1;
    fclose(f);
  }
  int64_t blind = seen[0] == host[0] && seen[1] == host[1] ? -1 : r->dist.rank;
  GP_TRY(gp_dist_max(&r->dist, &blind, 1));
  GP_TRY(gp_dist_barrier(&r->dist));
  if (r->dist.rank == 0) remove(probe);
  if (blind < 0) return GP_OK;
  return GP_ERR(GP_ERR_USAGE, "--checkpoint-dir %s: rank %" PRId64 " does not see the files rank 0 "
                "writes there: processes on several hosts need a folder every host shares",
                tr_flags[F_CKPT_DIR].s, blind);
}
