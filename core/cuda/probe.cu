// Counts CUDA devices through the runtime; no device is an answer, not an error.
#include <cuda_runtime.h>

extern "C" int gp_cuda_probe_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}
