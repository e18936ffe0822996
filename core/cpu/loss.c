/* CPU softmax cross-entropy (with label smoothing) and the host-side reductions the
 * trainer reads: sums, sums of squares, correct predictions. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"

/* Every label before any row is computed: the rows run on the team's threads. */
static gp_status check_labels(const int32_t *y, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; i++)
    if (y[i] < 0 || y[i] >= k)
      return GP_ERR(GP_ERR_RUNTIME, "label %d of sample %lld is outside [0, %lld)", (int)y[i],
                    (long long)i, (long long)k);
  return GP_OK;
}

typedef struct xent_args {
  int64_t k;
  float smoothing, scale;
  const float *logits, *probs;
  const int32_t *labels;
  float *out, *loss;
} xent_args;

/* max(z[0], z[1], ...) as a scan that keeps the larger: a NaN is skipped unless it is z[0].
 * By lanes, then across them: the maximum is exact, so the order does not matter. */
static float row_max(const float *z, int64_t k) {
  gp_v4f m0 = gp_v4f_splat(z[0]), m1 = m0;
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) {
    gp_v4f a = gp_v4f_load(z + j), b = gp_v4f_load(z + j + 4);
    m0 = gp_v4f_select(a > m0, a, m0);
    m1 = gp_v4f_select(b > m1, b, m1);
  }
  float mx = z[0];
  for (int l = 0; l < 4; l++) {
    mx = m0[l] > mx ? m0[l] : mx;
    mx = m1[l] > mx ? m1[l] : mx;
  }
  for (; j < k; j++)
    mx = z[j] > mx ? z[j] : mx;
  return mx;
}

/* One row: probs = softmax(z), and its loss from log-sum-exp (exact even where a probability
 * underflows to 0). Sums in double, four lanes in a fixed order, so a row's result depends on
 * the row alone, not on how rows are split over threads. p may be z (the loss keeping its
 * probabilities over the logits): each element is read before it is written, z[label] first. */
static void xent_row(int64_t k, float smoothing, const float *z, int32_t label, float *p,
                     float *loss) {
  const float zl = z[label];
  const float mx = row_max(z, k);
  const int smoothed = smoothing != 0.0f; /* sz is read only then */
  gp_v2d se0 = {0}, se1 = {0}, sz0 = {0}, sz1 = {0};
  int64_t j = 0;
  for (; j + 4 <= k; j += 4) {
    gp_v4f d = gp_v4f_load(z + j) - mx, e = gp_v4f_exp(d);
    gp_v4f_store(p + j, e);
    gp_v4f_acc_double(&se0, &se1, e);
    if (smoothed) gp_v4f_acc_double(&sz0, &sz1, d);
  }
  if (j < k) {
    gp_v4f d = gp_v4f_load_part(z + j, k - j) - mx, e = gp_v4f_exp(d);
    for (int64_t l = k - j; l < 4; l++) /* the padding lanes add nothing */
      d[l] = e[l] = 0.0f;
    gp_v4f_store_part(p + j, e, k - j);
    gp_v4f_acc_double(&se0, &se1, e);
    if (smoothed) gp_v4f_acc_double(&sz0, &sz1, d);
  }
  gp_v2d se2 = se0 + se1, sz2 = sz0 + sz1;
  double se = se2[0] + se2[1], sz = sz2[0] + sz2[1];
  const float inv = (float)(1.0 / se);
  for (j = 0; j < k; j++)
    p[j] *= inv;
  double lse = log(se);
  double nll = -((double)zl - mx - lse);
  double smooth = -(sz / (double)k - lse);
  /* Without smoothing the loss is nll alone: a -inf logit elsewhere in the row makes smooth
   * infinite, and 0 * inf would be NaN. */
  *loss = smoothed ? (float)((1.0 - smoothing) * nll + smoothing * smooth) : (float)nll;
}

