/* Private to the CPU backend: the operation functions that core/cpu/backend.c puts in the
 * table, one group per file (gemm_conv.c, pool.c, norm.c, eltwise.c, seq.c, loss.c, optim.c). */
#ifndef GP_CPU_H
#define GP_CPU_H

#include "core/backend.h"

/* backend.c */
gp_status gp_cpu_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc);
gp_status gp_cpu_scratch(gp_backend *be, size_t bytes, void **out);

/* gemm_conv.c */
gp_status gp_cpu_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                const float *w, const float *bias, float *y);
gp_status gp_cpu_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx);
gp_status gp_cpu_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, float *dbias);

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
gp_status gp_cpu_batchnorm_stats_accumulate(gp_backend *be, int64_t c, int64_t count, float eps,
                                            const float *mean, const float *invstd, float *acc);
gp_status gp_cpu_batchnorm_stats_apply(gp_backend *be, int64_t c, float momentum, int n_acc,
                                       float *acc, float *run_mean, float *run_var);
gp_status gp_cpu_layernorm_forward(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                   const float *x, const float *gamma, const float *beta, float *y,
                                   float *mean, float *rstd);
gp_status gp_cpu_layernorm_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                    const float *dy, const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma, float *dbeta);

/* eltwise.c */
gp_status gp_cpu_act_forward(gp_backend *be, gp_act act, int64_t n, const float *x, float *y);
gp_status gp_cpu_act_backward(gp_backend *be, gp_act act, int64_t n, const float *x, const float *y,
                              const float *dy, float *dx);
gp_status gp_cpu_dropout_forward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                 const float *x, float *y);
gp_status gp_cpu_dropout_backward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                  const float *dy, float *dx);
gp_status gp_cpu_axpby(gp_backend *be, int64_t n, float a, const float *x, float b, float *y);
gp_status gp_cpu_copy2d(gp_backend *be, int64_t rows, int64_t cols, const float *src,
                        int64_t src_ld, float *dst, int64_t dst_ld);

/* loss.c */
gp_status gp_cpu_softmax_xent_forward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                      const float *logits, const int32_t *labels, float *probs,
                                      float *loss);
gp_status gp_cpu_softmax_xent_backward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                       float scale, const float *probs, const int32_t *labels,
                                       float *dlogits);
gp_status gp_cpu_sum(gp_backend *be, int64_t n, const float *x, double *host_out);
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
