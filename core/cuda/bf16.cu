// bfloat16 on the CUDA backend: the f32 -> bf16 conversion kernels (the CPU's rounding, bit
// for bit), the widening of bf16 results, and the GEMM on cuBLAS with bf16 inputs and f32
// accumulation and output. Convolutions use these from dnn.cu.
#include <stdint.h>

#include "core/cuda/bf16.h"
#include "core/cuda/ops.h"

#define GRID_LOOP(i, n)                                                                            \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)blockDim.x * gridDim.x)

namespace {

// Round to nearest, ties to even, as core/cpu/bf16.c: add just under half a bf16 ulp, plus
// one when the kept part is odd (overflow carries into Inf); a NaN is quieted with its sign
// kept (not __float2bfloat16_rn, whose NaN bits may differ from the CPU's).
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t q = (u | 0x00400000u) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

__device__ __forceinline__ float bf16_value(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

// BF16_MIXED: f32 values rounded to bf16, kept in f32 storage (the CPU's gp_cpu_round_bf16;
// y may be x: the activations, rounded in place; no memory saved yet).
__global__ void round_f32_k(int64_t n, const float *x, float *y) {
  GRID_LOOP(i, n) y[i] = bf16_value(bf16_bits(x[i]));
}

// BF16_MIXED's stored activations: values already on the grid, so truncation is exact.
__global__ void pack_k(int64_t n, const float *x, uint16_t *y) {
  GRID_LOOP(i, n) y[i] = (uint16_t)(__float_as_uint(x[i]) >> 16);
}

__global__ void unpack_k(int64_t n, const uint16_t *x, float *y) {
  GRID_LOOP(i, n) y[i] = bf16_value(x[i]);
}

__global__ void round_k(int64_t n, const float *src, uint16_t *dst) {
  GRID_LOOP(i, n) dst[i] = bf16_bits(src[i]);
}

// rows x cols of src (row stride ld) into dst, packed (row stride cols).
__global__ void round_2d_k(int64_t rows, int64_t cols, const float *src, int64_t ld,
                           uint16_t *dst) {
  GRID_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[i] = bf16_bits(src[r * ld + c]);
  }
}

__global__ void widen_k(int64_t n, int64_t c, int64_t inner, const uint16_t *src, const float *bias,
                        int accumulate, float *y) {
  GRID_LOOP(i, n) {
    float v = bf16_value(src[i]);
    if (bias) v = __fadd_rn(v, bias[(i / inner) % c]);
    y[i] = accumulate ? __fadd_rn(y[i], v) : v;
  }
}

// 256-byte steps inside the workspace, so every part keeps cudaMalloc's alignment.
size_t round_up(size_t bytes) {
  return (bytes + 255) & ~(size_t)255;
}

gp_status to_bf16_2d(gp_backend *be, int64_t rows, int64_t cols, const float *src, int64_t ld,
                     uint16_t *dst) {
  const int64_t n = rows * cols;
  if (n == 0) return GP_OK;
  cudaStream_t st = gp_cuda_of(be)->stream;
  if (ld == cols) {
    round_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, st>>>(n, src, dst);
    GP_CUDA_LAUNCHED("bf16 round");
  } else {
    round_2d_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, st>>>(rows, cols, src, ld, dst);
    GP_CUDA_LAUNCHED("bf16 round (strided)");
  }
  return GP_OK;
}

} // namespace

gp_status gp_cuda_round_bf16(gp_backend *be, int64_t n, float *x) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  round_f32_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, gp_cuda_of(be)->stream>>>(n, x, x);
  GP_CUDA_LAUNCHED("bf16 round in place");
  return GP_OK;
}

gp_status gp_cuda_pack_bf16(gp_backend *be, int64_t n, const float *x, uint16_t *y) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  pack_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, gp_cuda_of(be)->stream>>>(n, x, y);
  GP_CUDA_LAUNCHED("bf16 pack");
  return GP_OK;
}