static gp_status xent_forward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const xent_args *a = ctx;
  for (int64_t i = lo; i < hi; i++)
    xent_row(a->k, a->smoothing, a->logits + i * a->k, a->labels[i], a->out + i * a->k,
             a->loss + i);
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_forward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                      const float *logits, const int32_t *labels, float *probs,
                                      float *loss) {
  if (k <= 0) return GP_ERR(GP_ERR_RUNTIME, "softmax over %lld classes", (long long)k);
  GP_TRY(check_labels(labels, n, k));
  xent_args a = {.k = k,
                 .smoothing = smoothing,
                 .logits = logits,
                 .labels = labels,
                 .out = probs,
                 .loss = loss};
  return gp_cpu_parallel_for(be, n, gp_cpu_row_grain(k), xent_forward_part, &a);
}

static gp_status xent_backward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const xent_args *a = ctx;
  const float off = a->smoothing / (float)a->k, on = 1.0f - a->smoothing, scale = a->scale;
  for (int64_t i = lo; i < hi; i++) { /* d may be p: each element read before it is written */
    const float *p = a->probs + i * a->k;
    float *d = a->out + i * a->k;
    int64_t j = 0;
    for (; j + 4 <= a->k; j += 4)
      gp_v4f_store(d + j, scale * (gp_v4f_load(p + j) - off));
    for (; j < a->k; j++)
      d[j] = scale * (p[j] - off);
    d[a->labels[i]] -= scale * on;
  }
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_backward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                       float scale, const float *probs, const int32_t *labels,
                                       float *dlogits) {
  GP_TRY(check_labels(labels, n, k));
  xent_args a = {.k = k,
                 .smoothing = smoothing,
                 .scale = scale,
                 .probs = probs,
                 .labels = labels,
                 .out = dlogits};
  return gp_cpu_parallel_for(be, n, gp_cpu_row_grain(k), xent_backward_part, &a);
}

/* Sums in double over four lanes in a fixed order, on the caller's thread alone (so the
 * result does not depend on the thread count). */
gp_status gp_cpu_sum(gp_backend *be, int64_t n, const float *x, double *host_out) {
  (void)be;
  gp_v2d a = {0}, b = {0};
  for (int64_t i = 0; i < n; i += 4)
    gp_v4f_acc_double(&a, &b, n - i >= 4 ? gp_v4f_load(x + i) : gp_v4f_load_part(x + i, n - i));
  gp_v2d t = a + b;
  *host_out = t[0] + t[1];
  return GP_OK;
}

gp_status gp_cpu_sumsq(gp_backend *be, int64_t n, const float *x, double *host_out) {
  (void)be;
  gp_v2d a = {0}, b = {0}, c = {0}, d = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    gp_v4f v = gp_v4f_load(x + i), w = gp_v4f_load(x + i + 4);
    gp_v2d v0 = {v[0], v[1]}, v1 = {v[2], v[3]}, w0 = {w[0], w[1]}, w1 = {w[2], w[3]};
    a += v0 * v0;
    b += v1 * v1;
    c += w0 * w0;
    d += w1 * w1;
  }
  gp_v2d t = (a + b) + (c + d);
  double s = t[0] + t[1];
  for (; i < n; i++)
    s += (double)x[i] * x[i];
  *host_out = s;
  return GP_OK;
}

/* Whether any lane of a comparison's mask is set. */
static inline int any4(gp_v4i m) {
  return (m[0] | m[1] | m[2] | m[3]) != 0;
}

/* Argmax as torch.argmax: a NaN counts as the largest (the first NaN wins), else the first
 * maximum. The maximum by lanes, then one scan, four at a time, for the first NaN and (until
 * found) the first element equal to the maximum; a block with either is resolved one by one. */
static int64_t argmax_row(const float *z, int64_t k) {
  const float mx = row_max(z, k);
  const gp_v4f m = gp_v4f_splat(mx);
  int64_t best = -1, j = 0;
  for (; j + 4 <= k; j += 4) {
    const gp_v4f v = gp_v4f_load(z + j);
    if (!any4((v != v) | (best < 0 ? v == m : (gp_v4i){0}))) continue;
    for (int64_t l = j; l < j + 4; l++) {
      if (z[l] != z[l]) return l;
      if (best < 0 && z[l] == mx) best = l;
    }
  }
  for (; j < k; j++) {
    if (z[j] != z[j]) return j;
    if (best < 0 && z[j] == mx) best = j;
  }
  return best < 0 ? 0 : best;
}

