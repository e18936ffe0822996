/* A build without NCCL (no CUDA or no MPI): GPU stages in different processes go through MPI
 * channels, and nothing here is ever called but gp_nccl_built and gp_nccl_version. */
#include "core/dist/nccl.h"

#define NONE GP_ERR(GP_ERR_UNSUPPORTED, "this gpipe was built without NCCL")

int gp_nccl_built(void) {
  return 0;
}
int gp_nccl_version(void) {
  return 0;
}
gp_status gp_nccl_pair(gp_dist *d, int peer, int maker, int device, int marks, gp_nccl **out) {
  (void)d, (void)peer, (void)maker, (void)device, (void)marks;
  *out = NULL;
  return NONE;
}
gp_status gp_nccl_replicas(gp_dist *d, int s, int device, gp_nccl **out) {
  (void)d, (void)s, (void)device;
  *out = NULL;
  return NONE;
}
void gp_nccl_free(gp_nccl *c) {
  (void)c;
}
gp_status gp_nccl_send(gp_nccl *c, const void *buf, size_t bytes, void *after) {
  (void)c, (void)buf, (void)bytes, (void)after;
  return NONE;
}
gp_status gp_nccl_recv(gp_nccl *c, void *buf, size_t bytes, void *after) {
  (void)c, (void)buf, (void)bytes, (void)after;
  return NONE;
}
gp_status gp_nccl_allreduce(gp_nccl *c, float *buf, int64_t n, void *after) {
  (void)c, (void)buf, (void)n, (void)after;
  return NONE;
}
gp_status gp_nccl_join(gp_nccl *c, void *stream) {
  (void)c, (void)stream;
  return NONE;
}
gp_status gp_nccl_mark(gp_nccl *c, int i) {
  (void)c, (void)i;
  return NONE;
}
gp_status gp_nccl_passed(gp_nccl *c, int i, int *passed) {
  (void)c, (void)i;
  *passed = 1;
  return NONE;
}
