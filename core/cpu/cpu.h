/* Private to the CPU backend: the operation functions that core/cpu/backend.c puts in the
 * table, one group per file (gemm_conv.c, pool.c, norm.c, rmsnorm.c, eltwise.c, seq.c, loss.c,
 * optim.c; bf16.c for GP_PREC_BF16). */
#ifndef GP_CPU_H
#define GP_CPU_H

#include "core/backend.h"

/* backend.c */
/* The state behind a CPU instance's impl. */
typedef struct gp_cpu_bf16 gp_cpu_bf16;
typedef struct gp_cpu_team gp_cpu_team;
typedef struct gp_cpu_impl {
  void *scratch;
  size_t scratch_bytes;
  gp_cpu_bf16 *bf16; /* bf16.c's operand buffers, NULL until the first bf16 op */
  gp_cpu_team *team; /* team.c's helper threads, NULL until the first parallel call */
} gp_cpu_impl;
/* Frees the bf16 buffers (from destroy). */
void gp_cpu_bf16_release(gp_backend *be);

/* The table's GEMM: split over the instance's threads (along m or n, never k, so the result
 * does not depend on the thread count) when it is large enough. */
gp_status gp_cpu_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc);
/* The same on the calling thread alone, for worker `worker` of a parallel call (its bf16
 * operand buffers). */
gp_status gp_cpu_gemm_serial(gp_backend *be, int worker, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                             const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* The instance's one scratch buffer, grown to `bytes`, for the op under way: it is the op's
 * own, sized by gp_cpu_workers before the op's parallel call and shared by its tasks, so asking
 * for it from inside a task (a nested op would replace or overrun the outer op's) is refused. */
gp_status gp_cpu_scratch(gp_backend *be, size_t bytes, void **out);

/* team.c: the instance's threads. gp_cpu_parallel runs fn over [0, n) split into contiguous
 * shares, one per worker (the caller is worker 0), and each share into up to gp_cpu_pieces()
 * contiguous pieces [begin, end), fixed by n and be->threads alone. Each worker runs the
 * pieces of its own share, then any piece nobody has started, so `worker` is the index of the
 * thread running the piece (for its buffers), not of the share. It returns when all are done,
 * with the error of the lowest failing piece. Called from inside fn it runs inline on the
 * same worker. */
typedef gp_status (*gp_cpu_task)(void *ctx, int64_t begin, int64_t end, int worker);
gp_status gp_cpu_parallel(gp_backend *be, int64_t n, gp_cpu_task fn, void *ctx);
/* The most pieces a share is cut into: GP_CPU_PIECES (1 to 64) or 4. */
int gp_cpu_pieces(void);
/* The most parts worth asking a call to split into: be->threads x gp_cpu_pieces(). */
int64_t gp_cpu_max_parts(const gp_backend *be);
/* The same as gp_cpu_parallel over [0, n) in at most gp_cpu_max_parts parts of at least
 * `grain` items each (for element-wise loops, whose items are too small to be tasks one by
 * one). */
gp_status gp_cpu_parallel_for(gp_backend *be, int64_t n, int64_t grain, gp_cpu_task fn, void *ctx);
/* Items per part of an element-wise loop over floats: below 2 of them it runs on the caller.
 * 8192 floats (32 KiB) take a few microseconds, against about one to hand a part to a helper
 * that is spinning between the ops of a stage. At 1 << 15 a 4-sample micro-batch's ReLU and
 * batch norm ran on one thread while the others waited: balanced-cnn at M = 32 on 2 threads
 * went from 0.85x to 0.93x of M = 1 with this grain (2-core Sapphire Rapids VM). */
#define GP_CPU_GRAIN ((int64_t)1 << 13)
/* Rows of `cols` floats per part of a loop over rows: about GP_CPU_GRAIN floats, at least one. */
static inline int64_t gp_cpu_row_grain(int64_t cols) {
  return cols >= GP_CPU_GRAIN ? 1 : GP_CPU_GRAIN / (cols > 0 ? cols : 1);
}
/* Workers a call over n items would use (1 inside a task). */
int gp_cpu_workers(const gp_backend *be, int64_t n);
/* The calling thread's worker index inside a task, 0 outside. */
int gp_cpu_worker_index(void);
/* 1 inside a task of a parallel call, else 0. */
int gp_cpu_in_task(void);
/* Stops and joins the helpers (from destroy). */
void gp_cpu_team_release(gp_backend *be);

/* gemm_conv.c */
gp_status gp_cpu_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                const float *w, const float *bias, float *y);
gp_status gp_cpu_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx);
gp_status gp_cpu_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, float *dbias);
/* The same with the result left in f32 (bf16.c rounds it in bf16 mode; their GEMMs follow
 * be->precision all the same). */