/* Rows split over the team; the count is an integer, so the order of the parts' adds does not
 * matter. */
typedef struct count_args {
  int64_t k;
  const float *z;
  const int32_t *y;
  _Atomic int64_t ok;
} count_args;

static gp_status count_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  count_args *a = ctx;
  int64_t ok = 0;
  for (int64_t i = lo; i < hi; i++)
    ok += argmax_row(a->z + i * a->k, a->k) == a->y[i];
  atomic_fetch_add(&a->ok, ok);
  return GP_OK;
}

gp_status gp_cpu_count_correct(gp_backend *be, int64_t n, int64_t k, const float *logits,
                               const int32_t *labels, int64_t *host_out) {
  count_args a = {.k = k, .z = logits, .y = labels};
  atomic_init(&a.ok, 0);
  GP_TRY(gp_cpu_parallel_for(be, n, gp_cpu_row_grain(k), count_part, &a));
  *host_out = atomic_load(&a.ok);
  return GP_OK;
}

/* ---- softmax cross-entropy over a middle class axis ---- */

/* Logits [outer, k, inner]: rows are neighbouring positions, each class of a tile of them a
 * contiguous run `inner` floats from the last, so nothing is permuted and every exp (8 lanes
 * with AVX2), max and sum is a vector op. A lane's result depends on its row alone (exp, log1p and
 * the double sums are lane by lane). Sums in float (a class axis is short: a few to a few hundred
 * classes); a row's loss takes log(se) in float (se in [1, k]: se - 1 is exact) with vmath.h's
 * log1p, and probs keep e^(z - max), normalized by backward with the row's 1 / se (one pass fewer).
 * The row kernel's double sums and libm log cost as much as PyTorch's whole pass over 10
 * classes. Permuting [64, 10, 28, 28] to rows of 10 and back, with a row kernel
 * sized for vocabularies, ran at 0.13x PyTorch's time. */
typedef struct xent_axis_args {
  int64_t k, inner, blocks; /* blocks of 4 positions per outer index */
  float smoothing, scale;
  const float *z, *probs;
  const int32_t *y, *raw;
  float *out, *loss, *inv; /* inv: 1 / sum(e^(z - max)) per row (probs hold the e^) */
  _Atomic int64_t ok;
} xent_axis_args;

static inline gp_v4f load_w(const float *p, int64_t w) {
  return w == 4 ? gp_v4f_load(p) : gp_v4f_load_part(p, w);
}

static inline void store_w(float *p, gp_v4f v, int64_t w) {
  if (w == 4)
    gp_v4f_store(p, v);
  else
    gp_v4f_store_part(p, v, w);
}

/* Positions per unit of work: a tile of every class's XA_TILE logits stays in L1 through
 * its passes (max, shift, exp, sums). */
#define XA_TILE 64

/* The first w (<= 4) labels, -1 (ignored) after them. */
static inline gp_v4i load_iw(const int32_t *p, int64_t w) {
  gp_v4i v = {-1, -1, -1, -1};
  if (w == 4)
    memcpy(&v, p, sizeof v);
  else
    for (int64_t l = 0; l < w; l++)
      v[l] = p[l];
  return v;
}

/* A tile's labels in [-1, k) (-1: ignored), checked by the part that reads them (a serial
 * pass over every label, in both directions, kept the second thread idle for a fifth of the
 * time at 10 classes). */
static gp_status check_axis_labels(const int32_t *y, int64_t w, int64_t k, int64_t at) {
  int bad = 0;
  for (int64_t i = 0; i < w; i++)
    bad |= y[i] < -1 || y[i] >= k;
  for (int64_t i = 0; bad && i < w; i++)
    if (y[i] < -1 || y[i] >= k)
      return GP_ERR(GP_ERR_RUNTIME, "label %d of position %lld is outside [0, %lld)", (int)y[i],
                    (long long)(at + i), (long long)k);
  return GP_OK;
}

