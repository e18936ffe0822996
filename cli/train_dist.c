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
#include "cli/dist_voice.h"
#include "cli/interrupt.h"
#include "cli/train.h"
#include "core/cuda/probe.h"
#include "core/io/safetensors.h"
#include "core/train/checkpoint.h"

gp_status tr_dist_start(run *r) {
  double t = tr_flags[F_LIVENESS].given ? (double)tr_flags[F_LIVENESS].i : 20;
  return gp_cli_dist_start(&r->dist, "gpipe-train", t);
}

int tr_dist_voice(const run *r) {
  return r->dist.rank == 0;
}

/* The launch's layout of `stages` stages, `chunks` a device (interleaved; else 1): --replicas and
 * the processes, and a plan file's processes: (one a device). */
static gp_status layout_of(const run *r, int stages, int chunks, gp_layout *lay) {
  const gp_pipeline_spec *ps = &r->m->pipeline;
  const int R = ps->replicas, W = r->dist.world, planned = W > 1 && ps->n_procs > 0;
  if (planned && W % R == 0 && ps->n_procs * R != W)
    return GP_ERR(GP_ERR_USAGE,
                  "--partition %s: the plan's processes: put a replica's stages on %d process%s, "
                  "this launch has %d (%d processes / %d replica%s): launch %d processes, or make "
                  "the plan with gpipe-partition --processes %d --replicas %d",
                  tr_flags[F_PARTITION].s, ps->n_procs, ps->n_procs == 1 ? "" : "es", W / R, W, R,
                  R == 1 ? "" : "s", ps->n_procs * R, W, R);
  /* one process: the plan's processes: are for a launch */
  GP_TRY(gp_layout_make(W, r->dist.rank, R, stages / chunks, planned ? ps->procs : NULL, lay));
  gp_layout_interleave(lay, chunks);
  return GP_OK;
}

gp_status tr_dist_check(const run *r) {
  gp_layout lay;
  GP_TRY(layout_of(r, r->m->pipeline.stages, 1, &lay));
  /* the decoding cache (core/eval/kvdec.h) runs every stage in one process; greedy
   * translation falls back to the uncached path, these two have none */
  const int cached[] = {F_BEAM, F_GENERATE};
  for (size_t i = 0; r->dist.world > 1 && i < sizeof cached / sizeof cached[0]; i++)
    if (tr_flags[cached[i]].given)
      return GP_ERR(GP_ERR_USAGE,
                    "%s decodes with the key/value cache, which needs every stage in one process; "
                    "this launch has %d: run it without mpirun",
                    tr_flags[cached[i]].name, r->dist.world);
  return GP_OK;
}

gp_status tr_dist_layout(run *r, gp_plan *plan) {
  const gp_model *m = r->m;
  if (r->dist.world == 1 && m->pipeline.replicas == 1) return GP_OK;
  gp_layout lay;
  GP_TRY(layout_of(r, plan->stages, gp_plan_chunks(plan), &lay));
  GP_TRY(gp_dist_set_layout(&r->dist, &lay));
  /* GPU stages take the host's GPUs by local rank (processes of a host sharing them in turn)
   * unless --devices names them */
  const int gpus = gp_cuda_device_count();
  for (int s = 0; !tr_flags[F_DEVICES].given && s < plan->stages; s++)
    if (gp_layout_local(&lay, s) && strncmp(plan->st[s].device, "cuda", 4) == 0 && gpus > 0)
      snprintf(plan->st[s].device, sizeof plan->st[s].device, "cuda:%u",
               (unsigned)(r->dist.local_rank % gpus) % 10000u);
  return GP_OK;
}

gp_status tr_dist_agree(run *r, gp_status s, int *reported_elsewhere) {
  return gp_cli_dist_agree(&r->dist, s, reported_elsewhere);
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

gp_status tr_dist_want(run *r) {
  if (r->dist.world == 1) return GP_OK; /* one process reads everything, as ever */
  unsigned char used[GP_MAX_MODEL_INPUTS];
  gp_pipeline_inputs_used(r->t.pl, used);
  const gp_layout *l = gp_pipeline_layout(r->t.pl);
  gp_batch_source *src[3] = {r->d.train, r->d.eval, r->d.test};
  for (int i = 0; i < 3; i++)
    if (src[i] && (i < 2 || src[2] != src[1]))
      GP_TRY(gp_batch_source_want(src[i], used, l->replica, l->replicas));
  return GP_OK;
}

void tr_dist_note_data(const run *r) {
  const char *prefix = getenv("GP_TEST_DATA");
  if (!prefix || !*prefix || !r->d.train) return;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s.%d", prefix, r->dist.rank);
  FILE *fp = fopen(path, "w");
  if (!fp) return;
  gp_batch_source_stats st;
  gp_batch_source_stats_get(r->d.train, &st);
  fprintf(fp, "decoded %" PRId64 " batches %" PRId64 " wait_s %.6f\n", st.decoded, st.batches,
          st.wait_s);
  fclose(fp);
}

gp_status tr_dist_stats(run *r, gp_stage_stats *all) {
  return gp_cli_dist_stats(&r->dist, r->t.pl, all);
}

int tr_dist_fail(run *r, gp_status s, const char *hint) {
  if (r->dist.world == 1) return gp_cli_fail("gpipe-train", s, hint);
  if (s == GP_ERR_INTERRUPTED && gp_interrupted()) {
    /* a signal every process agreed on (the same step, the same checkpoint): rank 0 says so,
     * and they all end as one process would */
    if (r->dist.rank == 0)
      fprintf(stderr, "gpipe-train: %s%s\n", gp_error_message(), hint ? hint : "");
    gp_dist_finalize(&r->dist);
    return gp_interrupt_exit_code();
  }
  return gp_cli_dist_fail(&r->dist, "gpipe-train", s, hint);
}

/* Every process's outcome: GP_OK when all wrote their part, else this one's error or a line
 * saying another's (which reports it). */
static gp_status all_wrote(run *r, gp_status s, const char *what) {
  int all;
  gp_status a = gp_dist_all(&r->dist, s == GP_OK, &all);
  if (s != GP_OK) return s;
  if (a != GP_OK) return a;
  return all ? GP_OK
             : GP_ERR(GP_ERR_IO,
                      "%s: another process could not write its part (its line says "
                      "why)",
                      what);
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
  return GP_ERR(GP_ERR_USAGE,
                "--checkpoint-dir %s: rank %" PRId64 " does not see the files rank 0 "
                "writes there: processes on several hosts need a folder every host shares",
                tr_flags[F_CKPT_DIR].s, blind);
}

int tr_dist_stages_here(const run *r, int stages) {
  gp_layout lay;
  if (r->dist.world == 1 || layout_of(r, stages, 1, &lay) != GP_OK) {
    gp_error_clear();
    return stages;
  }
  return lay.first[lay.pos + 1] - lay.first[lay.pos];
}

gp_status tr_dist_bcast(run *r, void *buf, size_t bytes) {
  return r->dist.world > 1 ? gp_dist_bcast(&r->dist, buf, bytes, 0) : GP_OK;
}