gp_status gp_cpu_conv2d_forward_unrounded(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                          const float *w, const float *bias, float *y);
gp_status gp_cpu_conv2d_backward_data_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                const float *dy, const float *w, float *dx);
gp_status gp_cpu_conv2d_backward_filter_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                  const float *x, const float *dy, float *dw,
                                                  float *dbias);

/* direct_conv.c: stride-1 convolution without a column matrix (fp32; AVX2 + FMA, and
 * AVX-512F tiles in direct_conv512.c where the CPU has them). _ok says whether it runs d on be
 * (the CPU has the instructions, the shape suits it), for the filter gradient when `filter`,
 * else for a forward; _transposed is the forward convolution t of backward-data, packed from
 * the original filters w. Their descriptors were checked by gemm_conv.c's entry points, the
 * only callers (a transposed one is made there from a checked one), so they do not check again. */
int gp_cpu_direct_conv_ok(const gp_backend *be, const gp_conv2d_desc *d, int filter);
/* For tests and benchmarks: the widest tiles to use, 0 sending every convolution to
 * gemm_conv.c; returns the level now on, at most what the CPU has (0 without AVX2 and FMA). */
enum { GP_CPU_DIRECT_AVX2 = 1, GP_CPU_DIRECT_AVX512 = 2 };
int gp_cpu_direct_conv_set(int level);
gp_status gp_cpu_direct_conv_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                     const float *w, const float *bias, float *y);
gp_status gp_cpu_direct_conv_transposed(gp_backend *be, const gp_conv2d_desc *t, const float *dy,
                                        const float *w, float *dx);
/* dw += the filter gradient (dbias is the caller's). */
gp_status gp_cpu_direct_conv_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                    const float *dy, float *dw);

/* bf16.c: bfloat16 (GP_PREC_BF16). Rounding f32 to bf16 is to nearest, ties to even; a NaN
 * stays a NaN (quieted), overflow gives Inf, subnormals round like any other value. */
uint16_t gp_bf16_from_f32(float f);
float gp_bf16_to_f32(uint16_t h);
float gp_bf16_round(float f); /* gp_bf16_to_f32(gp_bf16_from_f32(f)) */
void gp_bf16_round_array(int64_t n, const float *x, float *y); /* y may be x */
/* be->round_bf16: x rounded in place, over the instance's threads (BF16_MIXED activations). */
gp_status gp_cpu_round_bf16(gp_backend *be, int64_t n, float *x);
/* be->pack_bf16, be->unpack_bf16: the high halves of values on the bf16 grid, and back. */
gp_status gp_cpu_pack_bf16(gp_backend *be, int64_t n, const float *x, uint16_t *y);
gp_status gp_cpu_unpack_bf16(gp_backend *be, int64_t n, const uint16_t *x, float *y);
/* Called first by gp_cpu_gemm in bf16 mode: replaces *a and *b (with their leading
 * dimensions) by packed copies rounded to bf16, kept in buffers of the instance (not its
 * scratch, which may hold the operands). Leaves them alone when the GEMM reads nothing or will
 * refuse. Worker w of a parallel call uses its own buffers. They are freed with the
 * instance (gp_cpu_bf16_release). */
