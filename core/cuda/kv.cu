// CUDA operations of decoding with a cache (core/eval/kvdec.c), as core/cpu/kv.c: batched
// GEMMs over strided operands (cuBLAS's strided-batched GEMM) and row gathers of 4-byte values.
#include <limits.h>
#include <stdint.h>

#include "core/cuda/kv.h"

namespace {

bool fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

// One thread a value; rows may come from idx (the rows beam search keeps).
__global__ void gather_rows_k(int64_t rows, int64_t cols, const int32_t *idx, const uint32_t *src,
                              int64_t src_ld, uint32_t *dst, int64_t dst_ld) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
       i += (int64_t)blockDim.x * gridDim.x) {
    int64_t r = i / cols, j = i - r * cols;
    int64_t from = idx ? (int64_t)idx[r] : r;
    dst[r * dst_ld + j] = src[from * src_ld + j];
  }
}

} // namespace

gp_status gp_cuda_gemm_strided_batched(gp_backend *be, int trans_a, int trans_b, int64_t m,
                                       int64_t n, int64_t k, float alpha, const float *a,
                                       int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                                       int64_t stride_b, float beta, float *c, int64_t ldc,
                                       int64_t stride_c, int64_t batch) {
  if (batch < 0 || !fits_int(batch))
    return GP_ERR(GP_ERR_RUNTIME, "gemm_strided_batched: batch %lld", (long long)batch);
  // bf16 operands, k = 0 and the checks are gemm's: one call an entry (decoding in bf16 is
  // rare enough not to need its own batched kernel)
  if (be->precision != GP_PREC_FP32 || k == 0 || batch <= 1) {
    for (int64_t i = 0; i < batch; i++)
      GP_TRY(be->gemm(be, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b,
                      ldb, beta, c + i * stride_c, ldc));
    return GP_OK;
  }
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
      !fits_int(ldc))
    return GP_ERR(GP_ERR_RUNTIME, "gemm %lld x %lld x %lld exceeds the 32-bit BLAS interface",
                  (long long)m, (long long)n, (long long)k);
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < a_cols || ldb < b_cols || ldc < n)
    return GP_ERR(GP_ERR_RUNTIME,
                  "gemm_strided_batched: leading dimensions lda %lld, ldb %lld, ldc %lld are "
                  "smaller than the rows (%lld, %lld, %lld columns)",
                  (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols,
                  (long long)b_cols, (long long)n);
  if (m == 0 || n == 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  // row-major as column-major transposed, as cuda_gemm (backend.cu): B before A
  GP_CUBLAS_TRY(cublasSgemmStridedBatched(gp_cuda_of(be)->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
                                          (int)k, &alpha, b, (int)ldb, (long long)stride_b, a,
                                          (int)lda, (long long)stride_a, &beta, c, (int)ldc,
                                          (long long)stride_c, (int)batch));
  return GP_OK;
}

gp_status gp_cuda_gather_rows(gp_backend *be, int64_t rows, int64_t cols, const int32_t *idx,
                              const void *src, int64_t src_ld, void *dst, int64_t dst_ld) {
  if (rows <= 0 || cols <= 0) return GP_OK;
  if (src_ld < 0 || dst_ld < cols || rows > INT64_MAX / cols)
    return GP_ERR(GP_ERR_RUNTIME, "gather_rows: %lld x %lld with src_ld %lld, dst_ld %lld",
                  (long long)rows, (long long)cols, (long long)src_ld, (long long)dst_ld);
  GP_TRY(gp_cuda_use(be));
  const int64_t n = rows * cols, threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535; // the grid-stride loop covers the rest
  gather_rows_k<<<(unsigned)blocks, (unsigned)threads, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, idx, (const uint32_t *)src, src_ld, (uint32_t *)dst, dst_ld);
  GP_CUDA_LAUNCHED("gather_rows kernel");
  return GP_OK;
}
