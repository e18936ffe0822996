/* attention: multi-head scaled dot-product attention with its projections, as PyTorch's
 * nn.MultiheadAttention(dim, heads, bias=, dropout=, batch_first=True) and with its parameter
 * names (in_proj_weight [3 dim, dim], in_proj_bias, out_proj.weight, out_proj.bias).
 *
 * Inputs, told apart by rank: queries [Tq, dim]; optionally keys/values [Tk, dim]
 * (cross-attention; without it, self-attention over the queries); then, with mask: padding
 * (the default), optionally a key-padding mask [Tk], f32 or i32, 1 = a real token, 0 = padding
 * (the inverse of PyTorch's boolean key_padding_mask, where True means "ignore"). With
 * mask: segments the rows are packed (several sentences per row, as Lingvo's packed inputs
 * and T5): after the F32 inputs come I32 segment ids (0 = padding, 1, 2, ... = which sentence
 * of the row), [x, seg] for self-attention or [q, mem, q_seg, k_seg] for cross-attention, and
 * query i attends key j only when k_seg[j] is not 0 and equals q_seg[i], so each sentence sees
 * only itself. causal: true masks key j > i for query i (as PyTorch's
 * attn_mask = triu(ones(Tq, Tk), 1)). A query whose keys are all masked (a padding query of a
 * packed row, seg 0, among them) attends to nothing: its context is 0, so its output is
 * out_proj.bias, and no NaN appears. Dropout on the attention probabilities uses the dropout
 * layer's counter-based masks (a recompute reproduces them; M does not change them).
 *
 * Per (sample, head) the products are GEMMs on strided views of the projections, so nothing
 * is transposed or copied: head h of Q is columns [h dh, (h+1) dh) of the [T, 3 dim] block. */
#include <math.h>

#include "layers/layers.h"

typedef struct attention_conf {
  int64_t heads, dim; /* dim 0: the input's */
  int bias, causal;
  int segments; /* mask: segments (1) or padding (0) */
  double dropout;
} attention_conf;

/* What the input shapes make of the layer. */
typedef struct geo {
  int cross;        /* keys and values from input 2 */
  int mask;         /* index of the key-padding mask input, or -1 */
  int seg_q, seg_k; /* indices of the segment id inputs (mask: segments), or -1 */
  int64_t tq, tk, d, h, dh;
} geo;

/* The projections of a micro-batch as strided views; what backward needs from forward. */
typedef struct attn_saved {
  float *qkv;       /* self: [rows, 3d]; cross: q [rows_q, d] then kv [rows_k, 2d] */
  float *p;         /* softmax probabilities [B, H, Tq, Tk], before dropout */
  float *ctx;       /* the heads' outputs side by side [rows_q, d] */
  int64_t ldq, ldk; /* row strides of Q and of K, V */
  float *q, *k, *v; /* views into qkv */
  /* d(projections), laid out like qkv: kept by a backward's B (GP_GRAD_INPUT) for its W,
   * NULL until then */
  float *dqkv;
} attn_saved;

static const gp_setting attention_settings[] = {
    {.key = "heads",
     GP_SETTING_INT_AT(attention_conf, heads),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "number of heads; must divide dim"},
    {.key = "dim",
     GP_SETTING_INT_AT(attention_conf, dim),
     .idflt = 0,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .dflt_doc = "the input's",
     .doc = "model width; when given, it must equal the last dimension of the queries"},
    {.key = "bias",
     GP_SETTING_BOOL_AT(attention_conf, bias),
     .idflt = 1,
     .doc = "biases of the input and output projections"},
    {.key = "causal",
     GP_SETTING_BOOL_AT(attention_conf, causal),
     .idflt = 0,
     .doc = "query i may not attend to key j > i"},
    {.key = "mask",
     GP_SETTING_CHOICE_AT(attention_conf, segments),
     .choices = (const char *const[]){"padding", "segments", NULL},
     .idflt = 0,
     .doc = "the i32 inputs after the f32 ones: `padding`, a key-padding mask; `segments`, the "
            "segment ids of packed rows"},
    {.key = "dropout",
     GP_SETTING_FLOAT_AT(attention_conf, dropout),
     .fdflt = 0,
     .range = GP_RANGE_BELOW_ONE,
     .doc = "dropout on the attention probabilities while training"},
};

