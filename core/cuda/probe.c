/* CUDA presence, callable from plain C whether or not the build has CUDA. */
#include "core/cuda/probe.h"

#include "gp_config.h"

#if GP_HAVE_CUDA
int gp_cuda_probe_count(void); /* core/cuda/probe.cu */
int gp_cuda_probe_mem(int device, size_t *free_b, size_t *total_b);
#endif

int gp_cuda_device_count(void) {
#if GP_HAVE_CUDA
  return gp_cuda_probe_count();
#else
  return 0;
#endif
}

int gp_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
#if GP_HAVE_CUDA
  return gp_cuda_probe_mem(device, free_bytes, total_bytes);
#else
  (void)device;
  return -1;
#endif
}
