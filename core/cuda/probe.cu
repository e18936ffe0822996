// Counts CUDA devices through the runtime; no device is an answer, not an error.
#include <stdlib.h>

#include <cuda_runtime.h>

// fp32 is true fp32 in gpipe: cuBLAS and cuDNN may not round fp32 operands to TF32. cuDNN's
// default math type allows TF32 on Ampere and later, and its fastest FP32-FMA algorithms are
// only offered under it, so the CUDA backend runs fp32 convolutions with the default math and
// turns TF32 off the documented, library-wide way, before any handle exists.
// tests/cuda/test_cuda_dnn.c checks that no convolution direction rounds to TF32.
extern "C" void gp_cuda_no_tf32(void) {
  static int done;
  if (!done) setenv("NVIDIA_TF32_OVERRIDE", "0", 1), done = 1;
}

extern "C" int gp_cuda_probe_count(void) {
  gp_cuda_no_tf32();
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