static gp_status attention_configure(gp_layer *l, gp_cfg *cfg) {
  attention_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->dim && k->dim % k->heads)
    return gp_cfg_error(cfg, "heads", "heads: dim %lld is not divisible by %lld heads",
                        (long long)k->dim, (long long)k->heads);
  return GP_OK;
}

static void geometry(const gp_layer *l, geo *g) {
  const attention_conf *k = l->conf;
  g->cross = l->n_in >= 2 && l->in_shape[1].ndim == 2;
  g->mask = g->seg_q = g->seg_k = -1;
  if (k->segments && l->n_in >= 2) { /* [x, seg] or [q, mem, q_seg, k_seg] */
    g->seg_q = g->cross ? 2 : 1;
    g->seg_k = g->cross ? 3 : 1;
  } else if (!k->segments) {
    g->mask = l->n_in == 3 ? 2 : (l->n_in == 2 && !g->cross ? 1 : -1);
  }
  g->tq = l->in_shape[0].d[0];
  g->tk = l->in_shape[g->cross ? 1 : 0].d[0];
  g->d = l->in_shape[0].d[1];
  g->h = k->heads;
  g->dh = g->d / g->h;
}

/* mask: segments: [x, seg] or [q, mem, q_seg, k_seg], each seg I32 with one id per query or
 * per key (the keys/values input itself is checked with the padding form's). */
static gp_status check_segment_inputs(const gp_layer *l, const geo *g) {
  char b1[GP_LAYER_SHAPE_STR];
  if (l->n_in != 2 && l->n_in != 4)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with mask: segments takes from: [x, seg] (self-attention) or "
                  "[q, mem, q_seg, k_seg] (cross-attention), got %d input%s",
                  l->n_in, l->n_in == 1 ? "" : "s");
  if (l->n_in == 2 && g->cross)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with mask: segments and 2 inputs is self-attention [x, seg]: input 2 "
                  "must be the segment ids i32 [%lld], got %s %s; cross-attention takes "
                  "[q, mem, q_seg, k_seg]",
                  (long long)g->tq, gp_dtype_spec_name(l->in_dtype[1]),
                  gp_layers_shape_str(&l->in_shape[1], b1));
  if (l->n_in == 4 && !g->cross)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with mask: segments and 4 inputs is cross-attention "
                  "[q, mem, q_seg, k_seg]: input 2 must be keys/values [Tk, dim], got %s %s",
                  gp_dtype_spec_name(l->in_dtype[1]), gp_layers_shape_str(&l->in_shape[1], b1));
  const int ix[2] = {g->seg_q, g->seg_k};
  const int64_t len[2] = {g->tq, g->tk};
  for (int s = 0; s < (g->cross ? 2 : 1); s++) {
    const gp_shape *m = &l->in_shape[ix[s]];
    if (m->ndim != 1 || m->d[0] != len[s] || l->in_dtype[ix[s]] != GP_I32)
      return GP_ERR(GP_ERR_SPEC,
                    "attention: with mask: segments, input %d must be the segment ids of the %s, "
                    "i32 [%lld] (0 = padding, 1, 2, ... = sentence), got %s %s",
                    ix[s] + 1,
                    !g->cross ? "tokens"
                    : s == 0  ? "queries"
                              : "keys",
                    (long long)len[s], gp_dtype_spec_name(l->in_dtype[ix[s]]),
                    gp_layers_shape_str(m, b1));
  }
  return GP_OK;
}

