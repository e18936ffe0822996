/* Private to backend.cu, kernels.cu and reduce.cu: the op functions they put in the table,
 * launch geometry and the instance's private reduction workspace (never the public scratch,
 * which layers keep data in across calls). */
#ifndef GP_CUDA_OPS_H
#define GP_CUDA_OPS_H

#include "core/cuda/internal.h"

/* Threads per block of the element-wise and reduction kernels. */
#define GP_CUDA_BLOCK 256

/* Blocks for a grid-stride loop over n items (>= 1; capped, the loop covers the rest). */
unsigned gp_cuda_blocks(gp_backend *be, int64_t n);
/* Device workspace of the instance for partial sums, at least bytes; valid until the next
 * op that uses it. Separate from gp_cuda_scratch. */
gp_status gp_cuda_workspace(gp_backend *be, size_t bytes, void **out);
/* A pinned host buffer of 64 bytes for small results of reductions. */
void *gp_cuda_host_result(gp_backend *be);

/* kernels.cu */
gp_status gp_cuda_act_forward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                              float *y);
gp_status gp_cuda_act_backward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                               const float *y, const float *dy, float *dx);
gp_status gp_cuda_dropout_forward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                  const float *x, float *y);
gp_status gp_cuda_dropout_backward(gp_backend *be, int64_t n, float p, uint64_t key,
                                   uint64_t offset, const float *dy, float *dx);
gp_status gp_cuda_axpby(gp_backend *be, int64_t n, float a, const float *x, float b, float *y);
gp_status gp_cuda_mul(gp_backend *be, int64_t n, const float *a, const float *b, float *y);
gp_status gp_cuda_copy2d(gp_backend *be, int64_t rows, int64_t cols, const float *src,
                         int64_t src_ld, float *dst, int64_t dst_ld);
/* C = beta * C over an m x n row-major block (beta == 0: C = 0, not read); gemm with k = 0. */
gp_status gp_cuda_scale2d(gp_backend *be, int64_t m, int64_t n, float beta, float *c, int64_t ldc);
gp_status gp_cuda_sgd_update(gp_backend *be, int64_t n, const gp_sgd_hp *hp, float *w,
                             const float *g, float *buf);
gp_status gp_cuda_adamw_update(gp_backend *be, int64_t n, const gp_adamw_hp *hp, float *w,
                               const float *g, float *m, float *v);
gp_status gp_cuda_rmsprop_update(gp_backend *be, int64_t n, const gp_rmsprop_hp *hp, float *w,
                                 const float *g, float *sq, float *buf);

/* reduce.cu */
gp_status gp_cuda_bias_add(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *bias,
                           float *y);
gp_status gp_cuda_bias_grad(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                            float *dbias);
gp_status gp_cuda_sum(gp_backend *be, int64_t n, const float *x, double *host_out);
gp_status gp_cuda_sumsq(gp_backend *be, int64_t n, const float *x, double *host_out);
gp_status gp_cuda_count_correct(gp_backend *be, int64_t n, int64_t k, const float *logits,
                                const int32_t *labels, int64_t *host_out);

#endif
