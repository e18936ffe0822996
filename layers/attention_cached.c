/* attention's cached forward for incremental decoding (core/eval/kvdec.c): one query position a
 * row against the keys and values kept so far. */
#include <math.h>

#include "layers/attention.h"

/* The products of one query position a row and head, entry (b, h) being op(A) op(B) (m = 1)
 * with A at a + b sa[0] + h sa[1], B at b_ + b sb[0] + (h / grp) sb[1], C at c + b sc[0] +
 * h sc[1]: batched over the rows, a call a head, or over the heads, a call a row (a row's
 * key/value head when heads share one), whichever makes fewer calls. Entry (b, h) is the same
 * GEMM either way, so the CPU's bits are the per-entry loop's. */
typedef struct head_products {
  int trans_b;
  int64_t n, k, lda, ldb, ldc;
  float alpha;
  const float *a, *b;
  float *c;
  int64_t sa[2], sb[2], sc[2];
} head_products;

static gp_status heads_gemm(gp_backend *be, const head_products *x, int64_t nb, int64_t H,
                            int64_t grp) {
  const int64_t kvh = H / grp, per_row = grp == 1 ? nb : nb * kvh;
  if (H <= per_row) {
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm_strided_batched(be, 0, x->trans_b, 1, x->n, x->k, x->alpha,
                                      x->a + h * x->sa[1], x->lda, x->sa[0],
                                      x->b + h / grp * x->sb[1], x->ldb, x->sb[0], 0.0f,
                                      x->c + h * x->sc[1], x->ldc, x->sc[0], nb));
    return GP_OK;
  }
  for (int64_t r = 0; r < nb; r++)
    for (int64_t g = 0; g < (grp == 1 ? 1 : kvh); g++) {
      const int64_t h0 = grp == 1 ? 0 : g * grp;
      GP_TRY(be->gemm_strided_batched(
          be, 0, x->trans_b, 1, x->n, x->k, x->alpha, x->a + r * x->sa[0] + h0 * x->sa[1], x->lda,
          x->sa[1], x->b + r * x->sb[0] + g * x->sb[1], x->ldb, grp == 1 ? x->sb[1] : 0, 0.0f,
          x->c + r * x->sc[0] + h0 * x->sc[1], x->ldc, x->sc[1], grp == 1 ? H : grp));
    }
  return GP_OK;
}

/* Incremental decoding (e->cache set, core/eval/kvdec.c): l is a copy whose queries are one
 * position a row (tq 1). Self-attention appends the row's key and value at position c->len and
 * attends to positions 0 .. len, all earlier ones (causal holds by construction); its segment
 * ids or key-padding flags are kept beside them (an f32 mask's as f32 bits). Cross-attention
 * projects the memory at the first step and keeps it. The products are the uncached ones
 * restricted to the positions that softmax keeps, so the outputs are those of the full row.
 * Every access goes through backend ops, so the cache lives in the stage's memory (the device
 * on a GPU). Nothing is saved: no backward. */
