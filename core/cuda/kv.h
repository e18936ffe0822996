/* Private to the CUDA backend: decoding's ops (kv.cu), installed by backend.cu. */
#ifndef GP_CUDA_KV_H
#define GP_CUDA_KV_H

#include "core/cuda/internal.h"

gp_status gp_cuda_gemm_strided_batched(gp_backend *be, int trans_a, int trans_b, int64_t m,
                                       int64_t n, int64_t k, float alpha, const float *a,
                                       int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                                       int64_t stride_b, float beta, float *c, int64_t ldc,
                                       int64_t stride_c, int64_t batch);
gp_status gp_cuda_gather_rows(gp_backend *be, int64_t rows, int64_t cols, const int32_t *idx,
                              const void *src, int64_t src_ld, void *dst, int64_t dst_ld);

#endif
