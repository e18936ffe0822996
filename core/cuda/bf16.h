/* bfloat16 on the CUDA backend (be->precision == GP_PREC_BF16), for backend.cu (GEMM) and
 * dnn.cu (convolution): operands converted to bf16 by an own kernel with the CPU's rounding
 * (core/cpu/bf16.c: to nearest, ties to even, NaN kept; the same bits), and results widened
 * back to f32. Compiled by nvcc only. */
#ifndef GP_CUDA_BF16_H
#define GP_CUDA_BF16_H

#include <stdint.h>

#include "core/cuda/internal.h"

/* The row-major GEMM of core/backend.h in bf16: packed bf16 copies of op(A)'s and op(B)'s
 * operands, then cublasGemmEx with bf16 inputs, f32 output (C = alpha AB + beta C, C not read
 * when beta == 0) and CUBLAS_COMPUTE_32F: exact products, f32 accumulation. For cuda_gemm,
 * after its checks (sizes within int, m, n, k > 0, leading dimensions). */
gp_status gp_cuda_bf16_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc);

/* be->round_bf16: x[i] rounded to bf16 in place, in f32 storage, with the CPU's rounding
 * (BF16_MIXED's activations: the CPU's values, bit for bit; no memory or bandwidth saved). */
gp_status gp_cuda_round_bf16(gp_backend *be, int64_t n, float *x);
/* be->pack_bf16, be->unpack_bf16: BF16_MIXED's stored activations, the high halves of values
 * on the bf16 grid (truncated, as the CPU's: exact there), and back. */
gp_status gp_cuda_pack_bf16(gp_backend *be, int64_t n, const float *x, uint16_t *y);
gp_status gp_cuda_unpack_bf16(gp_backend *be, int64_t n, const uint16_t *x, float *y);

/* BF16_MIXED's filter gradient: f32 copies of in1 (n1 values) and in2 (n2) rounded to bf16, in
 * the instance's private workspace (as gp_cuda_bf16_operands; valid until its next use). */
gp_status gp_cuda_bf16_rounded_f32(gp_backend *be, const float *in1, int64_t n1, const float *in2,
                                   int64_t n2, float **r1, float **r2);

/* For a convolution: bf16 copies of in1 (n1 values) and in2 (n2), and room for n_out bf16
 * results, in the instance's private workspace (gp_cuda_workspace: not the public scratch,
 * not the dnn family's workspace that cuDNN gets; valid until the next op that uses it). */
gp_status gp_cuda_bf16_operands(gp_backend *be, const float *in1, int64_t n1, const float *in2,
                                int64_t n2, int64_t n_out, void **b1, void **b2, void **b_out);

/* The n bf16 values of src to f32 over [n / (c * inner), c, inner]: y = src (+ bias[channel]
 * when bias is not NULL), or y += src when accumulate; the additions are f32 additions,
 * as on the CPU. */
gp_status gp_cuda_bf16_widen(gp_backend *be, int64_t n, int64_t c, int64_t inner, const void *src,
                             const float *bias, int accumulate, float *y);

#endif