static gp_status xent_axis_fwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  xent_axis_args *a = ctx;
  const int64_t k = a->k, inner = a->inner;
  const int smoothed = a->smoothing != 0.0f;
  int64_t ok = 0;
  float mx[XA_TILE], se[XA_TILE], sz[XA_TILE], zy[XA_TILE];
  int32_t best[XA_TILE];
  for (int64_t u = lo; u < hi; u++) {
    const int64_t o = u / a->blocks, i0 = (u % a->blocks) * XA_TILE;
    const int64_t w = inner - i0 < XA_TILE ? inner - i0 : XA_TILE, at = o * k * inner + i0;
    const float *z = a->z + at;
    const int32_t *y = a->y + o * inner + i0;
    float *p = a->out + at;
    GP_TRY(check_axis_labels(y, w, k, o * inner + i0));
    /* the maximum (a NaN skipped unless first, as row_max), its first index or the first NaN's
     * (count_correct's argmax), and the label's logit */
    for (int64_t t = 0; t < w; t += 4) {
      const int64_t tw = w - t < 4 ? w - t : 4;
      const gp_v4i yv = load_iw(y + t, tw);
      gp_v4f m = load_w(z + t, tw), zl = gp_v4f_select(yv == 0, m, gp_v4f_splat(0.0f));
      gp_v4i arg = {0}, nan_at = (gp_v4i){-1, -1, -1, -1} & ~(m != m);
      for (int64_t j = 1; j < k; j++) {
        const gp_v4f v = load_w(z + j * inner + t, tw);
        const gp_v4i gt = v > m, first_nan = (v != v) & (nan_at < 0);
        m = gp_v4f_select(gt, v, m);
        zl = gp_v4f_select(yv == (int32_t)j, v, zl);
        arg = (gt & (int32_t)j) | (~gt & arg);
        nan_at = (first_nan & (int32_t)j) | (~first_nan & nan_at);
      }
      gp_v4f_store(mx + t, m);
      gp_v4f_store(zy + t, zl);
      const gp_v4i b = (nan_at & ~(nan_at < 0)) | (arg & (nan_at < 0));
      memcpy(best + t, &b, sizeof b);
      gp_v4f_store(se + t, gp_v4f_splat(0.0f));
      gp_v4f_store(sz + t, gp_v4f_splat(0.0f));
    }
    for (int64_t j = 0; j < k; j++) {
      float *pj = p + j * inner;
      const float *zj = z + j * inner;
      int64_t t = 0;
      for (; t + 4 <= w; t += 4) {
        const gp_v4f d = gp_v4f_load(zj + t) - gp_v4f_load(mx + t);
        gp_v4f_store(pj + t, d);
        if (smoothed) gp_v4f_store(sz + t, gp_v4f_load(sz + t) + d);
      }
      if (t < w) {
        const gp_v4f d = gp_v4f_load_part(zj + t, w - t) - gp_v4f_load(mx + t);
        gp_v4f_store_part(pj + t, d, w - t);
        if (smoothed) gp_v4f_store(sz + t, gp_v4f_load(sz + t) + d);
      }
      gp_cpu_exp_inplace(w, pj);
      for (t = 0; t + 4 <= w; t += 4)
        gp_v4f_store(se + t, gp_v4f_load(se + t) + gp_v4f_load(pj + t));
      if (t < w) gp_v4f_store(se + t, gp_v4f_load(se + t) + gp_v4f_load_part(pj + t, w - t));
    }
    for (int64_t t = 0; t < w; t += 4) {
      const int64_t tw = w - t < 4 ? w - t : 4;
      const gp_v4i yv = load_iw(y + t, tw), raw = load_iw(a->raw + o * inner + i0 + t, tw);
      gp_v4i b;
      memcpy(&b, best + t, sizeof b);
      const gp_v4i hit = b == raw;
      for (int64_t l = 0; l < tw; l++)
        ok += hit[l] != 0;
      const gp_v4f s = gp_v4f_load(se + t), lse = gp_v4f_log1p(s - 1.0f);
      store_w(a->inv + o * inner + i0 + t, 1.0f / s, tw);
      gp_v4f loss = lse - (gp_v4f_load(zy + t) - gp_v4f_load(mx + t));
      if (smoothed) {
        const gp_v4f smooth = lse - gp_v4f_load(sz + t) / (float)k;
        loss = (1.0f - a->smoothing) * loss + a->smoothing * smooth;
      }
      store_w(a->loss + o * inner + i0 + t, gp_v4f_select(yv < 0, gp_v4f_splat(0.0f), loss), tw);
    }
  }
  atomic_fetch_add(&a->ok, ok);
  return GP_OK;
}

