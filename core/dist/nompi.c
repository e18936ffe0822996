/* A build without MPI: one process only. A launch of several processes is refused in one line;
 * everything else is the single process's trivial case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dist/dist.h"

gp_status gp_dist_init(gp_dist *d) {
  memset(d, 0, sizeof *d);
  d->world = d->local_size = 1;
  gethostname(d->host, sizeof d->host - 1);
  gp_layout_single(1, &d->lay);
  int w = gp_dist_launched();
  if (w > 1)
    return GP_ERR(GP_ERR_USAGE,
                  "launched as %d processes, but this gpipe was built without MPI "
                  "(install libopenmpi-dev and rebuild with -Dmpi=auto)",
                  w);
  return GP_OK;
}

void gp_dist_finalize(gp_dist *d) {
  (void)d;
}
void gp_dist_abort(gp_dist *d, int code) {
  (void)d;
  (void)code;
}
int gp_dist_lost(const gp_dist *d, char *buf, size_t n) {
  (void)d, (void)buf, (void)n;
  return 0;
}
int gp_dist_ended(const gp_dist *d) {
  (void)d;
  return 0;
}
void gp_dist_on_end(gp_dist *d, void (*fn)(void)) {
  (void)d, (void)fn;
}
const char *gp_dist_who(const gp_dist *d) {
  (void)d;
  return "";
}
gp_status gp_dist_set_layout(gp_dist *d, const gp_layout *l) {
  d->lay = *l;
  return l->world == 1 ? GP_OK
                       : GP_ERR(GP_ERR_USAGE, "a layout of %d processes without MPI", l->world);
}
gp_status gp_dist_barrier(gp_dist *d) {
  (void)d;
  return GP_OK;
}
gp_status gp_dist_bcast(gp_dist *d, void *buf, size_t bytes, int root) {
  (void)d, (void)buf, (void)bytes, (void)root;
  return GP_OK;
}
gp_status gp_dist_pair_share(gp_dist *d, int from, int to, void *buf, size_t bytes) {
  (void)d, (void)from, (void)to, (void)buf, (void)bytes;
  return GP_ERR(GP_ERR_UNSUPPORTED, "this gpipe was built without MPI");
}
gp_status gp_dist_bcast_replicas(gp_dist *d, int s, void *buf, size_t bytes) {
  (void)d, (void)s, (void)buf, (void)bytes;
  return GP_OK;
}
gp_status gp_dist_max(gp_dist *d, int64_t *v, int n) {
  (void)d, (void)v, (void)n;
  return GP_OK;
}
gp_status gp_dist_max_i32(gp_dist *d, int32_t *v, int64_t n) {
  (void)d, (void)v, (void)n;
  return GP_OK;
}
gp_status gp_dist_all(gp_dist *d, int flag, int *all) {
  (void)d;
  *all = flag;
  return GP_OK;
}
static gp_status none(void) {
  return GP_ERR(GP_ERR_RUNTIME, "internal: a hand-off between processes without MPI");
}
gp_status gp_net_isend(gp_dist *d, int pos, int tag, const void *buf, size_t bytes,
                       gp_net_req **out) {
  (void)d, (void)pos, (void)tag, (void)buf, (void)bytes, (void)out;
  return none();
}
gp_status gp_net_irecv(gp_dist *d, int pos, int tag, void *buf, size_t bytes, gp_net_req **out) {
  (void)d, (void)pos, (void)tag, (void)buf, (void)bytes, (void)out;
  return none();
}
gp_status gp_net_test(gp_net_req **r, int *done) {
  (void)r;
  *done = 1;
  return GP_OK;
}
void gp_net_drop(gp_net_req **r) {
  (void)r;
}
int gp_net_tag_max(gp_dist *d) {
  (void)d;
  return 32767;
}
gp_status gp_dist_sum_doubles(gp_dist *d, double *v, int64_t n, int all_replicas) {
  (void)d, (void)v, (void)n, (void)all_replicas;
  return GP_OK;
}
gp_status gp_dist_sum_replicas(gp_dist *d, int s, float *v, int64_t n) {
  (void)d, (void)s, (void)v, (void)n;
  return GP_OK;
}
gp_status gp_dist_isum_replicas(gp_dist *d, int s, float *v, int64_t n, gp_net_req **out) {
  (void)d, (void)s, (void)v, (void)n, (void)out;
  return none();
}
gp_status gp_dist_gather_replicas(gp_dist *d, int s, const double *v, int n, double *out) {
  (void)d, (void)s;
  memcpy(out, v, sizeof *v * (size_t)n);
  return GP_OK;
}
gp_status gp_dist_liveness_start(gp_dist *d, double timeout_s, const char *prog, int err_fd) {
  (void)d, (void)timeout_s, (void)prog, (void)err_fd;
  return GP_OK;
}
void gp_dist_liveness_stop(gp_dist *d) {
  (void)d;
}
gp_status gp_dist_pingpong(gp_dist *d, size_t bytes, int trips, double *one_way_s) {
  (void)d, (void)bytes, (void)trips;
  *one_way_s = 0;
  return GP_OK;
}
gp_status gp_dist_allreduce_time(gp_dist *d, size_t bytes, int reps, double *s) {
  (void)d, (void)bytes, (void)reps;
  *s = 0;
  return GP_OK;
}
