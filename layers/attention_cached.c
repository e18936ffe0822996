/* attention's cached forward for incremental decoding (core/eval/kvdec.c): one query position a
 * row against the keys and values kept so far. */
#include <math.h>

#include "layers/attention.h"

/* Incremental decoding (e->cache set, core/eval/kvdec.c): l is a copy whose queries are one
 * position a row (tq 1). Self-attention appends the row's key and value at position c->len and
 * attends to positions 0 .. len, all earlier ones (causal holds by construction); its segment
 * ids or key-padding flags are kept beside them. Cross-attention projects the memory at the
 * first step and keeps it. The products are the uncached ones restricted to the positions that
 * softmax keeps, so the outputs are those of the full row. Nothing is saved: no backward. */
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
  const int64_t tk = g.cross ? g.tk : c->cap; /* positions a row of the cache holds */
  if (!c->kv) {
    c->rows = nb;
    c->row_floats = tk * ld;
    c->row_ids = tk;
    GP_TRY(gp_arena_alloc(c->arena, (size_t)(nb * tk * ld) * sizeof(float), (void **)&c->kv));
    GP_TRY(gp_arena_alloc(c->arena, (size_t)(nb * tk) * sizeof(int32_t), (void **)&c->ids));
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
     * appended to each row's cache */
    GP_TRY(be->gemm(be, 0, 1, nb, nq, d, 1.0f, GP_F32P(&in[0]), d, W, d, 0.0f, q, nq));
    if (bw) GP_TRY(be->bias_add(be, nb, nq, 1, bw, q));
    if (g.pos >= 0)
      GP_TRY(be->rope(be, nb, H + g.kvh, dh, nq, k->theta, GP_I32P(&in[g.pos]), 0, q));
    const int32_t *sq = g.seg_q >= 0 ? GP_I32P(&in[g.seg_q]) : NULL;
    const int32_t *mk = g.mask >= 0 && in[g.mask].dtype == GP_I32 ? GP_I32P(&in[g.mask]) : NULL;
    const float *mf = g.mask >= 0 && !mk ? GP_F32P(&in[g.mask]) : NULL;
    for (int64_t b = 0; b < nb; b++) {
      float *row = c->kv + (b * tk + c->len) * ld;
      for (int64_t j = 0; j < ld; j++)
        row[j] = q[b * nq + d + j];
      c->ids[b * tk + c->len] = sq ? sq[b] : mk ? mk[b] : mf ? (int32_t)mf[b] : 1;
    }
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
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm(be, 0, 1, 1, L, dh, scale, q + b * ldq + h * dh, ldq,
                      c->kv + b * tk * ld + h / grp * dh, ld, 0.0f, p + (b * H + h) * L, L));
  gp_attn_softmax_desc sd = {nb, H, 1, L, 0, NULL, NULL, NULL, NULL};
  int32_t *kid = NULL;
  if (!g.cross && (g.seg_q >= 0 || g.mask >= 0)) { /* the held positions' ids, [nb, L] */
    GP_TRY(gp_arena_alloc(e->arena, (size_t)(nb * L) * sizeof(int32_t), (void **)&kid));
    for (int64_t b = 0; b < nb; b++)
      for (int64_t j = 0; j < L; j++)
        kid[b * L + j] = c->ids[b * tk + j];
    if (g.seg_q >= 0) {
      sd.seg_q = GP_I32P(&in[g.seg_q]);
      sd.seg_k = kid;
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
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm(be, 0, 0, 1, dh, L, 1.0f, p + (b * H + h) * L, L,
                      c->kv + b * tk * ld + dkv + h / grp * dh, ld, 0.0f, ctx + b * d + h * dh, d));
  GP_TRY(
      be->gemm(be, 0, 1, nb, d, d, 1.0f, ctx, d, e->bind->param[w_out], d, 0.0f, GP_F32P(out), d));
  if (b_out >= 0) GP_TRY(be->bias_add(be, nb, d, 1, e->bind->param[b_out], GP_F32P(out)));
  if (!g.cross) c->len++;
  return GP_OK;
}
