/* The CUDA backend's fused ops (core/backend.h's fusion section), for backend.cu's table:
 * lt.cu, the GEMM with a bias and activation epilogue on cuBLASLt; fused.cu, the residual add
 * with a layer or RMS norm in one kernel. Compiled by nvcc only. */
#ifndef GP_CUDA_FUSED_H
#define GP_CUDA_FUSED_H

#include "core/cuda/internal.h"

/* be->linear_act_forward (lt.cu) */
gp_status gp_cuda_lt_linear_act(gp_backend *be, gp_activation act, int64_t rows, int64_t n,
                                int64_t k, const float *x, const float *w, const float *bias,
                                float *pre, float *z, int *taken);

/* Frees the instance's cuBLASLt handle, if lt.cu made one (destroy). */
void gp_cuda_lt_release(gp_backend *be);

/* Fills the fusion ops of the table (fused.cu; after gp_cuda_dnn_install: it uses its launch
 * geometry). */
void gp_cuda_fused_install(gp_backend *be);

#endif
