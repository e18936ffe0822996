/* CPU operations of sequence models: embedding lookups (a gather by int32 ids and its
 * scatter-add) and the masked softmax of attention scores (causal, key padding, segment ids
 * of packed rows) with its backward, and rotary position embedding. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"

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

typedef struct attn_args {
  const gp_attn_softmax_desc *d;
  int64_t cols;
  const float *x, *g;
  float *out;
} attn_args;

/* Row (b, h, i) of the scores: softmax over the keys query i attends to, 0 elsewhere. Sums
 * in double over four lanes in a fixed order: the row alone decides its result. */
static void attn_row(const gp_attn_softmax_desc *d, int64_t row, const float *s, float *p) {
  const int64_t tq = d->tq, tk = d->tk, b = row / (d->heads * tq), i = row % tq;
  const float *kf = d->keep_f32 ? d->keep_f32 + b * tk : NULL;
  const int32_t *ki = d->keep_i32 ? d->keep_i32 + b * tk : NULL;
  const int32_t *sq = d->seg_q ? d->seg_q + b * tq : NULL;
  const int32_t *sk = d->seg_k ? d->seg_k + b * tk : NULL;
  const int masked = kf || ki || sk;
  int64_t end = d->causal && i + 1 < tk ? i + 1 : tk; /* keys [0, end) before masks */
  int32_t qs = sq ? sq[i] : 0;
  if (sq && qs == 0) end = 0; /* a padding query of a packed row attends to nothing */
  float mx = -INFINITY;
  for (int64_t j = 0; j < end; j++)
    if ((!masked || key_kept(j, kf, ki, sk, qs)) && s[j] > mx) mx = s[j];
  if (mx == -INFINITY) { /* every key masked: defined as no attention at all */
    for (int64_t j = 0; j < tk; j++)
      p[j] = 0.0f;
    return;
  }
  gp_v2d s0 = {0}, s1 = {0};
  for (int64_t j = 0; j < end; j += 4) {
    int64_t n = end - j < 4 ? end - j : 4;
    gp_v4f e = gp_v4f_exp((n == 4 ? gp_v4f_load(s + j) : gp_v4f_load_part(s + j, n)) - mx);
    for (int64_t l = n; l < 4; l++)
      e[l] = 0.0f;
    if (masked)
      for (int64_t l = 0; l < n; l++)
        if (!key_kept(j + l, kf, ki, sk, qs)) e[l] = 0.0f;
    if (n == 4)
      gp_v4f_store(p + j, e);
    else
      gp_v4f_store_part(p + j, e, n);
    gp_v4f_acc_double(&s0, &s1, e);
  }
  for (int64_t j = end; j < tk; j++)
    p[j] = 0.0f;
  gp_v2d s2 = s0 + s1;
  const float inv = (float)(1.0 / (s2[0] + s2[1])); /* >= 1: the maximum contributes exp(0) */
  for (int64_t j = 0; j < end; j++)
    p[j] *= inv;
}

static gp_status attn_forward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const attn_args *a = ctx;
  for (int64_t r = lo; r < hi; r++) /* probs may alias scores */
    attn_row(a->d, r, a->x + r * a->d->tk, a->out + r * a->d->tk);
  return GP_OK;
}

gp_status gp_cpu_attn_softmax_forward(gp_backend *be, const gp_attn_softmax_desc *d,
                                      const float *scores, float *probs) {
  if (!d->seg_q != !d->seg_k)
    return GP_ERR(GP_ERR_RUNTIME, "attention softmax: segment ids of the queries and of the keys "
                                  "must be given together");
  if (d->keep_f32 || d->keep_i32) GP_TRY(check_mask(d));
  if (d->seg_q) {
    GP_TRY(check_segments(d->seg_q, d->batch, d->tq, "query"));
    if (d->seg_k != d->seg_q) GP_TRY(check_segments(d->seg_k, d->batch, d->tk, "key"));
  }
  attn_args a = {.d = d, .x = scores, .out = probs};
  return gp_cpu_parallel_for(be, d->batch * d->heads * d->tq, gp_cpu_row_grain(d->tk),
                             attn_forward_part, &a);
}

