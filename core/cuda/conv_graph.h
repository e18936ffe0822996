/* Private to dnn.cu: one convolution direction through cuDNN's graph (backend) API, the API
 * that PyTorch's cuDNN v8 path uses. The legacy API (cudnnFind...AlgorithmEx) reaches only
 * the engines behind its eight-odd algorithm numbers; the graph API's heuristics offer the
 * others too (on an H100, the xmma FMA kernels that PyTorch's fp32 forward ran and the
 * legacy search never offered). dnn.cu times both and keeps the faster.
 *
 * Tensors are bound by role, whatever the direction: X (x or dx), W (w or dw), Y (y or dy).
 * Plans are built for pointers aligned to GP_CONV_GRAPH_ALIGN bytes; dnn.cu uses the legacy
 * algorithm for a call whose pointers are not. */
#ifndef GP_CUDA_CONV_GRAPH_H
#define GP_CUDA_CONV_GRAPH_H

#include <cudnn.h>

#include "core/backend.h"

#define GP_CONV_GRAPH_ALIGN 16
#define GP_CONV_GRAPH_MAX_KNOBS CUDNN_KNOB_TYPE_COUNTS

enum { GP_CONV_FWD, GP_CONV_DATA, GP_CONV_FILTER };

/* An engine and its knob settings: what a search found, rebuilt on another handle (another
 * stage on the device) without searching again. */
typedef struct gp_conv_engine {
  int64_t global_index;
  int n_knobs;
  int64_t knob_type[GP_CONV_GRAPH_MAX_KNOBS], knob_value[GP_CONV_GRAPH_MAX_KNOBS];
  size_t workspace;
} gp_conv_engine;

/* The operation graph of one direction of one shape, and once chosen, its execution plan. */
typedef struct gp_conv_graph gp_conv_graph;

/* What a search may choose: deterministic engines only unless `nondeterministic`; fp32
 * without tensor cores (TF32) or down-conversion; bf16 without FFT or Winograd transforms
 * (the products of the bf16 operands themselves, as the CPU emulation computes). */
typedef struct gp_conv_graph_want {
  int bf16, nondeterministic;
  float beta;         /* 0, or 1 to accumulate into the output (fp32 backward filter) */
  size_t workspace;   /* the most an engine may use */
  int max_candidates; /* engines timed, in the heuristics' order */
  int log;            /* print each candidate on stderr (GP_CUDNN_LOG) */
} gp_conv_graph_want;

gp_status gp_conv_graph_make(cudnnHandle_t h, const gp_conv2d_desc *d, int dir,
                             const gp_conv_graph_want *want, gp_conv_graph **out);
/* Times the acceptable engines on the given buffers (ptrs: X, W, Y; ws: at least
 * want->workspace bytes) on stream s, and keeps the fastest as the graph's plan. *found is
 * 0 when none finalized and ran; then *ms is unset. The output tensor is overwritten. */
gp_status gp_conv_graph_search(cudnnHandle_t h, cudaStream_t s, gp_conv_graph *g,
                               void *const ptrs[3], void *ws, int *found, gp_conv_engine *best,
                               float *ms, int *tried);
/* Builds the plan of engine e (from a search on any handle of the device). */
gp_status gp_conv_graph_use(cudnnHandle_t h, gp_conv_graph *g, const gp_conv_engine *e);
/* Runs the plan (ws: the engine's workspace bytes, may be NULL when 0). */
gp_status gp_conv_graph_run(cudnnHandle_t h, gp_conv_graph *g, void *const ptrs[3], void *ws);
/* The plan's workspace bytes (0 without a plan). */
size_t gp_conv_graph_workspace(const gp_conv_graph *g);
/* Whether the pointers are aligned as the plans assume. */
int gp_conv_graph_aligned(const void *const ptrs[3]);
/* GP_CUDNN_GRAPH=0 turns the graph API off (legacy algorithms only). */
int gp_conv_graph_enabled(void);
void gp_conv_graph_free(gp_conv_graph *g);

#endif
