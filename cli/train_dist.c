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
#include <unistd.h>

#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/train.h"
#include "core/io/safetensors.h"

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
  return GP_OK;
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

gp_status tr_dist_layout(run *r, const gp_plan *plan) {
  const gp_model *m = r->m;
  if (r->dist.world == 1 && m->pipeline.replicas == 1) return GP_OK;
  gp_layout lay;
  GP_TRY(gp_layout_make(r->dist.world, r->dist.rank, m->pipeline.replicas, plan->stages, NULL,
                        &lay));
  GP_TRY(gp_dist_set_layout(&r->dist, &lay));
  double t = tr_flags[F_LIVENESS].given ? (double)tr_flags[F_LIVENESS].i : 20;
  gp_dist_on_end(&r->dist, gp_interrupt_quiet); /* another process's line says why */
  return gp_dist_liveness_start(&r->dist, t, "gpipe-train", err_fd < 0 ? 2 : err_fd);
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

int tr_dist_fail(run *r, gp_status s, const char *hint) {
  if (r->dist.world == 1) return gp_cli_fail("gpipe-train", s, hint);
  tr_dist_speak();
  if (!gp_dist_ended(&r->dist)) /* else another process said why the run ends */
    fprintf(stderr, "gpipe-train: %s: %s%s\n", gp_dist_who(&r->dist), gp_error_message(),
          hint ? hint : "");
  fflush(stderr);
  int code = gp_status_exit_code(s);
  gp_dist_abort(&r->dist, code ? code : 1);
  return code;
}

/* The tensor names of a shard, into the index (names as JSON strings: layer paths hold no
 * quotes or backslashes). */
static gp_status index_shard(FILE *fp, const char *shard, const char *base, int *first) {
  gp_st_file *f;
  GP_TRY(gp_st_read(shard, &f));
  for (int i = 0; i < gp_st_count(f); i++) {
    fprintf(fp, "%s\n    \"%s\": \"%s\"", *first ? "" : ",", gp_st_entry_at(f, i)->name, base);
    *first = 0;
  }
  gp_st_free(f);
  return GP_OK;
}

gp_status tr_dist_save_weights(run *r, const char *path) {
  const gp_layout *l = gp_pipeline_layout(r->t.pl);
  if (r->dist.world == 1) return gp_trainer_save_weights(&r->t, path);
  if (l->procs == 1) { /* each process holds a whole replica: rank 0 writes */
    gp_status s = r->dist.rank == 0 ? gp_trainer_save_weights(&r->t, path) : GP_OK;
    gp_status b = gp_dist_barrier(&r->dist);
    return s != GP_OK ? s : b;
  }
  /* X.safetensors: X-0000p-of-0000P.safetensors by position p, and X.safetensors.index.json */
  char stem[PATH_MAX], shard[PATH_MAX + 64], idx[PATH_MAX + 32];
  snprintf(stem, sizeof stem, "%s", path);
  size_t n = strlen(stem);
  if (n > 12 && strcmp(stem + n - 12, ".safetensors") == 0) stem[n - 12] = 0;
  gp_status s = GP_OK;
  if (l->replica == 0) {
    snprintf(shard, sizeof shard, "%s-%05d-of-%05d.safetensors", stem, l->pos + 1, l->procs);
    s = gp_trainer_save_weights(&r->t, shard);
  }
  gp_status b = gp_dist_barrier(&r->dist);
  if (s == GP_OK) s = b;
  if (s != GP_OK || r->dist.rank != 0) return s;
  snprintf(idx, sizeof idx, "%s.index.json", path);
  FILE *fp = fopen(idx, "w");
  if (!fp) return GP_ERR(GP_ERR_IO, "%s: cannot write the index", idx);
  fprintf(fp, "{\n  \"metadata\": {\"format\": \"pt\", \"gpipe.model\": \"%s\"},\n"
          "  \"weight_map\": {", r->m->name);
  int first = 1;
  for (int p = 0; s == GP_OK && p < l->procs; p++) {
    snprintf(shard, sizeof shard, "%s-%05d-of-%05d.safetensors", stem, p + 1, l->procs);
    const char *base = strrchr(shard, '/') ? strrchr(shard, '/') + 1 : shard;
    s = index_shard(fp, shard, base, &first);
  }
  fprintf(fp, "\n  }\n}\n");
  if ((ferror(fp) | fclose(fp)) && s == GP_OK) s = GP_ERR(GP_ERR_IO, "%s: writing failed", idx);
  return s;
}
