/* The backend interface: memory, ordering and the operations layers are written against.
 * One table per device kind; an instance per stage worker (it owns its scratch space).
 * All float data is f32, activations NCHW (or [rows, cols]), pointers are device pointers.
 * Conventions (as in llm.c): parameter gradients accumulate (+=), input gradients are
 * written (=). Sizes are int64_t; an op refuses (GP_ERR_RUNTIME) what it cannot do. */
#ifndef GP_BACKEND_H
#define GP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_backend gp_backend;
typedef struct gp_event gp_event; /* a point in an instance's queued work (backend-private) */
typedef struct gp_graph gp_graph; /* a recorded op sequence, replayable (backend-private) */

/* The arithmetic of GEMMs and convolutions. BF16: their operands are rounded to bfloat16
 * (to nearest, ties to even; a NaN stays NaN, overflow gives Inf) and the (exact) products
 * accumulate in f32. A GEMM's C = alpha AB + beta C stays f32. A convolution's result is
 * rounded to bfloat16 (cuDNN writes bf16 results from bf16 inputs), then the bias is added
 * (forward) or it is added to dw (filter) in f32; dbias sums the f32 dy. Everything else
 * (inputs and outputs in memory, master weights, norms, losses, optimizer state) stays f32.
 * The CPU backend emulates this exactly (core/cpu/bf16.c); docs/cuda.md has the CUDA side.
 * BF16_MIXED: the same GEMMs and convolutions, and the executor (core/exec/pass.c) rounds
 * every activation and activation gradient between layers to bf16 with round_bf16 (values
 * kept in f32 storage), as bf16 storage would; norms' statistics, losses, master weights,
 * their gradients and optimizer state stay f32. A backend checks != GP_PREC_FP32 for its
 * bf16 GEMMs and convolutions. */
typedef enum gp_precision { GP_PREC_FP32, GP_PREC_BF16, GP_PREC_BF16_MIXED } gp_precision;

/* An instance's queues: its ops run in order on COMPUTE; copy_peer may also use IN (copies
 * of other instances' tensors into this one's memory: activations) and OUT (copies from this
 * instance's memory to others': gradients), which overlap compute. Order between queues and
 * instances goes through events. On the CPU every op has finished when it returns. */
typedef enum gp_queue { GP_Q_COMPUTE, GP_Q_IN, GP_Q_OUT } gp_queue;

typedef struct gp_conv2d_desc {
  int64_t n, c, h, w;             /* input */
  int64_t k, oh, ow;              /* output channels and spatial size */
  int64_t kh, kw, sh, sw, ph, pw; /* kernel, stride, padding (top/left = bottom/right) */
  int64_t dh, dw, groups;         /* dilation, groups (groups == c == k: depthwise) */
} gp_conv2d_desc;

/* 2-D resizing of n planes h x w to oh x ow as PyTorch's F.interpolate (mode 'nearest' or
 * 'bilinear'): src = floor(dst * scale) (nearest), src = scale (dst + 0.5) - 0.5 clamped at 0
 * (bilinear), src = dst (in - 1) / (out - 1) (bilinear, align_corners), with scale = 1 /
 * scale_factor where the user gave one (> 0 here) and in / out otherwise, all in f32. */
typedef struct gp_resize2d_desc {
  int64_t n, h, w, oh, ow;
  int bilinear, align_corners;
  double scale_h, scale_w; /* scale_factor, or 0: none given */
} gp_resize2d_desc;

typedef enum gp_pool { GP_POOL_MAX, GP_POOL_AVG } gp_pool;

typedef struct gp_pool2d_desc {
  int64_t n, c, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
  /* avg only: 0 = padded cells are not counted in the divisor (count_include_pad=False) */
  int count_pad;
} gp_pool2d_desc;

/* GELU is the exact erf form (PyTorch's default); GELU_TANH its tanh approximation. */
typedef enum gp_activation {
  GP_ACTIVATION_RELU,
  GP_ACTIVATION_GELU,
  GP_ACTIVATION_TANH,
  GP_ACTIVATION_SIGMOID,
  GP_ACTIVATION_GELU_TANH,
  GP_ACTIVATION_SILU, /* x sigmoid(x) (SwiGLU's gate); its backward reads x */
  GP_ACTIVATION_COUNT
} gp_activation;