static gp_status attention_shape(gp_layer *l) {
  const attention_conf *k = l->conf;
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  const gp_shape *x = &l->in_shape[0];
  l->n_params = 0;
  if (x->ndim != 2 || l->in_dtype[0] != GP_F32)
    return GP_ERR(GP_ERR_SPEC, "attention expects f32 queries [T, dim], got %s %s",
                  gp_dtype_spec_name(l->in_dtype[0]), gp_layers_shape_str(x, b1));
  geo g;
  geometry(l, &g);
  if (k->segments) GP_TRY(check_segment_inputs(l, &g));
  if (!k->segments && l->n_in == 4)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with 4 inputs takes queries, keys/values and the segment ids of "
                  "both (from: [q, mem, q_seg, k_seg]) and needs mask: segments");
  if (l->n_in == 3 && !g.cross)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with 3 inputs takes queries [Tq, dim], keys/values [Tk, dim] and a "
                  "mask [Tk]; input 2 is %s",
                  gp_layers_shape_str(&l->in_shape[1], b1));
  if (g.cross && (l->in_dtype[1] != GP_F32 || l->in_shape[1].d[1] != g.d))
    return GP_ERR(GP_ERR_SPEC,
                  "attention: keys/values must be f32 [Tk, %lld] like the queries %s, got %s %s",
                  (long long)g.d, gp_layers_shape_str(x, b1), gp_dtype_spec_name(l->in_dtype[1]),
                  gp_layers_shape_str(&l->in_shape[1], b2));
  if (g.mask >= 0) {
    const gp_shape *m = &l->in_shape[g.mask];
    gp_dtype mt = l->in_dtype[g.mask];
    if (m->ndim != 1 || m->d[0] != g.tk || (mt != GP_F32 && mt != GP_I32))
      return GP_ERR(GP_ERR_SPEC,
                    "attention: the key-padding mask (input %d) must be f32 or i32 [%lld], one "
                    "value per key, got %s %s",
                    g.mask + 1, (long long)g.tk, gp_dtype_spec_name(mt),
                    gp_layers_shape_str(m, b1));
  }
  if (k->dim && k->dim != g.d)
    return GP_ERR(GP_ERR_SPEC, "attention: dim %lld does not match the input %s", (long long)k->dim,
                  gp_layers_shape_str(x, b1));
  if (g.d % g.h)
    return GP_ERR(GP_ERR_SPEC, "attention: dim %lld of the input %s is not divisible by %lld heads",
                  (long long)g.d, gp_layers_shape_str(x, b1), (long long)g.h);
  GP_TRY(gp_layers_set_out(l, x));
  int64_t wd[2] = {3 * g.d, g.d}, od[2] = {g.d, g.d}, bd = 3 * g.d;
  gp_shape ws = gp_shape_of(2, wd), bs = gp_shape_of(1, &bd);
  gp_shape os = gp_shape_of(2, od), obs = gp_shape_of(1, &g.d);
  GP_TRY(gp_layers_add_param(l, "in_proj_weight", &ws, GP_INIT_XAVIER_UNIFORM, g.d, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "in_proj_bias", &bs, GP_INIT_ZEROS, g.d, 1));
  GP_TRY(gp_layers_add_param(l, "out_proj.weight", &os, GP_INIT_UNIFORM_FAN_IN, g.d, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "out_proj.bias", &obs, GP_INIT_ZEROS, g.d, 1));
  return GP_OK;
}

static void attention_cost(const gp_layer *l, gp_cost *c) {
  const attention_conf *k = l->conf;
  geo g;
  geometry(l, &g);
  double tq = (double)g.tq, tk = (double)g.tk, d = (double)g.d, h = (double)g.h;
  double proj = 2.0 * tq * d * d + 2.0 * tk * d * 2.0 * d + 2.0 * tq * d * d; /* q, kv, out */
  double att = 2.0 * 2.0 * tq * tk * d;                                       /* QK^T, PV */
  double soft = 5.0 * h * tq * tk + (k->dropout > 0 ? h * tq * tk : 0.0);
  c->fwd_flops = proj + att + soft;
  c->bwd_flops = 2.0 * (proj + att) + 2.0 * soft;
  c->bwd_data_flops = 2.0 * tq * d * d + 2.0 * tk * d * 2.0 * d; /* the q and kv projections */
  c->params = 4 * g.d * g.d + (k->bias ? 4 * g.d : 0);
  /* Q, K, V, the probabilities and the context */
  c->saved_bytes = 4 * (g.tq * g.d + 2 * g.tk * g.d + g.h * g.tq * g.tk + g.tq * g.d);
  c->out_bytes = g.tq * g.d * 4;
  c->w_bytes = 4 * (g.tq * g.d + 2 * g.tk * g.d); /* d(projections), held from B to W */
}

