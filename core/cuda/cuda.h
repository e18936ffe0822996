/* The CUDA backend: callable from plain C whether or not the build has CUDA. */
#ifndef GP_CUDA_H
#define GP_CUDA_H

#include "core/backend.h"

/* A backend instance on CUDA device `device` with its own stream, cuBLAS and cuDNN handles.
 * GP_ERR_UNSUPPORTED when the build has no CUDA; GP_ERR_RUNTIME (with the CUDA message) when
 * the device cannot be used. Free with gp_backend_destroy. */
gp_status gp_cuda_backend_create(int device, gp_backend **out);

/* The CUDA stream behind queue q of a CUDA instance (a cudaStream_t), for the libraries that
 * queue work of their own on it (NCCL, core/dist/nccl.c). Only in builds with CUDA. */
void *gp_cuda_queue(gp_backend *be, gp_queue q);

#endif