gp_status gp_cpu_bf16_operands(gp_backend *be, int worker, int trans_a, int trans_b, int64_t m,
                               int64_t n, int64_t k, const float **a, int64_t *lda, const float **b,
                               int64_t *ldb);
/* Makes the buffers' table (gp_cpu_parallel calls it before starting bf16 workers). */
gp_status gp_cpu_bf16_prepare(gp_backend *be);
/* The convolutions in bf16 mode: operands rounded (by the GEMMs), f32 accumulation, the
 * result rounded to bf16, then the bias added (forward) or the result added to dw (filter) in
 * f32; dbias is summed from the f32 dy as in fp32 mode. */
gp_status gp_cpu_bf16_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                     const float *w, const float *bias, float *y);
gp_status gp_cpu_bf16_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                           const float *w, float *dx);
gp_status gp_cpu_bf16_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d,
                                             const float *x, const float *dy, float *dw,
                                             float *dbias);

/* pool.c */
gp_status gp_cpu_pool2d_forward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                                const float *x, float *y, int32_t *argmax);
gp_status gp_cpu_pool2d_backward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                                 const float *dy, const int32_t *argmax, float *dx);

/* norm.c */
/* Sum of n floats with 8 partial sums (vectorizable; order differs from a plain loop). */
float gp_cpu_rowsum(const float *p, int64_t n);
gp_status gp_cpu_bias_add(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *bias,
                          float *y);
gp_status gp_cpu_bias_grad(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                           float *dbias);
gp_status gp_cpu_batchnorm_forward_train(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                         float eps, const float *x, const float *gamma,
                                         const float *beta, float *y, float *mean, float *invstd);
gp_status gp_cpu_batchnorm_forward_eval(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                        float eps, const float *x, const float *gamma,
                                        const float *beta, const float *run_mean,
                                        const float *run_var, float *y);
gp_status gp_cpu_batchnorm_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                    const float *x, const float *dy, const float *gamma,
                                    const float *mean, const float *invstd, float *dx,
                                    float *dgamma, float *dbeta);
gp_status gp_cpu_batchnorm_stats_accumulate(gp_backend *be, int64_t c, int64_t before,
                                            int64_t count, float eps, const float *mean,
                                            const float *invstd, float *acc);
gp_status gp_cpu_batchnorm_stats_apply(gp_backend *be, int64_t c, float momentum, int64_t n,
                                       float *acc, float *run_mean, float *run_var);
gp_status gp_cpu_layernorm_forward(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                   const float *x, const float *gamma, const float *beta, float *y,
                                   float *mean, float *rstd);
gp_status gp_cpu_layernorm_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                    const float *dy, const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma, float *dbeta);

/* shapes.c: permute, group norm, the element-wise losses */
void gp_cpu_install_shapes(gp_backend *be);
/* resize.c */
gp_status gp_cpu_resize2d_forward(gp_backend *be, const gp_resize2d_desc *d, const float *x,
                                  float *y);
gp_status gp_cpu_resize2d_backward(gp_backend *be, const gp_resize2d_desc *d, const float *dy,
                                   float *dx);

/* rmsnorm.c */
gp_status gp_cpu_rmsnorm_forward(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                 const float *x, const float *w, float *y, float *rstd);
gp_status gp_cpu_rmsnorm_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                  const float *dy, const float *w, const float *rstd, float *dx,
                                  float *dw);

/* eltwise.c */
gp_status gp_cpu_act_forward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                             float *y);
gp_status gp_cpu_act_backward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                              const float *y, const float *dy, float *dx);
gp_status gp_cpu_dropout_forward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                 const float *x, float *y);
gp_status gp_cpu_dropout_backward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                  const float *dy, float *dx);
gp_status gp_cpu_axpby(gp_backend *be, int64_t n, float a, const float *x, float b, float *y);
gp_status gp_cpu_mul(gp_backend *be, int64_t n, const float *a, const float *b, float *y);
/* 0: SiLU (and bce_with_logits) keeps to its 4-lane loops even where the CPU has AVX2 (tests
 * compare the two; the bits must not differ); 1 (the default): the 8-lane ones where it can. */