static gp_status xent_axis_bwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  xent_axis_args *a = ctx;
  const int64_t k = a->k, inner = a->inner;
  const float off = a->smoothing / (float)k, on = 1.0f - a->smoothing, scale = a->scale;
  for (int64_t u = lo; u < hi; u++) {
    const int64_t o = u / a->blocks, i0 = (u % a->blocks) * XA_TILE;
    const int64_t w = inner - i0 < XA_TILE ? inner - i0 : XA_TILE, at = o * k * inner + i0;
    const int32_t *y = a->y + o * inner + i0;
    const float *inv = a->inv + o * inner + i0;
    GP_TRY(check_axis_labels(y, w, k, o * inner + i0));
    for (int64_t j = 0; j < k; j++) {
      const float *p = a->probs + at + j * inner;
      float *d = a->out + at + j * inner;
      for (int64_t t = 0; t < w; t += 4) {
        const int64_t tw = w - t < 4 ? w - t : 4;
        const gp_v4i yv = load_iw(y + t, tw);
        gp_v4f g = scale * (load_w(p + t, tw) * load_w(inv + t, tw) - off);
        g = g - gp_v4f_select(yv == (int32_t)j, gp_v4f_splat(scale * on), gp_v4f_splat(0.0f));
        store_w(d + t, gp_v4f_select(yv < 0, gp_v4f_splat(0.0f), g), tw);
      }
    }
  }
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_axis_forward(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                           float smoothing, const float *logits,
                                           const int32_t *labels, const int32_t *raw_labels,
                                           float *probs, float *inv, float *loss,
                                           int64_t *host_correct) {
  if (k <= 0 || inner <= 0)
    return GP_ERR(GP_ERR_RUNTIME, "softmax over %lld classes of %lld positions", (long long)k,
                  (long long)inner);
  xent_axis_args a = {.k = k,
                      .inner = inner,
                      .blocks = (inner + XA_TILE - 1) / XA_TILE,
                      .smoothing = smoothing,
                      .z = logits,
                      .y = labels,
                      .raw = raw_labels,
                      .out = probs,
                      .loss = loss,
                      .inv = inv};
  atomic_init(&a.ok, 0);
  GP_TRY(gp_cpu_parallel_for(be, outer * a.blocks, gp_cpu_row_grain(XA_TILE * k),
                             xent_axis_fwd_part, &a));
  *host_correct = atomic_load(&a.ok);
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_axis_backward(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                                            float smoothing, float scale, const float *probs,
                                            const float *inv, const int32_t *labels,
                                            float *dlogits) {
  xent_axis_args a = {.k = k,
                      .inner = inner,
                      .blocks = (inner + XA_TILE - 1) / XA_TILE,
                      .smoothing = smoothing,
                      .scale = scale,
                      .probs = probs,
                      .y = labels,
                      .out = dlogits,
                      .inv = (float *)inv};
  return gp_cpu_parallel_for(be, outer * a.blocks, gp_cpu_row_grain(XA_TILE * k),
                             xent_axis_bwd_part, &a);
}
