/* CPU operations of sequence models: embedding lookups (a gather by int32 ids and its
 * scatter-add) and the masked softmax of attention scores (causal, key padding, segment ids
 * of packed rows) with its backward. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"

static gp_status check_ids(int64_t n, int64_t vocab, const int32_t *ids) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return GP_ERR(GP_ERR_DATA, "token id %d at position %lld is outside [0, %lld)", (int)ids[i],
                    (long long)i, (long long)vocab);
  return GP_OK;
}

gp_status gp_cpu_embedding_forward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                   const int32_t *ids, const float *table, float scale, float *y) {
  (void)be;
  GP_TRY(check_ids(n, vocab, ids)); /* before writing anything */
  for (int64_t i = 0; i < n; i++) {
    const float *restrict src = table + (int64_t)ids[i] * dim;
    float *restrict dst = y + i * dim;
    if (scale == 1.0f) {
      memcpy(dst, src, (size_t)dim * sizeof *dst);
    } else {
      for (int64_t j = 0; j < dim; j++)
        dst[j] = scale * src[j];
    }
  }
  return GP_OK;
}

gp_status gp_cpu_embedding_backward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                                    const int32_t *ids, const float *dy, float scale, int64_t skip,
                                    float *dtable) {
  (void)be;
  GP_TRY(check_ids(n, vocab, ids));
  /* Sequential in i: a row that several positions share always sums in the same order. */
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] == skip) continue;
    float *restrict dst = dtable + (int64_t)ids[i] * dim;
    const float *restrict src = dy + i * dim;
    for (int64_t j = 0; j < dim; j++)
      dst[j] += scale * src[j];
  }
  return GP_OK;
}

/* 1 = attend, 0 = masked; anything else is refused rather than guessed at (an additive
 * -inf/0 mask or an inverted boolean one would otherwise be silently wrong). */
static gp_status check_mask(const gp_attn_softmax_desc *d) {
  int64_t n = d->batch * d->tk;
  for (int64_t i = 0; i < n; i++) {
    double v = d->keep_f32 ? (double)d->keep_f32[i] : d->keep_i32 ? (double)d->keep_i32[i] : 1.0;
    if (v != 0.0 && v != 1.0)
      return GP_ERR(GP_ERR_DATA,
                    "key-padding mask value %g of sample %lld, key %lld is not 0 (pad) or 1 "
                    "(token)",
                    v, (long long)(i / d->tk), (long long)(i % d->tk));
  }
  return GP_OK;
}

/* Segment ids of packed rows: 0 = padding, 1, 2, ... = which sentence of the row. A negative
 * id is refused: it is neither, and would otherwise pair up with other negative ids. */
static gp_status check_segments(const int32_t *seg, int64_t batch, int64_t t, const char *what) {
  for (int64_t i = 0; i < batch * t; i++)
    if (seg[i] < 0)
      return GP_ERR(GP_ERR_DATA,
                    "segment id %d of sample %lld, %s %lld is negative (0 = padding, 1, 2, ... = "
                    "a sentence of the row)",
                    (int)seg[i], (long long)(i / t), what, (long long)(i % t));
  return GP_OK;
}

/* Whether key j is attended to by a query of segment qs (qs != 0 when sk is set). */
static inline int key_kept(int64_t j, const float *kf, const int32_t *ki, const int32_t *sk,
                           int32_t qs) {
  if (kf && kf[j] == 0.0f) return 0;
  if (ki && ki[j] == 0) return 0;
  return !sk || sk[j] == qs;
}

gp_status gp_cpu_attn_softmax_forward(gp_backend *be, const gp_attn_softmax_desc *d,
                                      const float *scores, float *probs) {
  (void)be;
  const int64_t tq = d->tq, tk = d->tk;
  if (!d->seg_q != !d->seg_k)
    return GP_ERR(GP_ERR_RUNTIME, "attention softmax: segment ids of the queries and of the keys "
                                  "must be given together");
  if (d->keep_f32 || d->keep_i32) GP_TRY(check_mask(d));
  if (d->seg_q) {
    GP_TRY(check_segments(d->seg_q, d->batch, tq, "query"));
    if (d->seg_k != d->seg_q) GP_TRY(check_segments(d->seg_k, d->batch, tk, "key"));
  }
  for (int64_t b = 0; b < d->batch; b++) {
    const float *kf = d->keep_f32 ? d->keep_f32 + b * tk : NULL;
    const int32_t *ki = d->keep_i32 ? d->keep_i32 + b * tk : NULL;
    const int32_t *sq = d->seg_q ? d->seg_q + b * tq : NULL;
    const int32_t *sk = d->seg_k ? d->seg_k + b * tk : NULL;
    for (int64_t h = 0; h < d->heads; h++)
      for (int64_t i = 0; i < tq; i++) {
        int64_t row = (b * d->heads + h) * tq + i;
        const float *s = scores + row * tk; /* probs may alias scores: no restrict */
        float *p = probs + row * tk;
        int64_t end = d->causal && i + 1 < tk ? i + 1 : tk; /* keys [0, end) before masks */
        int32_t qs = sq ? sq[i] : 0;
        if (sq && qs == 0) end = 0; /* a padding query of a packed row attends to nothing */
        float mx = -INFINITY;
        for (int64_t j = 0; j < end; j++)
          if (key_kept(j, kf, ki, sk, qs) && s[j] > mx) mx = s[j];
        if (mx == -INFINITY) { /* every key masked: defined as no attention at all */
          for (int64_t j = 0; j < tk; j++)
            p[j] = 0.0f;
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < tk; j++) {
          float e = j < end && key_kept(j, kf, ki, sk, qs) ? expf(s[j] - mx) : 0.0f;
          p[j] = e;
          sum += e;
        }
        const float inv = (float)(1.0 / sum); /* sum >= 1: the maximum contributes exp(0) */
        for (int64_t j = 0; j < tk; j++)
          p[j] *= inv;
      }
  }
  return GP_OK;
}

gp_status gp_cpu_softmax_backward(gp_backend *be, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx) {
  (void)be;
  for (int64_t r = 0; r < rows; r++) {
    const float *yr = y + r * cols, *g = dy + r * cols;
    float *o = dx + r * cols; /* may alias dy */
    double dot = 0.0;
    for (int64_t j = 0; j < cols; j++)
      dot += (double)yr[j] * g[j];
    const float fd = (float)dot;
    for (int64_t j = 0; j < cols; j++)
      o[j] = yr[j] * (g[j] - fd);
  }
  return GP_OK;
}
