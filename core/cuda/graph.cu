// CUDA graphs for the executor (core/exec/graphs.c): recording the instance's stream, launching
// what was recorded, and the counters that say what could not have been recorded.
#include "core/cuda/internal.h"

struct gp_graph {
  cudaGraphExec_t exec;
};

// Thread-local mode: an unsafe call (cudaMalloc, a synchronization) of the recording thread ends
// the recording as invalid, and other stages' threads, which record their own streams at the
// same time, are not affected (the CUDA programming guide, "Cross-stream dependencies and
// events" and "Prohibited and unhandled operations"; cudaThreadExchangeStreamCaptureMode).
static gp_status graph_begin(gp_backend *be) {
  GP_TRY(gp_cuda_use(be));
  gp_cuda_impl *im = gp_cuda_of(be);
  if (im->recording)
    return GP_ERR(GP_ERR_RUNTIME, "internal: a CUDA graph is already being recorded");
  GP_CUDA_TRY(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal));
  im->recording = 1;
  return GP_OK;
}

static gp_status graph_end(gp_backend *be, gp_graph **out) {
  gp_cuda_impl *im = gp_cuda_of(be);
  if (out) *out = NULL;
  if (!im->recording) return GP_ERR(GP_ERR_RUNTIME, "internal: no CUDA graph is being recorded");
  im->recording = 0;
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(im->stream, &g);
  if (!out || e != cudaSuccess) { // discarded, or a call inside invalidated it
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError(); // not sticky: the next launch check starts clean
    return out ? gp_cuda_check(e, "cudaStreamEndCapture", __FILE__, __LINE__) : GP_OK;
  }
  gp_graph *gr = (gp_graph *)calloc(1, sizeof *gr);
  if (!gr) {
    (void)cudaGraphDestroy(g);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for a CUDA graph");
  }
  e = cudaGraphInstantiate(&gr->exec, g, 0);
  (void)cudaGraphDestroy(g); // the executable graph is a copy
  if (e != cudaSuccess) {
    free(gr);
    return gp_cuda_check(e, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  *out = gr;
  return GP_OK;
}

static gp_status graph_launch(gp_backend *be, gp_graph *g) {
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaGraphLaunch(g->exec, gp_cuda_of(be)->stream));
  return GP_OK;
}

// Rare (a graph made invalid, the instance's end): waiting for the stream first makes sure no
// launch of it is still queued.
static void graph_destroy(gp_backend *be, gp_graph *g) {
  if (!g) return;
  (void)cudaSetDevice(be->device);
  (void)cudaStreamSynchronize(gp_cuda_of(be)->stream);
  (void)cudaGraphExecDestroy(g->exec);
  free(g);
}

static void graph_counters(gp_backend *be, uint64_t *unsafe, uint64_t *frees, const char **why) {
  const gp_cuda_impl *im = gp_cuda_of(be);
  *unsafe = im->unsafe;
  *frees = im->frees;
  *why = im->why ? im->why : "";
}

// The cuBLAS workspace, of the size the cuBLAS guide names for cublasSetWorkspace (32 MiB on
// Hopper and later, 4 MiB before), so the algorithms it picks are those of its default pool;
// set on the handle (after cublasSetStream, which resets it), so a recorded GEMM allocates
// nothing. Set whether graphs are used or not: both runs pick the same algorithms.
gp_status gp_cuda_graph_install(gp_backend *be) {
  gp_cuda_impl *im = gp_cuda_of(be);
  int major = 0;
  GP_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, be->device));
  size_t bytes = (size_t)(major >= 9 ? 32 : 4) << 20;
  GP_TRY(gp_cuda_dev_alloc(be, bytes, &im->blas_ws));
  GP_CUBLAS_TRY(cublasSetWorkspace(im->blas, im->blas_ws, bytes));
  be->graph_begin = graph_begin;
  be->graph_end = graph_end;
  be->graph_launch = graph_launch;
  be->graph_destroy = graph_destroy;
  be->graph_counters = graph_counters;
  return GP_OK;
}

void gp_cuda_graph_release(gp_backend *be) {
  gp_cuda_impl *im = gp_cuda_of(be);
  if (im->recording) { // an error left it open
    cudaGraph_t g = NULL;
    (void)cudaStreamEndCapture(im->stream, &g);
    if (g) (void)cudaGraphDestroy(g);
    im->recording = 0;
  }
  if (im->blas_ws) (void)gp_cuda_dev_free(be, im->blas_ws);
  im->blas_ws = NULL;
}