gp_status gp_cuda_unpack_bf16(gp_backend *be, int64_t n, const uint16_t *x, float *y) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  unpack_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, gp_cuda_of(be)->stream>>>(n, x, y);
  GP_CUDA_LAUNCHED("bf16 unpack");
  return GP_OK;
}

gp_status gp_cuda_bf16_rounded_f32(gp_backend *be, const float *in1, int64_t n1, const float *in2,
                                   int64_t n2, float **r1, float **r2) {
  const size_t s1 = round_up((size_t)n1 * sizeof(float));
  void *ws = NULL;
  GP_TRY(gp_cuda_workspace(be, s1 + round_up((size_t)n2 * sizeof(float)), &ws));
  *r1 = (float *)ws;
  *r2 = (float *)((char *)ws + s1);
  cudaStream_t st = gp_cuda_of(be)->stream;
  if (n1 > 0) round_f32_k<<<gp_cuda_blocks(be, n1), GP_CUDA_BLOCK, 0, st>>>(n1, in1, *r1);
  GP_CUDA_LAUNCHED("bf16 round (f32 copy)");
  if (n2 > 0) round_f32_k<<<gp_cuda_blocks(be, n2), GP_CUDA_BLOCK, 0, st>>>(n2, in2, *r2);
  GP_CUDA_LAUNCHED("bf16 round (f32 copy)");
  return GP_OK;
}

gp_status gp_cuda_bf16_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc) {
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const size_t a_bytes = round_up((size_t)(a_rows * a_cols) * sizeof(uint16_t));
  const size_t b_bytes = (size_t)(b_rows * b_cols) * sizeof(uint16_t);
  void *ws = NULL;
  GP_TRY(gp_cuda_workspace(be, a_bytes + b_bytes, &ws));
  uint16_t *ra = (uint16_t *)ws, *rb = (uint16_t *)((char *)ws + a_bytes);
  GP_TRY(to_bf16_2d(be, a_rows, a_cols, a, lda, ra));
  GP_TRY(to_bf16_2d(be, b_rows, b_cols, b, ldb, rb));
  // Row-major to column-major as in cuda_gemm: B before A, n before m, the same flags; the
  // copies are packed, so their leading dimensions are their row lengths.
  GP_CUBLAS_TRY(cublasGemmEx(gp_cuda_of(be)->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                             rb, CUDA_R_16BF, (int)b_cols, ra, CUDA_R_16BF, (int)a_cols, &beta, c,
                             CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return GP_OK;
}

gp_status gp_cuda_bf16_operands(gp_backend *be, const float *in1, int64_t n1, const float *in2,
                                int64_t n2, int64_t n_out, void **b1, void **b2, void **b_out) {
  const size_t s1 = round_up((size_t)n1 * sizeof(uint16_t));
  const size_t s2 = round_up((size_t)n2 * sizeof(uint16_t));
  const size_t s3 = round_up((size_t)n_out * sizeof(uint16_t));
  void *ws = NULL;
  GP_TRY(gp_cuda_workspace(be, s1 + s2 + s3, &ws));
  *b1 = ws;
  *b2 = (char *)ws + s1;
  *b_out = (char *)ws + s1 + s2;
  GP_TRY(to_bf16_2d(be, 1, n1, in1, n1, (uint16_t *)*b1));
  GP_TRY(to_bf16_2d(be, 1, n2, in2, n2, (uint16_t *)*b2));
  return GP_OK;
}

gp_status gp_cuda_bf16_widen(gp_backend *be, int64_t n, int64_t c, int64_t inner, const void *src,
                             const float *bias, int accumulate, float *y) {
  if (n == 0) return GP_OK;
  widen_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      n, c, inner, (const uint16_t *)src, bias, accumulate, y);
  GP_CUDA_LAUNCHED("bf16 widen");
  return GP_OK;
}
