/* Private to the dnn family: fused attention (the backend's sdpa_forward / sdpa_backward)
 * through cuDNN's graph API. sdpa_graph.cu builds the operation graphs that cuDNN's
 * flash-attention engines recognize (the ones cudnn-frontend's SDPA nodes lower to: matmul,
 * scale, masks by index generation and comparison, softmax by reductions, matmul) and their
 * execution plans; sdpa.cu caches them per shape, stages the f32 tensors through bf16 and
 * runs them. */
#ifndef GP_CUDA_SDPA_H
#define GP_CUDA_SDPA_H

#include "core/cuda/internal.h"

/* One attention shape: batch, query heads, key/value heads, query and key positions, head
 * width; causal (top-left aligned: key j > query i masked), padding (per-sample key lengths,
 * the keys from the length on masked). Q, K, V, O and their gradients are bf16 in BSHD order
 * (sample, position, head, width), packed. */
typedef struct gp_sdpa_shape {
  int64_t b, h, hk, tq, tk, d;
  int causal, padding;
  int nondeterministic; /* engines that note so may be used (the backend's flag) */
} gp_sdpa_shape;

/* The tensors a plan's variant pack binds, by unique id. SCALE and NEG_INF (and ONE) are
 * host floats passed by value; SEQ_Q, SEQ_KV are device int32 [b]; SUM is the backward's
 * f32 [b, h, tq] of row sums of dO * O (device memory the caller provides). */
enum {
  GP_SDPA_Q = 1,
  GP_SDPA_K,
  GP_SDPA_V,
  GP_SDPA_O,
  GP_SDPA_STATS,
  GP_SDPA_SCALE,
  GP_SDPA_NEG_INF,
  GP_SDPA_SEQ_Q,
  GP_SDPA_SEQ_KV,
  GP_SDPA_DO,
  GP_SDPA_DQ,
  GP_SDPA_DK,
  GP_SDPA_DV,
  GP_SDPA_SUM,
  GP_SDPA_ONE,
  GP_SDPA_DQ_ACCUM, /* nondeterministic backward: f32 [b, h, tq, d] dQ sums, zeroed first */
  GP_SDPA_UIDS = GP_SDPA_DQ_ACCUM /* the last one */
};

typedef struct gp_sdpa_graph gp_sdpa_graph;

/* The forward (bwd 0) or backward graph of s and the plan of the first engine the heuristics
 * offer that cuDNN finalizes (deterministic engines only unless s->nondeterministic; with it,
 * the backward sums dQ in an f32 buffer across key blocks, as cudnn-frontend's default). *out is
 * NULL and *why says what failed when cuDNN builds none (a static string); the status is an
 * error only for host memory. */
gp_status gp_sdpa_graph_make(cudnnHandle_t h, const gp_sdpa_shape *s, int bwd, gp_sdpa_graph **out,
                             const char **why);
/* The plan's workspace bytes. */
size_t gp_sdpa_graph_workspace(const gp_sdpa_graph *g);
/* Runs the plan: ptrs[uid] for uid 1..GP_SDPA_UIDS (those the graph does not use are not
 * read), ws its workspace. */
gp_status gp_sdpa_graph_run(cudnnHandle_t h, gp_sdpa_graph *g, void *const ptrs[GP_SDPA_UIDS + 1],
                            void *ws);
void gp_sdpa_graph_free(gp_sdpa_graph *g); /* NULL ok */

/* gp_dnn_install_sdpa, gp_dnn_sdpa_release: core/cuda/dnn_internal.h */

#endif
