/* CPU operations of decoding with a cache (core/eval/kvdec.c): batched GEMMs over strided
 * operands (the per-head products of one query position) and row gathers (cache rows and the
 * ids kept beside them). */
#include <string.h>

#include "core/cpu/cpu.h"

/* One gp_cpu_gemm a batch entry: each product is the very call the caller would make alone,
 * so its bits do not depend on the batching. */
gp_status gp_cpu_gemm_strided_batched(gp_backend *be, int trans_a, int trans_b, int64_t m,
                                      int64_t n, int64_t k, float alpha, const float *a,
                                      int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                                      int64_t stride_b, float beta, float *c, int64_t ldc,
                                      int64_t stride_c, int64_t batch) {
  if (batch < 0)
    return GP_ERR(GP_ERR_RUNTIME, "gemm_strided_batched: batch %lld", (long long)batch);
  for (int64_t i = 0; i < batch; i++)
    GP_TRY(gp_cpu_gemm(be, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda,
                       b + i * stride_b, ldb, beta, c + i * stride_c, ldc));
  return GP_OK;
}

gp_status gp_cpu_gather_rows(gp_backend *be, int64_t rows, int64_t cols, const int32_t *idx,
                             const void *src, int64_t src_ld, void *dst, int64_t dst_ld) {
  (void)be;
  if (rows <= 0 || cols <= 0) return GP_OK;
  if (src_ld < 0 || dst_ld < cols)
    return GP_ERR(GP_ERR_RUNTIME, "gather_rows: %lld x %lld with src_ld %lld, dst_ld %lld",
                  (long long)rows, (long long)cols, (long long)src_ld, (long long)dst_ld);
  const char *s = src;
  char *d = dst;
  for (int64_t r = 0; r < rows; r++) {
    int64_t from = idx ? idx[r] : r;
    memcpy(d + (size_t)(r * dst_ld) * 4, s + (size_t)(from * src_ld) * 4, (size_t)cols * 4);
  }
  return GP_OK;
}