static gp_status softmax_backward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const attn_args *a = ctx;
  const int64_t cols = a->cols;
  for (int64_t r = lo; r < hi; r++) {
    const float *yr = a->x + r * cols, *g = a->g + r * cols;
    float *o = a->out + r * cols; /* may alias dy */
    gp_v2d d0 = {0}, d1 = {0};
    for (int64_t j = 0; j < cols; j += 4) {
      int64_t n = cols - j < 4 ? cols - j : 4;
      gp_v4f y = n == 4 ? gp_v4f_load(yr + j) : gp_v4f_load_part(yr + j, n);
      gp_v4f v = n == 4 ? gp_v4f_load(g + j) : gp_v4f_load_part(g + j, n);
      d0 += (gp_v2d){y[0], y[1]} * (gp_v2d){v[0], v[1]};
      d1 += (gp_v2d){y[2], y[3]} * (gp_v2d){v[2], v[3]};
    }
    gp_v2d d2 = d0 + d1;
    const float fd = (float)(d2[0] + d2[1]);
    for (int64_t j = 0; j < cols; j++)
      o[j] = yr[j] * (g[j] - fd);
  }
  return GP_OK;
}

gp_status gp_cpu_softmax_backward(gp_backend *be, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx) {
  attn_args a = {.cols = cols, .x = y, .g = dy, .out = dx};
  return gp_cpu_parallel_for(be, rows, gp_cpu_row_grain(cols), softmax_backward_part, &a);
}

/* ---- rotary position embedding ---- */

#define ROPE_INV_MAX 512 /* pairs a head whose inverse frequencies are computed once a call */

typedef struct rope_args {
  int64_t heads, dh, ld;
  float theta;
  const float *inv; /* [dh / 2], or NULL: computed per row */
  const int32_t *pos;
  int inverse;
  float *x;
} rope_args;

static gp_status rope_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const rope_args *a = ctx;
  const int64_t half = a->dh / 2;
  for (int64_t r = lo; r < hi; r++) {
    float *row = a->x + r * a->ld;
    const float p = (float)a->pos[r];
    for (int64_t i = 0; i < half; i++) {
      /* f32 throughout, as transformers: inv_freq = 1 / theta^(2i/dh), angle = pos * inv_freq */
      const float inv = a->inv ? a->inv[i] : 1.0f / powf(a->theta, (float)(2 * i) / (float)a->dh);
      const float ang = p * inv, c = cosf(ang), s = a->inverse ? -sinf(ang) : sinf(ang);
      for (int64_t h = 0; h < a->heads; h++) {
        float *u = row + h * a->dh + i, *w = u + half;
        const float x1 = *u, x2 = *w;
        *u = x1 * c - x2 * s;
        *w = x2 * c + x1 * s;
      }
    }
  }
  return GP_OK;
}

gp_status gp_cpu_rope(gp_backend *be, int64_t rows, int64_t heads, int64_t dh, int64_t ld,
                      double theta, const int32_t *pos, int inverse, float *x) {
  if (dh % 2)
    return GP_ERR(GP_ERR_RUNTIME, "rope: the head size %lld is odd: its halves cannot pair",
                  (long long)dh);
  for (int64_t r = 0; r < rows; r++)
    if (pos[r] < 0 || pos[r] > (1 << 24))
      return GP_ERR(GP_ERR_DATA,
                    "rope: position %d of token %lld of the micro-batch is outside [0, 16777216] "
                    "(f32 holds every integer only up to 2^24)",
                    (int)pos[r], (long long)r);
  /* powf once a call, not rows x dh/2 times */
  float inv[ROPE_INV_MAX];
  const int64_t half = dh / 2;
  for (int64_t i = 0; i < half && half <= ROPE_INV_MAX; i++)
    inv[i] = 1.0f / powf((float)theta, (float)(2 * i) / (float)dh);
  rope_args a = {heads, dh, ld, (float)theta, half <= ROPE_INV_MAX ? inv : NULL, pos, inverse, x};
  return gp_cpu_parallel_for(be, rows, gp_cpu_row_grain(heads * dh), rope_part, &a);
}