void gp_cpu_silu_avx2_set(int on);
/* bce_with_logits' loss (grad 0) or gradient times scale (grad 1) over the 8-float blocks of
 * [0, n) on AVX2, the bits of shapes.c's 4-lane loops; returns where the blocks end (0 without
 * AVX2 or while gp_cpu_silu_avx2_set(0) holds). */
int64_t gp_cpu_bce_wide(int64_t n, const float *p, const float *t, float scale, int grad,
                        float *out);
/* x = e^x (vmath.h's exp, bit for bit; on 8 lanes where the CPU has AVX2 and silu's AVX2 loops
 * are allowed), on the caller's thread. */
void gp_cpu_exp_inplace(int64_t n, float *x);
gp_status gp_cpu_copy2d(gp_backend *be, int64_t rows, int64_t cols, const float *src,
                        int64_t src_ld, float *dst, int64_t dst_ld);
/* kv.c: decoding with a cache */
gp_status gp_cpu_gemm_strided_batched(gp_backend *be, int trans_a, int trans_b, int64_t m,
                                      int64_t n, int64_t k, float alpha, const float *a,
                                      int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                                      int64_t stride_b, float beta, float *c, int64_t ldc,
                                      int64_t stride_c, int64_t batch);
gp_status gp_cpu_gather_rows(gp_backend *be, int64_t rows, int64_t cols, const int32_t *idx,
                             const void *src, int64_t src_ld, void *dst, int64_t dst_ld);

/* loss.c */
gp_status gp_cpu_softmax_xent_forward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                      const float *logits, const int32_t *labels, float *probs,
                                      float *loss);
gp_status gp_cpu_softmax_xent_backward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                       float scale, const float *probs, const int32_t *labels,
                                       float *dlogits);
gp_status gp_cpu_sum(gp_backend *be, int64_t n, const float *x, double *host_out);
gp_status gp_cpu_softmax_xent_axis_forward(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                           float smoothing, const float *logits,
                                           const int32_t *labels, const int32_t *raw_labels,
                                           float *probs, float *inv, float *loss,
                                           int64_t *host_correct);
gp_status gp_cpu_softmax_xent_axis_backward(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                            float smoothing, float scale, const float *probs,
                                            const float *inv, const int32_t *labels,
                                            float *dlogits);
gp_status gp_cpu_count_correct(gp_backend *be, int64_t n, int64_t k, const float *logits,
                               const int32_t *labels, int64_t *host_out);
gp_status gp_cpu_sumsq(gp_backend *be, int64_t n, const float *x, double *host_out);

/* seq.c */
gp_status gp_cpu_embedding_forward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                   const int32_t *ids, const float *table, float scale, float *y);
gp_status gp_cpu_embedding_backward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                    const int32_t *ids, const float *dy, float scale, int64_t skip,
                                    float *dtable);
gp_status gp_cpu_attn_softmax_forward(gp_backend *be, const gp_attn_softmax_desc *d,
                                      const float *scores, float *probs);
gp_status gp_cpu_rope(gp_backend *be, int64_t rows, int64_t heads, int64_t dh, int64_t ld,
                      double theta, const int32_t *pos, int inverse, float *x);
gp_status gp_cpu_softmax_backward(gp_backend *be, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx);

/* optim.c */
gp_status gp_cpu_sgd_update(gp_backend *be, int64_t n, const gp_sgd_hp *hp, float *w,
                            const float *g, float *buf);
gp_status gp_cpu_adamw_update(gp_backend *be, int64_t n, const gp_adamw_hp *hp, float *w,
                              const float *g, float *m, float *v);
gp_status gp_cpu_rmsprop_update(gp_backend *be, int64_t n, const gp_rmsprop_hp *hp, float *w,
                                const float *g, float *sq, float *buf);

#endif