gp_status gp_attn_forward_cached(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  const gp_attn_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_kv_cache *c = e->cache;
  gp_attn_geo g;
  gp_attn_geometry(l, &g);
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  const int64_t nb = in[0].shape.d[0], d = g.d, dh = g.dh, H = g.h, dkv = g.dkv, nq = g.nqkv;
  const int64_t grp = H / g.kvh, ld = 2 * dkv;
  const float *W = e->bind->param[w_in], *bw = b_in >= 0 ? e->bind->param[b_in] : NULL;
  *saved = NULL;
  if (g.tq != 1)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: a cached step takes one query a row, got %lld",
                  l->path, (long long)g.tq);
  if (g.cross && k->causal)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: causal cross-attention has no cached form",
                  l->path);
  if (!be->gemm_strided_batched || !be->gather_rows)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: the %s backend has no cached form", l->path,
                  be->name);
  const int64_t tk = g.cross ? g.tk : c->cap; /* positions a row of the cache holds */
  if (!c->kv) {
    c->rows = nb;
    c->row_floats = tk * ld;
    c->row_ids = tk;
    GP_TRY(gp_arena_alloc(c->arena, (size_t)(nb * tk * ld) * sizeof(float), (void **)&c->kv));
    GP_TRY(gp_arena_alloc(c->arena, (size_t)(nb * tk) * sizeof(int32_t), (void **)&c->ids));
    GP_TRY(be->zero(be, c->ids, (size_t)(nb * tk) * sizeof(int32_t))); /* reordered unread */
    c->len = 0;
  }
  if (c->rows != nb)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: cache of %lld rows, step of %lld", l->path,
                  (long long)c->rows, (long long)nb);
  if (!g.cross && c->len >= c->cap)
    return GP_ERR(GP_ERR_DATA,
                  "attention %s: position %lld is past the %lld positions the cache holds (the "
                  "model's maximum length)",
                  l->path, (long long)c->len, (long long)c->cap);
  float *q, *ctx, *p;
  const int64_t L = g.cross ? tk : c->len + 1; /* keys attended */
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(nb * nq + nb * d + nb * H * L) * sizeof(float),
                        (void **)&q));
  ctx = q + nb * nq;
  p = ctx + nb * d;
  int64_t ldq;
  if (!g.cross) {
    /* Q, K, V of the new position (rope turns Q's and K's heads by its position), K and V
     * appended to each row's cache, with the position's segment id or mask flag */
    GP_TRY(be->gemm(be, 0, 1, nb, nq, d, 1.0f, GP_F32P(&in[0]), d, W, d, 0.0f, q, nq));
    if (bw) GP_TRY(be->bias_add(be, nb, nq, 1, bw, q));
    if (g.pos >= 0)
      GP_TRY(be->rope(be, nb, H + g.kvh, dh, nq, k->theta, GP_I32P(&in[g.pos]), 0, q));
    GP_TRY(be->copy2d(be, nb, ld, q + d, nq, c->kv + c->len * ld, tk * ld));
    const int id_in = g.seg_q >= 0 ? g.seg_q : g.mask;
    if (id_in >= 0)
      GP_TRY(be->gather_rows(be, nb, 1, NULL, in[id_in].data, 1, c->ids + c->len, tk));
    ldq = nq;
  } else {
    if (c->len == 0) { /* the memory's keys and values, once a batch */
      GP_TRY(be->gemm(be, 0, 1, nb * tk, ld, d, 1.0f, GP_F32P(&in[g.kv]), d, W + d * d, d, 0.0f,
                      c->kv, ld));
      if (bw) GP_TRY(be->bias_add(be, nb * tk, ld, 1, bw + d, c->kv));
      c->len = tk;
    }
    GP_TRY(be->gemm(be, 0, 1, nb, d, d, 1.0f, GP_F32P(&in[0]), d, W, d, 0.0f, q, d));
    if (bw) GP_TRY(be->bias_add(be, nb, d, 1, bw, q));
    ldq = d;
  }
  const float scale = (float)(1.0 / sqrt((double)dh));
  const head_products scores = {.trans_b = 1,
                                .n = L,
                                .k = dh,
                                .lda = ldq,
                                .ldb = ld,
                                .ldc = L,
                                .alpha = scale,
                                .a = q,
                                .b = c->kv,
                                .c = p,
                                .sa = {ldq, dh},
                                .sb = {tk * ld, dh},
                                .sc = {H * L, L}};
  GP_TRY(heads_gemm(be, &scores, nb, H, grp));
  gp_attn_softmax_desc sd = {nb, H, 1, L, 0, NULL, NULL, NULL, NULL};
  int32_t *kid = NULL;
  if (!g.cross && (g.seg_q >= 0 || g.mask >= 0)) { /* the held positions' ids, [nb, L] */
    GP_TRY(gp_arena_alloc(e->arena, (size_t)(nb * L) * sizeof(int32_t), (void **)&kid));
    GP_TRY(be->gather_rows(be, nb, L, NULL, c->ids, tk, kid, L));
    if (g.seg_q >= 0) {
      sd.seg_q = GP_I32P(&in[g.seg_q]);
      sd.seg_k = kid;
    } else if (in[g.mask].dtype == GP_F32) {
      sd.keep_f32 = (const float *)(const void *)kid;
    } else {
      sd.keep_i32 = kid;
    }
  } else if (g.cross) {
    if (g.mask >= 0) {
      if (in[g.mask].dtype == GP_I32)
        sd.keep_i32 = GP_I32P(&in[g.mask]);
      else
        sd.keep_f32 = GP_F32P(&in[g.mask]);
    }
    if (g.seg_q >= 0) {
      sd.seg_q = GP_I32P(&in[g.seg_q]);
      sd.seg_k = GP_I32P(&in[g.seg_k]);
    }
  }
  GP_TRY(be->attn_softmax_forward(be, &sd, p, p));
  const head_products mix = {.trans_b = 0,
                             .n = dh,
                             .k = L,
                             .lda = L,
                             .ldb = ld,
                             .ldc = d,
                             .alpha = 1.0f,
                             .a = p,
                             .b = c->kv + dkv,
                             .c = ctx,
                             .sa = {H * L, L},
                             .sb = {tk * ld, dh},
                             .sc = {d, dh}};
  GP_TRY(heads_gemm(be, &mix, nb, H, grp));
  GP_TRY(
      be->gemm(be, 0, 1, nb, d, d, 1.0f, ctx, d, e->bind->param[w_out], d, 0.0f, GP_F32P(out), d));
  if (b_out >= 0) GP_TRY(be->bias_add(be, nb, d, 1, e->bind->param[b_out], GP_F32P(out)));
  if (!g.cross) c->len++;
  return GP_OK;
}
