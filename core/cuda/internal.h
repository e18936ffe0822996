/* Shared by the CUDA backend's translation units (compiled by nvcc as C++17): the instance
 * state behind gp_backend.impl, error checking, and how the op table is filled. */
#ifndef GP_CUDA_INTERNAL_H
#define GP_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "core/backend.h"
#include "core/status.h"
}

typedef struct gp_cuda_impl {
  int device;
  cudaStream_t stream;  /* every op of this instance runs on it, in order */
  cudaStream_t in, out; /* copy queues GP_Q_IN, GP_Q_OUT (order.cu) */
  cublasHandle_t blas;  /* bound to stream */
  cudnnHandle_t dnn;    /* bound to stream */
  void *scratch;        /* gp_backend.scratch: device memory, grown on demand */
  size_t scratch_bytes;
  void *dnn_state; /* owned by dnn.cu (descriptor and algorithm caches), freed by its release */
  /* graph.cu: whether this instance's stream is being recorded, and gp_backend.graph_counters */
  int recording;
  unsigned long long unsafe, frees;
  const char *why;
  void *blas_ws; /* cuBLAS's workspace (cublasSetWorkspace) */
  void *lt;      /* cublasLtHandle_t of lt.cu, made at its first use, freed by gp_cuda_lt_release */
} gp_cuda_impl;

static inline gp_cuda_impl *gp_cuda_of(gp_backend *be) {
  return (gp_cuda_impl *)be->impl;
}

/* GP_ERR_RUNTIME "WHAT: <CUDA/cuBLAS/cuDNN message> (FILE:LINE)" unless the call succeeded. */
gp_status gp_cuda_check(cudaError_t e, const char *what, const char *file, int line);
gp_status gp_cublas_check(cublasStatus_t e, const char *what, const char *file, int line);
gp_status gp_cudnn_check(cudnnStatus_t e, const char *what, const char *file, int line);
#define GP_CUDA_TRY(call) GP_TRY(gp_cuda_check((call), #call, __FILE__, __LINE__))
#define GP_CUBLAS_TRY(call) GP_TRY(gp_cublas_check((call), #call, __FILE__, __LINE__))
#define GP_CUDNN_TRY(call) GP_TRY(gp_cudnn_check((call), #call, __FILE__, __LINE__))
/* After a kernel launch: the launch error, if any. */
#define GP_CUDA_LAUNCHED(name) GP_TRY(gp_cuda_check(cudaGetLastError(), name, __FILE__, __LINE__))

/* Device memory of the instance (cudaMalloc; 0 bytes still gives a pointer): counted in
 * gp_backend.mem_used / mem_peak and refused with GP_ERR_NOMEM past mem_limit. Every device
 * allocation of the backend goes through these two, so the count is the instance's. */
gp_status gp_cuda_dev_alloc(gp_backend *be, size_t bytes, void **out);
cudaError_t gp_cuda_dev_free(gp_backend *be, void *p); /* NULL ok */

/* Called before anything an op does that a CUDA graph cannot record (the host waits for the
 * stream, memory is allocated or freed, a kernel argument changes with each step): counts it
 * (graph_counters) and, while the stream is being recorded, fails with why, before the call
 * that would have invalidated the recording (graph.cu). */
static inline gp_status gp_cuda_unsafe(gp_backend *be, const char *why) {
  gp_cuda_impl *im = (gp_cuda_impl *)be->impl;
  im->unsafe++;
  im->why = why;
  if (im->recording) return GP_ERR(GP_ERR_RUNTIME, "not recordable in a CUDA graph: %s", why);
  return GP_OK;
}

/* The host waits for the instance's stream, counted as gp_cuda_unsafe(why). */
static inline gp_status gp_cuda_wait(gp_backend *be, const char *why) {
  GP_TRY(gp_cuda_unsafe(be, why));
  return gp_cuda_check(cudaStreamSynchronize(((gp_cuda_impl *)be->impl)->stream),
                       "cudaStreamSynchronize", __FILE__, __LINE__);
}

/* Device scratch of at least bytes (valid until the next call on this instance). */
gp_status gp_cuda_scratch(gp_backend *be, size_t bytes, void **out);

/* backend.cu fills memory, ordering, GEMM, element-wise, reduction and optimizer ops, then
 * calls gp_cuda_dnn_install for the rest (dnn.cu: conv2d, pool2d, batchnorm, layernorm,
 * embedding, attention softmax, softmax backward, softmax cross-entropy), and
 * gp_cuda_dnn_release from destroy. */
gp_status gp_cuda_dnn_install(gp_backend *be);
void gp_cuda_dnn_release(gp_backend *be);

/* order.cu: creates the copy streams and fills the ordering ops (events, copy_peer, pinned
 * host memory, from_host_async); release syncs and destroys the copy streams. */
gp_status gp_cuda_order_install(gp_backend *be);

/* graph.cu: fills the graph ops and gives cuBLAS a workspace of its own (its default size), so
 * that a recorded GEMM allocates nothing. */
gp_status gp_cuda_graph_install(gp_backend *be);
void gp_cuda_graph_release(gp_backend *be);
void gp_cuda_order_release(gp_backend *be);

/* Makes the instance's device current for the calling thread (a worker may run on another
 * thread than the one that created the instance); every entry point calls it first. */
gp_status gp_cuda_use(gp_backend *be);

#endif