/* Which param index holds what (the biases are absent without bias). */
static void param_ix(const gp_layer *l, int *w_in, int *b_in, int *w_out, int *b_out) {
  const attention_conf *k = l->conf;
  *w_in = 0;
  *b_in = k->bias ? 1 : -1;
  *w_out = k->bias ? 2 : 1;
  *b_out = k->bias ? 3 : -1;
}

static int dropout_on(const attention_conf *k, const gp_exec *e) {
  return e->training && k->dropout > 0.0;
}

/* The mask counter of the first probability of this micro-batch, as dropout.c does it. */
static uint64_t mask_offset(const geo *g, const gp_exec *e) {
  return (uint64_t)e->sample_offset * (uint64_t)(g->h * g->tq * g->tk);
}

static gp_status attention_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  const attention_conf *k = l->conf;
  gp_backend *be = e->be;
  geo g;
  geometry(l, &g);
  int w_in, b_in, w_out, b_out;
  param_ix(l, &w_in, &b_in, &w_out, &b_out);
  const int64_t nb = in[0].shape.d[0], d = g.d, dh = g.dh, H = g.h, tq = g.tq, tk = g.tk;
  const int64_t rq = nb * tq, rk = nb * tk, nscore = nb * H * tq * tk;
  const float *W = e->bind->param[w_in], *bw = b_in >= 0 ? e->bind->param[b_in] : NULL;
  const float *xq = GP_F32P(&in[0]);
  attn_saved *s;
  GP_TRY(gp_arena_alloc(e->arena, sizeof *s, (void **)&s));
  s->dqkv = NULL;
  size_t nproj = (size_t)(g.cross ? rq * d + rk * 2 * d : rq * 3 * d);
  GP_TRY(gp_arena_alloc(e->arena, nproj * sizeof(float), (void **)&s->qkv));
  GP_TRY(gp_arena_alloc(e->arena, (size_t)nscore * sizeof(float), (void **)&s->p));
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(rq * d) * sizeof(float), (void **)&s->ctx));

  /* Projections: one GEMM for Q, K and V together (self), or Q and then K, V (cross). */
  if (!g.cross) {
    GP_TRY(be->gemm(be, 0, 1, rq, 3 * d, d, 1.0f, xq, d, W, d, 0.0f, s->qkv, 3 * d));
    if (bw) GP_TRY(be->bias_add(be, rq, 3 * d, 1, bw, s->qkv));
    s->ldq = s->ldk = 3 * d;
    s->q = s->qkv;
    s->k = s->qkv + d;
    s->v = s->qkv + 2 * d;
  } else {
    float *kv = s->qkv + rq * d;
    GP_TRY(be->gemm(be, 0, 1, rq, d, d, 1.0f, xq, d, W, d, 0.0f, s->qkv, d));
    GP_TRY(
        be->gemm(be, 0, 1, rk, 2 * d, d, 1.0f, GP_F32P(&in[1]), d, W + d * d, d, 0.0f, kv, 2 * d));
    if (bw) {
      GP_TRY(be->bias_add(be, rq, d, 1, bw, s->qkv));
      GP_TRY(be->bias_add(be, rk, 2 * d, 1, bw + d, kv));
    }
    s->ldq = d;
    s->ldk = 2 * d;
    s->q = s->qkv;
    s->k = kv;
    s->v = kv + d;
  }

  /* Scores scaled by 1/sqrt(dh), the masked softmax over all (sample, head) rows at once. */
  const float scale = (float)(1.0 / sqrt((double)dh));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm(be, 0, 1, tq, tk, dh, scale, s->q + b * tq * s->ldq + h * dh, s->ldq,
                      s->k + b * tk * s->ldk + h * dh, s->ldk, 0.0f, s->p + (b * H + h) * tq * tk,
                      tk));
  gp_attn_softmax_desc sd = {nb, H, tq, tk, k->causal, NULL, NULL, NULL, NULL};
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
  GP_TRY(be->attn_softmax_forward(be, &sd, s->p, s->p));
  const float *pd = s->p;
  if (dropout_on(k, e)) {
    float *tmp;
    GP_TRY(be->scratch(be, (size_t)nscore * sizeof(float), (void **)&tmp));
    GP_TRY(be->dropout_forward(be, nscore, (float)k->dropout, gp_layer_rng_key(l, e),
                               mask_offset(&g, e), s->p, tmp));
    pd = tmp;
  }

  /* Each head's context into its columns of ctx, then the output projection. */
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm(be, 0, 0, tq, dh, tk, 1.0f, pd + (b * H + h) * tq * tk, tk,
                      s->v + b * tk * s->ldk + h * dh, s->ldk, 0.0f, s->ctx + b * tq * d + h * dh,
                      d));
  GP_TRY(be->gemm(be, 0, 1, rq, d, d, 1.0f, s->ctx, d, e->bind->param[w_out], d, 0.0f, GP_F32P(out),
                  d));
  if (b_out >= 0) GP_TRY(be->bias_add(be, rq, d, 1, e->bind->param[b_out], GP_F32P(out)));
  *saved = s;
  return GP_OK;
}

