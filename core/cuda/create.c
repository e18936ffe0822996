/* gp_cuda_backend_create for plain C: forwards to core/cuda/backend.cu when the build has
 * CUDA, and otherwise says so. */
#include "core/cuda/cuda.h"

#include "gp_config.h"

#if GP_HAVE_CUDA
gp_status gp_cuda_backend_create_impl(int device, gp_backend **out); /* core/cuda/backend.cu */
#endif

gp_status gp_cuda_backend_create(int device, gp_backend **out) {
  *out = NULL;
#if GP_HAVE_CUDA
  return gp_cuda_backend_create_impl(device, out);
#else
  (void)device;
  return GP_ERR(GP_ERR_UNSUPPORTED, "this build has no CUDA");
#endif
}

#if !GP_HAVE_CUDA
/* no CUDA instance exists to ask (gp_cuda_backend_create refused) */
void *gp_cuda_queue(gp_backend *be, gp_queue q) {
  (void)be, (void)q;
  return NULL;
}
#endif
