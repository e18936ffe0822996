// Counts CUDA devices through the runtime; no device is an answer, not an error.
#include <cuda_runtime.h>

extern "C" int gp_cuda_probe_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

extern "C" int gp_cuda_probe_mem(int device, size_t *free_b, size_t *total_b) {
  int cur = 0;
  if (cudaGetDevice(&cur) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return -1;
  cudaError_t e = cudaMemGetInfo(free_b, total_b);
  (void)cudaSetDevice(cur);
  return e == cudaSuccess ? 0 : -1;
}