/* The output projection's parameter gradients from dy and the saved context: weight +=, the
 * bias summed into gbias + 3d (zeroed by the caller). */
static gp_status out_proj_grads(const gp_layer *l, gp_exec *e, const attn_saved *s, int64_t rq,
                                int64_t d, const float *dy, float *gbias) {
  gp_backend *be = e->be;
  int w_in, b_in, w_out, b_out;
  param_ix(l, &w_in, &b_in, &w_out, &b_out);
  GP_TRY(be->gemm(be, 1, 0, d, d, rq, 1.0f, dy, d, s->ctx, d, 1.0f, e->bind->grad[w_out], d));
  if (b_out >= 0) GP_TRY(be->bias_grad(be, rq, d, 1, dy, gbias + 3 * d));
  return GP_OK;
}

/* The input projections' parameter gradients from dqkv and the inputs, then the biases
 * summed in gbias added to theirs. */
static gp_status in_proj_grads(const gp_layer *l, gp_exec *e, const geo *g, const attn_saved *s,
                               const gp_tensor *in, int64_t rq, int64_t rk, const float *dqkv,
                               float *gbias) {
  gp_backend *be = e->be;
  const int64_t d = g->d;
  int w_in, b_in, w_out, b_out;
  param_ix(l, &w_in, &b_in, &w_out, &b_out);
  float *gw = e->bind->grad[w_in], *gb = b_in >= 0 ? gbias : NULL;
  const float *xq = GP_F32P(&in[0]);
  if (!g->cross) {
    GP_TRY(be->gemm(be, 1, 0, 3 * d, d, rq, 1.0f, dqkv, 3 * d, xq, d, 1.0f, gw, d));
    if (gb) GP_TRY(be->bias_grad(be, rq, 3 * d, 1, dqkv, gb));
  } else {
    const float *xkv = GP_F32P(&in[1]), *dq = dqkv, *dkv = dqkv + (s->k - s->qkv);
    GP_TRY(be->gemm(be, 1, 0, d, d, rq, 1.0f, dq, d, xq, d, 1.0f, gw, d));
    GP_TRY(be->gemm(be, 1, 0, 2 * d, d, rk, 1.0f, dkv, 2 * d, xkv, d, 1.0f, gw + d * d, d));
    if (gb) {
      GP_TRY(be->bias_grad(be, rq, d, 1, dq, gb));
      GP_TRY(be->bias_grad(be, rk, 2 * d, 1, dkv, gb + d));
    }
  }
  if (gb) {
    /* the key bias moves every score of a query's row by the same q . b: softmax ignores it,
     * so its gradient is exactly 0; summed, it is rounding noise that Adam (eps 1e-9) would
     * turn into lr-sized steps differing with K and M */
    GP_TRY(be->zero(be, gbias + d, (size_t)d * sizeof(float)));
    GP_TRY(be->axpby(be, 3 * d, 1.0f, gbias, 1.0f, e->bind->grad[b_in]));
    GP_TRY(be->axpby(be, d, 1.0f, gbias + 3 * d, 1.0f, e->bind->grad[b_out]));
  }
  return GP_OK;
}