/* The element-wise losses of f32 targets (layers/eltloss.c): (p - t)^2, |p - t|, and binary
 * cross-entropy of logits p against probabilities t (PyTorch's BCEWithLogitsLoss). */
typedef enum gp_eltloss { GP_ELTLOSS_MSE, GP_ELTLOSS_L1, GP_ELTLOSS_BCE_LOGITS } gp_eltloss;

/* The softmax of attention scores [batch, heads, tq, tk] over the last dim, with masked keys
 * left out: key j of query i is masked when causal and j > i, or when the key-padding mask of
 * its sample (keep_f32 or keep_i32, [batch, tk], at most one set) is 0 there (1 = attend; any
 * other value is GP_ERR_DATA), or, with segment ids (seg_q [batch, tq] and seg_k [batch, tk],
 * both set or neither; 0 = padding, 1, 2, ... = which packed sentence; negative is
 * GP_ERR_DATA), when seg_k[j] is 0 or differs from seg_q[i]. Every condition given applies.
 * Masked entries are 0; a row with every key masked is all 0. */
typedef struct gp_attn_softmax_desc {
  int64_t batch, heads, tq, tk;
  int causal;
  const float *keep_f32;
  const int32_t *keep_i32;
  const int32_t *seg_q, *seg_k;
} gp_attn_softmax_desc;

/* Fused scaled-dot-product attention (flash attention: no [tq, tk] matrix in memory) of
 * `batch` samples: query rows [batch * tq] with `heads` heads of dh values side by side (row
 * stride ldq), key and value rows [batch * tk] with kv_heads heads (row stride ldkv; query head
 * h reads key/value head h / (heads / kv_heads)). Scores are scaled by `scale` and masked as
 * gp_attn_softmax_desc says (causal: key j > query i; a key-padding mask [batch, tk], f32 or
 * i32, at most one). training: a backward will follow, so its plan must exist too. */
typedef struct gp_sdpa_desc {
  int64_t batch, heads, kv_heads, tq, tk, dh, ldq, ldkv;
  float scale;
  int causal, training;
  const float *keep_f32;
  const int32_t *keep_i32;
} gp_sdpa_desc;

typedef struct gp_sgd_hp {
  float lr, momentum, weight_decay;
  int nesterov;
} gp_sgd_hp;
typedef struct gp_adamw_hp {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t t; /* 1-based step count, for bias correction */
} gp_adamw_hp;
typedef struct gp_rmsprop_hp {
  float lr, alpha, eps, momentum, weight_decay;
} gp_rmsprop_hp;

struct gp_backend {
  const char *name;       /* "cpu", "cuda" */
  int device;             /* -1 cpu, else CUDA ordinal */
  int threads;            /* cpu: threads this instance splits its ops over (its own) */
  gp_precision precision; /* GEMMs and convolutions; set by the creator, FP32 by default */
  int nondeterministic;   /* may use algorithms whose summation order varies from run to run
                             (cuDNN's atomics-based ones) where faster; 0 by default */
  /* Memory: bytes this instance's alloc has handed out and not freed (scratch included,
   * host_alloc not), their high-water mark, and a cap (0: none; past it alloc fails with
   * GP_ERR_NOMEM, as a device of that size would). */
  size_t mem_used, mem_peak, mem_limit;
  void *impl; /* backend-private state */

  /* ---- memory and ordering ---- */
  gp_status (*alloc)(gp_backend *be, size_t bytes, void **out); /* 64-byte aligned */
  void (*free)(gp_backend *be, void *p);                        /* NULL ok */
  gp_status (*zero)(gp_backend *be, void *dst, size_t bytes);
  gp_status (*copy)(gp_backend *be, void *dst, const void *src, size_t bytes); /* same device */
  gp_status (*to_host)(gp_backend *be, void *host, const void *src, size_t bytes);
  gp_status (*from_host)(gp_backend *be, void *dst, const void *host, size_t bytes);
  gp_status (*sync)(gp_backend *be);
  /* Scratch space owned by the instance, valid until the next call; grows only (so after the
   * first step it never allocates). Layers use it for im2col and the like. */
  gp_status (*scratch)(gp_backend *be, size_t bytes, void **out);
  void (*destroy)(gp_backend *be);

