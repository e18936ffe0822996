/* What the CUDA backend's cuDNN convolution cache has done, for tests and benchmarks;
 * callable from C in a build with CUDA (core/cuda/dnn.cu). */
#ifndef GP_CUDA_DNN_H
#define GP_CUDA_DNN_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "core/backend.h"

/* Of a CUDA instance: algorithm searches run so far (one per shape and direction) and
 * convolution calls that found their algorithm already chosen. */
gp_status gp_cuda_conv_cache_stats(gp_backend *be, int64_t *searches, int64_t *hits);

#ifdef __cplusplus
}
#endif

#endif