/* W reads dy, the saved context, the inputs and the projection gradients B kept. */
static gp_status attention_backward_weight(const gp_layer *l, gp_exec *e, const geo *g,
                                           const attn_saved *s, const gp_tensor *in,
                                           const float *dy) {
  if (!s->dqkv)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: weight gradients before the input half", l->path);
  const int64_t nb = in[0].shape.d[0], d = g->d, rq = nb * g->tq, rk = nb * g->tk;
  float *gbias;
  GP_TRY(e->be->scratch(e->be, (size_t)(4 * d) * sizeof(float), (void **)&gbias));
  int w_in, b_in, w_out, b_out;
  param_ix(l, &w_in, &b_in, &w_out, &b_out);
  if (b_in >= 0) GP_TRY(e->be->zero(e->be, gbias, (size_t)(4 * d) * sizeof(float)));
  GP_TRY(out_proj_grads(l, e, s, rq, d, dy, gbias));
  return in_proj_grads(l, e, g, s, in, rq, rk, s->dqkv, gbias);
}

static gp_status attention_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  const attention_conf *k = l->conf;
  gp_backend *be = e->be;
  attn_saved *s = saved;
  if (!s) return GP_ERR(GP_ERR_RUNTIME, "attention %s: backward without its forward", l->path);
  geo g;
  geometry(l, &g);
  int w_in, b_in, w_out, b_out;
  param_ix(l, &w_in, &b_in, &w_out, &b_out);
  const int64_t nb = in[0].shape.d[0], d = g.d, dh = g.dh, H = g.h, tq = g.tq, tk = g.tk;
  const int64_t rq = nb * tq, rk = nb * tk, nscore = nb * H * tq * tk;
  const int drop = dropout_on(k, e), wg = gp_exec_weight_grads(e);
  const float *dy = GP_F32P(dout), *W = e->bind->param[w_in];
  const float scale = (float)(1.0 / sqrt((double)dh));
  if (e->grad_part == GP_GRAD_WEIGHT) return attention_backward_weight(l, e, &g, s, in, dy);

  /* Scratch: the bias gradients of this pass [4d], dctx [rq, d], d(projections) laid out like
   * s->qkv, dP, and for dropout the dropped probabilities (recomputed from the mask function)
   * and dP before dropout. B alone keeps d(projections) for its W in the arena instead. */
  size_t nproj = (size_t)(g.cross ? rq * d + rk * 2 * d : rq * 3 * d);
  size_t total = (size_t)(4 * d + rq * d) + nproj + (size_t)nscore * (drop ? 3 : 1);
  float *gbias;
  GP_TRY(be->scratch(be, total * sizeof(float), (void **)&gbias));
  float *dctx = gbias + 4 * d, *dqkv = dctx + rq * d, *dp = dqkv + nproj;
  float *pd = drop ? dp + nscore : s->p, *dpd = drop ? dp + 2 * nscore : dp;
  if (!wg) {
    GP_TRY(gp_arena_alloc(e->arena, nproj * sizeof(float), (void **)&s->dqkv));
    dqkv = s->dqkv;
  }
  /* Bias gradients are summed here from 0 and then added (the key bias's set to its exact 0
   * in in_proj_grads). */
  if (b_in >= 0 && wg) GP_TRY(be->zero(be, gbias, (size_t)(4 * d) * sizeof(float)));
  float *dq = dqkv, *dk = dqkv + (s->k - s->qkv), *dv = dqkv + (s->v - s->qkv);

  /* Output projection. */
  if (wg) GP_TRY(out_proj_grads(l, e, s, rq, d, dy, gbias));
  GP_TRY(be->gemm(be, 0, 0, rq, d, d, 1.0f, dy, d, e->bind->param[w_out], d, 0.0f, dctx, d));

  /* Through P V: dP (after dropout) and dV per head. */
  if (drop)
    GP_TRY(be->dropout_forward(be, nscore, (float)k->dropout, gp_layer_rng_key(l, e),
                               mask_offset(&g, e), s->p, pd));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *dc = dctx + b * tq * d + h * dh;
      int64_t sc = (b * H + h) * tq * tk, kvo = b * tk * s->ldk + h * dh;
      GP_TRY(be->gemm(be, 0, 1, tq, tk, dh, 1.0f, dc, d, s->v + kvo, s->ldk, 0.0f, dpd + sc, tk));
      GP_TRY(be->gemm(be, 1, 0, tk, dh, tq, 1.0f, pd + sc, tk, dc, d, 0.0f, dv + kvo, s->ldk));
    }
  if (drop)
    GP_TRY(be->dropout_backward(be, nscore, (float)k->dropout, gp_layer_rng_key(l, e),
                                mask_offset(&g, e), dpd, dp));
  /* Through the softmax (masked entries have P = 0, so they get no gradient), then Q K^T. */
  GP_TRY(be->softmax_backward(be, nb * H * tq, tk, s->p, dp, dp));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t sc = (b * H + h) * tq * tk, qo = b * tq * s->ldq + h * dh,
              kvo = b * tk * s->ldk + h * dh;
      GP_TRY(be->gemm(be, 0, 0, tq, dh, tk, scale, dp + sc, tk, s->k + kvo, s->ldk, 0.0f, dq + qo,
                      s->ldq));
      GP_TRY(be->gemm(be, 1, 0, tk, dh, tq, scale, dp + sc, tk, s->q + qo, s->ldq, 0.0f, dk + kvo,
                      s->ldk));
    }

  /* Input projections: weight and bias gradients, then the inputs'. */
  if (wg) GP_TRY(in_proj_grads(l, e, &g, s, in, rq, rk, dqkv, gbias));
  if (!g.cross) {
    if (din[0].data)
      GP_TRY(be->gemm(be, 0, 0, rq, d, 3 * d, 1.0f, dqkv, 3 * d, W, d, 0.0f, GP_F32P(&din[0]), d));
  } else {
    float *dkv = dk;
    if (din[0].data)
      GP_TRY(be->gemm(be, 0, 0, rq, d, d, 1.0f, dq, d, W, d, 0.0f, GP_F32P(&din[0]), d));
    if (din[1].data)
      GP_TRY(be->gemm(be, 0, 0, rk, d, 2 * d, 1.0f, dkv, 2 * d, W + d * d, d, 0.0f,
                      GP_F32P(&din[1]), d));
  }
  /* A mask or segment ids are piecewise constant: their gradient is 0. */
  const int consts[3] = {g.mask, g.seg_q, g.seg_k};
  for (int c = 0; c < 3; c++)
    if (consts[c] >= 0 && din[consts[c]].data)
      GP_TRY(be->zero(be, din[consts[c]].data, gp_tensor_bytes(&din[consts[c]])));
  return GP_OK;
}

const gp_layer_type gp_layer_attention = {
    .name = "attention",
    .doc = "multi-head scaled dot-product attention with its projections (PyTorch's "
           "`nn.MultiheadAttention`)",
    .min_inputs = 1,
    .max_inputs = 4,
    .conf_size = sizeof(attention_conf),
    GP_LAYER_SETTINGS(attention_settings),
    .configure = attention_configure,
    .shape = attention_shape,
    .cost = attention_cost,
    .forward = attention_forward,
    .backward = attention_backward,
};