  /* ---- ordering between instances (pipeline stages) ---- */
  gp_status (*event_create)(gp_backend *be, gp_event **out);
  void (*event_destroy)(gp_backend *be, gp_event *ev); /* NULL ok */
  /* ev marks the work queued on q so far (a later record replaces the mark). */
  gp_status (*event_record)(gp_backend *be, gp_queue q, gp_event *ev);
  /* Work queued on q after this waits for ev's mark (ev of any instance of this kind, any
   * device); the host does not wait. */
  gp_status (*event_wait)(gp_backend *be, gp_queue q, gp_event *ev);
  /* The host waits for ev's mark. */
  gp_status (*event_sync)(gp_backend *be, gp_event *ev);
  /* Timing: a timer is an event (event_record, event_sync, event_destroy) whose mark also
   * keeps when its queue reached it; event_elapsed gives the seconds from one timer's mark to
   * another's, both of this instance and both passed (after event_sync or sync). On the CPU a
   * mark is the moment of its record, when every op queued before it has finished. */
  gp_status (*timer_create)(gp_backend *be, gp_event **out);
  gp_status (*event_elapsed)(gp_backend *be, gp_event *from, gp_event *to, double *seconds);
  /* bytes from src (memory of device src_dev) to dst (device dst_dev), both of this kind,
   * queued on q of this instance; peer-to-peer where the devices allow, else staged. */
  gp_status (*copy_peer)(gp_backend *be, gp_queue q, void *dst, int dst_dev, const void *src,
                         int src_dev, size_t bytes);
  /* Page-locked host memory, for from_host_async. */
  gp_status (*host_alloc)(gp_backend *be, size_t bytes, void **out);
  void (*host_free)(gp_backend *be, void *p); /* NULL ok */
  /* from_host queued on COMPUTE without the host waiting: host (from host_alloc) must stay
   * unchanged until the queue has passed this point (an event recorded after it). */
  gp_status (*from_host_async)(gp_backend *be, void *dst, const void *host, size_t bytes);
  /* Copies between this instance's memory and page-locked host memory (host_alloc's) queued
   * on q (IN or OUT, overlapping compute) without the host waiting: neither side may change
   * until q has passed this point (an event recorded on q after it). On the CPU they copy at
   * once. The hand-offs between processes stage GPU tensors through these. */
  gp_status (*to_host_on)(gp_backend *be, gp_queue q, void *host, const void *src, size_t bytes);
  gp_status (*from_host_on)(gp_backend *be, gp_queue q, void *dst, const void *host, size_t bytes);
  /* Whether ev's mark has passed, without waiting (*passed 1 or 0; always 1 on the CPU). */
  gp_status (*event_query)(gp_backend *be, gp_event *ev, int *passed);

