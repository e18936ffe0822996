/* CUDA presence, callable from plain C whether or not the build has CUDA. */
#include "core/cuda/probe.h"

#include "gp_config.h"

#if GP_HAVE_CUDA
int gp_cuda_probe_count(void); /* core/cuda/probe.cu */
#endif

int gp_cuda_device_count(void) {
#if GP_HAVE_CUDA
  return gp_cuda_probe_count();
#else
  return 0;
#endif
}