  /* ---- dense algebra (row-major): C = alpha * op(A) op(B) + beta * C ---- */
  gp_status (*gemm)(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
  /* batch GEMMs as gemm's, the i-th on a + i stride_a, b + i stride_b, c + i stride_c (a
   * stride of 0 shares the operand); each gives the bits gemm gives it alone (decoding's
   * per-head products: layers/attention_cached.c) */
  gp_status (*gemm_strided_batched)(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
                                    int64_t k, float alpha, const float *a, int64_t lda,
                                    int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                                    float beta, float *c, int64_t ldc, int64_t stride_c,
                                    int64_t batch);

  /* ---- convolution; w is [k, c/groups, kh, kw]; bias [k] or NULL ---- */
  gp_status (*conv2d_forward)(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                              const float *w, const float *bias, float *y);
  gp_status (*conv2d_backward_data)(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                    const float *w, float *dx); /* dx = */
  gp_status (*conv2d_backward_filter)(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                      const float *dy, float *dw,
                                      float *dbias); /* +=, dbias NULL ok */

  /* ---- pooling; argmax (max only) holds, per output, the index into the input plane ---- */
  gp_status (*pool2d_forward)(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d, const float *x,
                              float *y, int32_t *argmax);
  gp_status (*pool2d_backward)(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                               const float *dy, const int32_t *argmax, float *dx); /* dx = */

  /* ---- resizing (upsample); backward sums each input's share of dy, dx = ---- */
  gp_status (*resize2d_forward)(gp_backend *be, const gp_resize2d_desc *d, const float *x,
                                float *y);
  gp_status (*resize2d_backward)(gp_backend *be, const gp_resize2d_desc *d, const float *dy,
                                 float *dx);

  /* ---- per-channel bias over [n, c, inner] ---- */
  gp_status (*bias_add)(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *bias,
                        float *y); /* y += bias */
  gp_status (*bias_grad)(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                         float *dbias); /* dbias += */

  /* ---- batch norm over [n, c, inner] (statistics per channel over n*inner) ---- */
  gp_status (*batchnorm_forward_train)(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                       float eps, const float *x, const float *gamma,
                                       const float *beta, float *y, float *mean, float *invstd);
  gp_status (*batchnorm_forward_eval)(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                      float eps, const float *x, const float *gamma,
                                      const float *beta, const float *run_mean,
                                      const float *run_var, float *y);
  gp_status (*batchnorm_backward)(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                  const float *x, const float *dy, const float *gamma,
                                  const float *mean, const float *invstd, float *dx, float *dgamma,
                                  float *dbeta); /* dx = (NULL: skip), d* += */
  /* Pools a micro-batch's statistics (count values per channel; mean, and the biased variance
   * from invstd and eps) into acc, which holds those of the `before` values already pooled:
   * acc[0..c) their mean, acc[c..2c) their sum of squared deviations (Chan et al.'s update).
   * So the pooled statistics are the whole mini-batch's, however it was split. */
  gp_status (*batchnorm_stats_accumulate)(gp_backend *be, int64_t c, int64_t before, int64_t count,
                                          float eps, const float *mean, const float *invstd,
                                          float *acc);
  /* For the n values pooled: run_mean = (1 - momentum) run_mean + momentum * mean, run_var the
   * same with the unbiased variance (squared deviations / (n - 1), as PyTorch); then acc = 0 */
  gp_status (*batchnorm_stats_apply)(gp_backend *be, int64_t c, float momentum, int64_t n,
                                     float *acc, float *run_mean, float *run_var);

  /* ---- layer norm over the last dim of [rows, cols] ---- */
  gp_status (*layernorm_forward)(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                 const float *x, const float *gamma, const float *beta, float *y,
                                 float *mean, float *rstd);
  gp_status (*layernorm_backward)(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                  const float *dy, const float *gamma, const float *mean,
                                  const float *rstd, float *dx, float *dgamma,
                                  float *dbeta); /* dx = (NULL: skip), dgamma/dbeta += */

  /* ---- RMS norm over the last dim of [rows, cols] (Llama's, in f32): y = (x rstd) w,
   * rstd = 1 / sqrt(mean(x^2) + eps) per row, kept in rstd for the backward ---- */
  gp_status (*rmsnorm_forward)(gp_backend *be, int64_t rows, int64_t cols, float eps,
                               const float *x, const float *w, float *y, float *rstd);
  gp_status (*rmsnorm_backward)(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                const float *dy, const float *w, const float *rstd, float *dx,
                                float *dw); /* dx = (NULL: skip), dw += (NULL: skip) */
  /* Group norm of x [n, c, inner] over groups of c / groups channels (torch.nn.GroupNorm):
   * y = (x - mean) rstd w[ch] + b[ch]; mean and rstd [n * groups] are kept for backward. */
  gp_status (*groupnorm_forward)(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                 int64_t groups, float eps, const float *x, const float *w,
                                 const float *b, float *y, float *mean, float *rstd);
  /* dx = (NULL: not wanted); dw += sum of dy xhat and db += sum of dy per channel (NULL: not
   * wanted). */
  gp_status (*groupnorm_backward)(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                  int64_t groups, const float *x, const float *dy, const float *w,
                                  const float *mean, const float *rstd, float *dx, float *dw,
                                  float *db);

  /* ---- fusion (core/fused.c); optional: NULL where a backend has none (the CPU: the fused
   * node then runs the ops above, the unfused layers' bits) ---- */
  /* pre = x w^T + bias (bias [n] or NULL) and z = act(pre) for x [rows, k], w [n, k], in one
   * GEMM with the bias and the activation in its epilogue (cuBLASLt), at be->precision's GEMM
   * arithmetic (bf16: operands rounded, f32 accumulation and output). ReLU only with pre == z
   * (in place: z alone is written). *taken 0: this act or shape is not one it takes (nothing
   * written). */
  gp_status (*linear_act_forward)(gp_backend *be, gp_activation act, int64_t rows, int64_t n,
                                  int64_t k, const float *x, const float *w, const float *bias,
                                  float *pre, float *z, int *taken);
  /* s = a + b (round_sum: then rounded to bf16) and y = the layer norm of s, as
   * layernorm_forward (mean, rstd kept), in one kernel */
  gp_status (*add_layernorm_forward)(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                     int round_sum, const float *a, const float *b,
                                     const float *gamma, const float *beta, float *s, float *y,
                                     float *mean, float *rstd);
  /* the same with the RMS norm of s, as rmsnorm_forward */
  gp_status (*add_rmsnorm_forward)(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                   int round_sum, const float *a, const float *b, const float *w,
                                   float *s, float *y, float *rstd);

  /* ---- element-wise ---- */
  gp_status (*act_forward)(gp_backend *be, gp_activation act, int64_t n, const float *x, float *y);
  gp_status (*act_backward)(gp_backend *be, gp_activation act, int64_t n, const float *x,
                            const float *y, const float *dy, float *dx); /* dx = */
  /* Inverted dropout with a counter-based mask: element i is kept iff
   * gp_counter_uniform(key, offset + i) >= p (core/rng.h), so recompute and every backend
   * agree, and a micro-batch (offset = its first element in the mini-batch) gets the same
   * mask as the same samples in the whole mini-batch. */
  gp_status (*dropout_forward)(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                               const float *x, float *y);
  gp_status (*dropout_backward)(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                const float *dy, float *dx);
  gp_status (*axpby)(gp_backend *be, int64_t n, float a, const float *x, float b,
                     float *y); /* y = a x + b y (b == 0: y is not read) */
  /* x[i] = x[i] rounded to bfloat16 (to nearest, ties to even; NaN kept, quieted; overflow
   * gives Inf), in place in f32 storage: BF16_MIXED's activations (core/exec/pass.c) */
  gp_status (*round_bf16)(gp_backend *be, int64_t n, float *x);
  /* BF16_MIXED's stored activations (core/exec/bfstore.c): y[i] = the high 16 bits of x[i]
   * (exact, x being on the bf16 grid as round_bf16 leaves it), and back (low half zero) */
  gp_status (*pack_bf16)(gp_backend *be, int64_t n, const float *x, uint16_t *y);
  gp_status (*unpack_bf16)(gp_backend *be, int64_t n, const uint16_t *x, float *y);
  /* y = a * b element-wise (gates); y may be a or b */
  gp_status (*mul)(gp_backend *be, int64_t n, const float *a, const float *b, float *y);
  /* 2-D strided copy: rows x cols floats; dst[r*dst_ld + j] = src[r*src_ld + j] */
  gp_status (*copy2d)(gp_backend *be, int64_t rows, int64_t cols, const float *src, int64_t src_ld,
                      float *dst, int64_t dst_ld);
  /* Row gather of 4-byte values (f32 or i32, moved as bits): dst[r * dst_ld + j] =
   * src[idx[r] * src_ld + j] for r < rows, j < cols; idx (int32, this backend's memory) NULL:
   * idx[r] = r. The caller keeps idx in range (a device cannot report it without waiting);
   * dst must not overlap src. Decoding's caches (core/eval/kvdec.c) move rows with it. */
  gp_status (*gather_rows)(gp_backend *be, int64_t rows, int64_t cols, const int32_t *idx,
                           const void *src, int64_t src_ld, void *dst, int64_t dst_ld);
  /* y = x with its axes permuted (torch.permute(...).contiguous()): x is dims[0..ndim), ndim
   * at most GP_MAX_DIMS + 1 (the batch included); y's axis j is x's axis perm[j]. */
  gp_status (*permute)(gp_backend *be, int ndim, const int64_t *dims, const int *perm,
                       const float *x, float *y);

  /* ---- sequences: embeddings and attention ---- */
  /* y[i, :] = scale * table[ids[i], :] for i < n (table [vocab, dim]); an id outside
   * [0, vocab) is GP_ERR_DATA naming it. */
  gp_status (*embedding_forward)(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                 const int32_t *ids, const float *table, float scale, float *y);
  /* dtable[ids[i], :] += scale * dy[i, :], rows summed in the order of i (deterministic); the
   * row `skip` (a padding index; -1: none) gets nothing. */
  gp_status (*embedding_backward)(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                  const int32_t *ids, const float *dy, float scale, int64_t skip,
                                  float *dtable);
  /* probs = masked softmax of scores (see gp_attn_softmax_desc); probs may be scores. */
  gp_status (*attn_softmax_forward)(gp_backend *be, const gp_attn_softmax_desc *d,
                                    const float *scores, float *probs);
  /* Rotary position embedding in place, Hugging Face Llama's layout (rotate_half): row r of x
   * (row stride ld) holds `heads` heads of dh (even) values side by side, and in each head the
   * pair (i, i + dh/2) turns by the angle pos[r] * theta^(-2i/dh), computed in f32 as
   * transformers' LlamaRotaryEmbedding does. inverse turns back (the transpose: gradients).
   * A position outside [0, 2^24] (where f32 stops holding every integer) is GP_ERR_DATA. */
  gp_status (*rope)(gp_backend *be, int64_t rows, int64_t heads, int64_t dh, int64_t ld,
                    double theta, const int32_t *pos, int inverse, float *x);
  /* Fused attention in bf16 (cuDNN's flash attention; NULL where the backend has none): with
   * Q, K, V rounded to bf16 as the bf16 GEMMs round their operands, o [batch * tq,
   * heads * dh] = softmax(scale Q K^T, masked) V, rounded to bf16; lse [batch, heads, tq] the
   * log-sum-exp of each masked score row, for the backward. *taken 0: this shape, mask or
   * device is not one the fused path takes (nothing written; a line on stderr says why, once
   * per reason): the caller runs the plain path. A mask is taken when each sample's is some
   * 1s then 0s, at least one 1 (a right-padded row); checking it waits for the device. */
  gp_status (*sdpa_forward)(gp_backend *be, const gp_sdpa_desc *d, const float *q, const float *k,
                            const float *v, float *o, float *lse, int *taken);
  /* Its backward after a forward that was taken (same desc): dq (row stride ldq), dk and dv
   * (ldkv) are written (=), a key/value head's gradient summed over the query heads it serves,
   * and rounded to bf16; dout is rounded to bf16 first, as GEMM operands are. */
  gp_status (*sdpa_backward)(gp_backend *be, const gp_sdpa_desc *d, const float *q, const float *k,
                             const float *v, const float *o, const float *lse, const float *dout,
                             float *dq, float *dk, float *dv);
  /* dx = y * (dy - sum_j y_j dy_j) per row of [rows, cols], y a softmax output; dx may be dy. */
  gp_status (*softmax_backward)(gp_backend *be, int64_t rows, int64_t cols, const float *y,
                                const float *dy, float *dx);

  /* ---- loss ---- */
  /* logits [n, k], labels int32 [n]. probs = softmax(logits) (kept for backward);
   * loss[i] = cross-entropy of sample i against (1 - s) onehot + s / k. probs may be logits
   * (the loss keeping them over its input: gp_layer_type.saves_over_input). */
  gp_status (*softmax_xent_forward)(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                    const float *logits, const int32_t *labels, float *probs,
                                    float *loss);
  /* dlogits = scale * (probs - target); dlogits may be probs */
  gp_status (*softmax_xent_backward)(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                     float scale, const float *probs, const int32_t *labels,
                                     float *dlogits);
  /* Optional (NULL: the layer moves the classes last with permute and uses the two above):
   * the same over logits [outer, k, inner] whose classes are the middle axis (a per-pixel
   * loss over [C, H, W]), labels [outer, inner], a label of -1 ignored (loss 0, gradient 0).
   * Forward keeps, for backward, e = exp(logit - the row's max) in probs [outer, k, inner] and
   * 1 / sum(e) per row in inv [outer, inner], and counts the rows whose argmax (as
   * count_correct) equals raw_labels' into *host_correct. */
  gp_status (*softmax_xent_axis_forward)(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                         float smoothing, const float *logits,
                                         const int32_t *labels, const int32_t *raw_labels,
                                         float *probs, float *inv, float *loss,
                                         int64_t *host_correct);
  gp_status (*softmax_xent_axis_backward)(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                          float smoothing, float scale, const float *probs,
                                          const float *inv, const int32_t *labels, float *dlogits);
  /* loss[i] = f(p[i], t[i]) of the element-wise loss kind, for i < n */
  gp_status (*eltloss_forward)(gp_backend *be, gp_eltloss kind, int64_t n, const float *p,
                               const float *t, float *loss);
  /* dp[i] = scale * df/dp(p[i], t[i]) (l1: sign(p - t), 0 where equal, as PyTorch) */
  gp_status (*eltloss_backward)(gp_backend *be, gp_eltloss kind, int64_t n, float scale,
                                const float *p, const float *t, float *dp);
  /* host results: sum of x; count of rows whose argmax equals the label (a label outside
   * [0, k), as an ignored target's, never counts) */
  gp_status (*sum)(gp_backend *be, int64_t n, const float *x, double *host_out);
  gp_status (*count_correct)(gp_backend *be, int64_t n, int64_t k, const float *logits,
                             const int32_t *labels, int64_t *host_out);
  gp_status (*sumsq)(gp_backend *be, int64_t n, const float *x, double *host_out);

  /* ---- optimizer updates over flat buffers (w, grad, state) ---- */
  gp_status (*sgd_update)(gp_backend *be, int64_t n, const gp_sgd_hp *hp, float *w, const float *g,
                          float *buf);
  gp_status (*adamw_update)(gp_backend *be, int64_t n, const gp_adamw_hp *hp, float *w,
                            const float *g, float *m, float *v);
  gp_status (*rmsprop_update)(gp_backend *be, int64_t n, const gp_rmsprop_hp *hp, float *w,
                              const float *g, float *sq, float *buf);

  /* ---- recorded op sequences (CUDA graphs; NULL where the backend has none, as the CPU) ----
   * Between graph_begin and graph_end, ops queued on COMPUTE by this thread are recorded, not
   * run; graph_end makes them a graph (*out) and graph_launch queues it on COMPUTE, with the
   * pointers and arguments recorded. An op that cannot be recorded (see graph_counters) fails
   * while recording, before anything it would do; graph_end with out NULL then ends the
   * recording and discards it. */
  gp_status (*graph_begin)(gp_backend *be);
  gp_status (*graph_end)(gp_backend *be, gp_graph **out);
  gp_status (*graph_launch)(gp_backend *be, gp_graph *g);
  void (*graph_destroy)(gp_backend *be, gp_graph *g); /* NULL ok */
  /* Counters since the instance was made: *unsafe, the ops that could not have been recorded
   * (the host waited for the device, device memory was allocated or freed, or a kernel
   * argument changes with each step: dropout's key), *why the latest one's reason; *frees, the
   * frees of device memory: a graph may point at what was freed, so it is valid only while
   * this is what it was when the graph was recorded. */
  void (*graph_counters)(gp_backend *be, uint64_t *unsafe, uint64_t *frees, const char **why);
};

/* GP_ERR_RUNTIME naming what is wrong with a descriptor (sizes, groups, an output size that
 * does not follow from input, kernel, stride, padding and dilation); every backend checks
 * with these before running an op. */
gp_status gp_conv2d_desc_check(const gp_conv2d_desc *d);
gp_status gp_pool2d_desc_check(const gp_pool2d_desc *d);
gp_status gp_resize2d_desc_check(const gp_resize2d_desc *d);

/* Creates a CPU backend instance using `threads` threads (>= 1). */
gp_status gp_cpu_backend_create(int threads, gp_backend **out);
/* Frees an instance of any kind; NULL ok. */
void gp_backend_destroy(gp_backend *be);
/* Number of cores this process may use (sched_getaffinity). */
int gp_cpu_cores(void);

#ifdef __cplusplus
}
#endif

#endif
