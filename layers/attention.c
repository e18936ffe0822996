/* attention: multi-head scaled dot-product attention with its projections, as PyTorch's
 * nn.MultiheadAttention(dim, heads, bias=, dropout=, batch_first=True) and with its parameter
 * names (in_proj_weight [3 dim, dim], in_proj_bias, out_proj.weight, out_proj.bias); with
 * kv_heads and rope, as Hugging Face's LlamaAttention (docs/attention.md maps the weights).
 *
 * kv_heads < heads (grouped-query attention): keys and values have kv_heads heads of
 * dh = dim / heads, query head h reading key/value head h / (heads / kv_heads); in_proj_weight
 * is then [(heads + 2 kv_heads) dh, dim], the rows of Q, then K, then V. rope: {theta: b}
 * turns each head of Q and K after the projections (and biases) by the angles
 * pos * b^(-2i/dh), pairing a head's halves (transformers' rotate_half); positions come from an
 * i32 input [Tq], so packed rows restart them per sentence. The rotated Q and K are what
 * forward keeps; backward recomputes the angles from the positions.
 *
 * inputs: [query, memory, mask, segments, key_segments, pos] (in from:'s order, query first)
 * names what each input is. Without it, inputs are told apart by rank: queries [Tq, dim];
 * optionally keys/values [Tk, dim] (cross-attention; without it, self-attention over the queries);
 * then, with mask: padding (the default), optionally a key-padding mask [Tk], f32 or i32, 1 = a
 * real token, 0 = padding (the inverse of PyTorch's boolean key_padding_mask, where True means
 * "ignore"). With mask: segments the rows are packed (several sentences per row, as Lingvo's packed
 * inputs and T5): after the F32 inputs come I32 segment ids (0 = padding, 1, 2, ... = which
 * sentence of the row), [x, seg] for self-attention or [q, mem, q_seg, k_seg] for cross-attention,
 * and query i attends key j only when k_seg[j] is not 0 and equals q_seg[i], so each sentence sees
 * only itself. causal: true masks key j > i for query i (as PyTorch's
 * attn_mask = triu(ones(Tq, Tk), 1)). A query whose keys are all masked (a padding query of a
 * packed row, seg 0, among them) attends to nothing: its context is 0, so its output is
 * out_proj.bias, and no NaN appears. Dropout on the attention probabilities uses the dropout
 * layer's counter-based masks (a recompute reproduces them; M does not change them).
 *
 * Per (sample, head) the products are GEMMs on strided views of the projections, so nothing
 * is transposed or copied: head h of Q is columns [h dh, (h+1) dh) of the [T, 3 dim] block. */
#include <math.h>

#include "layers/attention.h"

/* What an input is (the names of `inputs:`). */
enum role { R_QUERY, R_MEMORY, R_MASK, R_SEGMENTS, R_KEY_SEGMENTS, R_POS, R_COUNT };
static const char *const role_names[] = {"query",        "memory", "mask", "segments",
                                         "key_segments", "pos",    NULL};

static const gp_setting attention_settings[] = {
    {.key = "heads",
     GP_SETTING_INT_AT(gp_attn_conf, heads),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "number of heads; must divide dim"},
    {.key = "dim",
     GP_SETTING_INT_AT(gp_attn_conf, dim),
     .idflt = 0,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .dflt_doc = "the input's",
     .doc = "model width; when given, it must equal the last dimension of the queries"},
    {.key = "bias",
     GP_SETTING_BOOL_AT(gp_attn_conf, bias),
     .idflt = 1,
     .doc = "biases of the input and output projections"},
    {.key = "causal",
     GP_SETTING_BOOL_AT(gp_attn_conf, causal),
     .idflt = 0,
     .doc = "query i may not attend to key j > i"},
    {.key = "mask",
     GP_SETTING_CHOICE_AT(gp_attn_conf, segments),
     .choices = (const char *const[]){"padding", "segments", NULL},
     .idflt = 0,
     .doc = "without `inputs:`, the i32 inputs after the f32 ones: `padding`, a key-padding mask; "
            "`segments`, the segment ids of packed rows"},
    {.key = "dropout",
     GP_SETTING_FLOAT_AT(gp_attn_conf, dropout),
     .fdflt = 0,
     .range = GP_RANGE_BELOW_ONE,
     .doc = "dropout on the attention probabilities while training"},
    {.key = "kv_heads",
     GP_SETTING_INT_AT(gp_attn_conf, kv_heads),
     .idflt = 0,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .dflt_doc = "heads",
     .doc = "key/value heads, each shared by heads / kv_heads query heads (grouped-query "
            "attention; 1: multi-query); heads must be a multiple of it"},
    {.key = "rope.theta",
     GP_SETTING_FLOAT_AT(gp_attn_conf, theta),
     GP_SETTING_HAS_AT(gp_attn_conf, rope),
     .range = GP_RANGE_POSITIVE,
     .doc = "written `rope: {theta: 10000}`: rotary position embedding of queries and keys "
            "(Llama's layout) with this base, positions from the `pos` input"},
    {.key = "inputs",
     GP_SETTING_CHOICES_AT(gp_attn_conf, roles, n_roles),
     .choices = role_names,
     .dflt_doc = "told apart by rank and count",
     .doc = "what from:'s inputs are, in its order, query first: `[query, pos, segments]`; "
            "memory: the keys/values of cross-attention, mask: a key-padding mask, segments / "
            "key_segments: the segment ids of packed queries / keys, pos: rope's positions"},
};

static gp_status attention_configure(gp_layer *l, gp_cfg *cfg) {
  gp_attn_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->dim && k->dim % k->heads)
    return gp_cfg_error(cfg, "heads", "heads: dim %lld is not divisible by %lld heads",
                        (long long)k->dim, (long long)k->heads);
  if (k->kv_heads && k->heads % k->kv_heads)
    return gp_cfg_error(cfg, "kv_heads",
                        "kv_heads: %lld heads are not a multiple of %lld kv_heads (each key/value "
                        "head serves heads / kv_heads query heads)",
                        (long long)k->heads, (long long)k->kv_heads);
  int seen[R_COUNT] = {0};
  for (int i = 0; i < k->n_roles; i++) {
    if (seen[k->roles[i]]++)
      return gp_cfg_error_item(cfg, "inputs", i, "inputs: '%s' is named twice",
                               role_names[k->roles[i]]);
    if ((i == 0) != (k->roles[i] == R_QUERY))
      return gp_cfg_error_item(cfg, "inputs", i,
                               "inputs: the first input is the query, and only "
                               "the first (from:'s first tensor)");
  }
  if (k->n_roles && seen[R_MASK] && (seen[R_SEGMENTS] || seen[R_KEY_SEGMENTS] || k->segments))
    return gp_cfg_error(cfg, "inputs",
                        "inputs: a key-padding mask and segment ids together: a packed row's "
                        "padding is its segment id 0");
  if (k->n_roles && seen[R_KEY_SEGMENTS] && (!seen[R_MEMORY] || !seen[R_SEGMENTS]))
    return gp_cfg_error(cfg, "inputs", "inputs: key_segments needs memory and segments");
  if (k->n_roles && seen[R_MEMORY] && seen[R_SEGMENTS] && !seen[R_KEY_SEGMENTS])
    return gp_cfg_error(cfg, "inputs",
                        "inputs: cross-attention with segments needs key_segments (the memory's)");
  if (k->n_roles && !k->rope != !seen[R_POS])
    return gp_cfg_error(cfg, "inputs", "inputs: %s",
                        k->rope ? "rope needs the positions: name one input pos"
                                : "pos is read only with rope: {theta: ...}");
  if (k->n_roles && k->segments && !seen[R_SEGMENTS])
    return gp_cfg_error(cfg, "mask", "mask: segments, but inputs: names no segments");
  if (k->n_roles && seen[R_SEGMENTS]) k->segments = 1;
  return GP_OK;
}

void gp_attn_geometry(const gp_layer *l, gp_attn_geo *g) {
  const gp_attn_conf *k = l->conf;
  int kv = -1;
  g->mask = g->seg_q = g->seg_k = g->pos = -1;
  if (k->n_roles) { /* named */
    int *at[R_COUNT] = {NULL, &kv, &g->mask, &g->seg_q, &g->seg_k, &g->pos};
    for (int i = 1; i < k->n_roles && i < l->n_in; i++)
      *at[k->roles[i]] = i;
    if (g->seg_q >= 0 && kv < 0) g->seg_k = g->seg_q;
    g->cross = kv >= 0;
    g->n = l->n_in - (g->pos >= 0);
    g->kv = kv;
  } else { /* told apart by rank and count; with rope the positions come last */
    g->pos = k->rope && l->n_in >= 2 ? l->n_in - 1 : -1;
    g->n = l->n_in - (g->pos >= 0);
    g->cross = g->n >= 2 && l->in_shape[1].ndim == 2;
    kv = g->kv = g->cross ? 1 : -1;
    if (k->segments && g->n >= 2) { /* [x, seg] or [q, mem, q_seg, k_seg] */
      g->seg_q = g->cross ? 2 : 1;
      g->seg_k = g->cross ? 3 : 1;
    } else if (!k->segments) {
      g->mask = g->n == 3 ? 2 : (g->n == 2 && !g->cross ? 1 : -1);
    }
  }
  g->tq = l->in_shape[0].d[0];
  g->tk = l->in_shape[g->cross ? kv : 0].d[0];
  g->d = l->in_shape[0].d[1];
  g->h = k->heads;
  g->dh = g->d / g->h;
  g->kvh = k->kv_heads ? k->kv_heads : k->heads;
  g->dkv = g->kvh * g->dh;
  g->nqkv = g->d + 2 * g->dkv;
}

/* mask: segments: [x, seg] or [q, mem, q_seg, k_seg], each seg I32 with one id per query or
 * per key (the keys/values input itself is checked with the padding form's). */
static gp_status check_segment_inputs(const gp_layer *l, const gp_attn_geo *g) {
  char b1[GP_LAYER_SHAPE_STR];
  if (g->n != 2 && g->n != 4)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with mask: segments takes from: [x, seg] (self-attention) or "
                  "[q, mem, q_seg, k_seg] (cross-attention)%s, got %d input%s",
                  g->pos >= 0 ? ", then the positions" : "", l->n_in, l->n_in == 1 ? "" : "s");
  if (g->n == 2 && g->cross)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with mask: segments and 2 inputs is self-attention [x, seg]: input 2 "
                  "must be the segment ids i32 [%lld], got %s %s; cross-attention takes "
                  "[q, mem, q_seg, k_seg]",
                  (long long)g->tq, gp_dtype_spec_name(l->in_dtype[1]),
                  gp_layers_shape_str(&l->in_shape[1], b1));
  if (g->n == 4 && !g->cross)
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

/* inputs: named: as many as from: gives, each of its role's dtype and shape. */
static gp_status check_named_inputs(const gp_layer *l, const gp_attn_geo *g) {
  const gp_attn_conf *k = l->conf;
  char b1[GP_LAYER_SHAPE_STR];
  if (k->n_roles != l->n_in)
    return GP_ERR(GP_ERR_SPEC, "attention: inputs: names %d input%s, from: gives %d", k->n_roles,
                  k->n_roles == 1 ? "" : "s", l->n_in);
  for (int i = 1; i < l->n_in; i++) {
    const int r = k->roles[i];
    const int64_t len = r == R_MASK || r == R_KEY_SEGMENTS ? g->tk : g->tq;
    const gp_shape *m = &l->in_shape[i];
    const gp_dtype dt = l->in_dtype[i];
    if (r == R_MEMORY) continue; /* checked with the unnamed form's */
    if (m->ndim != 1 || m->d[0] != len || (dt != GP_I32 && !(r == R_MASK && dt == GP_F32)))
      return GP_ERR(GP_ERR_SPEC, "attention: input %d (%s) must be %s [%lld], got %s %s", i + 1,
                    role_names[r], r == R_MASK ? "f32 or i32" : "i32", (long long)len,
                    gp_dtype_spec_name(dt), gp_layers_shape_str(m, b1));
  }
  return GP_OK;
}

static gp_status attention_shape(gp_layer *l) {
  const gp_attn_conf *k = l->conf;
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  const gp_shape *x = &l->in_shape[0];
  l->n_params = 0;
  if (x->ndim != 2 || l->in_dtype[0] != GP_F32)
    return GP_ERR(GP_ERR_SPEC, "attention expects f32 queries [T, dim], got %s %s",
                  gp_dtype_spec_name(l->in_dtype[0]), gp_layers_shape_str(x, b1));
  gp_attn_geo g;
  gp_attn_geometry(l, &g);
  if (k->n_roles) GP_TRY(check_named_inputs(l, &g));
  if (k->segments && !k->n_roles) GP_TRY(check_segment_inputs(l, &g));
  if (!k->segments && g.n == 4)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with 4 inputs takes queries, keys/values and the segment ids of "
                  "both (from: [q, mem, q_seg, k_seg]) and needs mask: segments");
  if (g.n == 3 && !g.cross)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with 3 inputs takes queries [Tq, dim], keys/values [Tk, dim] and a "
                  "mask [Tk]; input 2 is %s",
                  gp_layers_shape_str(&l->in_shape[1], b1));
  if (g.cross &&
      (l->in_shape[g.kv].ndim != 2 || l->in_dtype[g.kv] != GP_F32 || l->in_shape[g.kv].d[1] != g.d))
    return GP_ERR(GP_ERR_SPEC,
                  "attention: keys/values must be f32 [Tk, %lld] like the queries %s, got %s %s",
                  (long long)g.d, gp_layers_shape_str(x, b1), gp_dtype_spec_name(l->in_dtype[g.kv]),
                  gp_layers_shape_str(&l->in_shape[g.kv], b2));
  if (k->rope && g.pos < 0)
    return GP_ERR(GP_ERR_SPEC,
                  "attention with rope needs the positions, i32 [%lld]: from: [x, "
                  "..., pos] (the last input), or named in inputs:",
                  (long long)g.tq);
  if (g.pos >= 0 && g.cross)
    return GP_ERR(GP_ERR_SPEC, "attention: rope is for self-attention; cross-attention's keys "
                               "would need positions of their own");
  if (g.pos >= 0 && (l->in_shape[g.pos].ndim != 1 || l->in_shape[g.pos].d[0] != g.tq ||
                     l->in_dtype[g.pos] != GP_I32))
    return GP_ERR(
        GP_ERR_SPEC,
        "attention: the positions (input %d) must be i32 [%lld], one per token, got %s %s",
        g.pos + 1, (long long)g.tq, gp_dtype_spec_name(l->in_dtype[g.pos]),
        gp_layers_shape_str(&l->in_shape[g.pos], b1));
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
  if (k->rope && g.dh % 2)
    return GP_ERR(GP_ERR_SPEC,
                  "attention: rope pairs the halves of each head, but the head size %lld (dim "
                  "%lld / %lld heads) is odd",
                  (long long)g.dh, (long long)g.d, (long long)g.h);
  GP_TRY(gp_layers_set_out(l, x));
  int64_t wd[2] = {g.nqkv, g.d}, od[2] = {g.d, g.d}, bd = g.nqkv;
  gp_shape ws = gp_shape_of(2, wd), bs = gp_shape_of(1, &bd);
  gp_shape os = gp_shape_of(2, od), obs = gp_shape_of(1, &g.d);
  GP_TRY(gp_layers_add_param(l, "in_proj_weight", &ws, GP_INIT_XAVIER_UNIFORM, g.d, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "in_proj_bias", &bs, GP_INIT_ZEROS, g.d, 1));
  GP_TRY(gp_layers_add_param(l, "out_proj.weight", &os, GP_INIT_UNIFORM_FAN_IN, g.d, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "out_proj.bias", &obs, GP_INIT_ZEROS, g.d, 1));
  return GP_OK;
}

static void attention_cost(const gp_layer *l, gp_cost *c) {
  const gp_attn_conf *k = l->conf;
  gp_attn_geo g;
  gp_attn_geometry(l, &g);
  double tq = (double)g.tq, tk = (double)g.tk, d = (double)g.d, h = (double)g.h;
  double dkv = (double)g.dkv;
  double proj = 2.0 * tq * d * d + 2.0 * tk * d * 2.0 * dkv + 2.0 * tq * d * d; /* q, kv, out */
  double att = 2.0 * 2.0 * tq * tk * d; /* QK^T, PV: every query head */
  double soft = 5.0 * h * tq * tk + (k->dropout > 0 ? h * tq * tk : 0.0);
  /* rope: a pair's turn is 6 flops and its angle about 20 (pow, cos, sin), both per head */
  double rope = k->rope ? tq * (d + dkv) / 2.0 * 26.0 : 0.0;
  c->fwd_flops = proj + att + soft + rope;
  c->bwd_flops = 2.0 * (proj + att) + 2.0 * soft + rope;
  /* the q and kv projections (and rope's inverse turn, in B) */
  c->bwd_data_flops = 2.0 * tq * d * d + 2.0 * tk * d * 2.0 * dkv + rope;
  c->params = g.nqkv * g.d + g.d * g.d + (k->bias ? g.nqkv + g.d : 0);
  /* Q, K, V (Q and K rotated: rope keeps nothing more, backward turns its angles again from
   * the positions, an input), the probabilities and the context */
  c->saved_bytes = 4 * (g.tq * g.d + 2 * g.tk * g.dkv + g.h * g.tq * g.tk + g.tq * g.d);
  /* fused (bf16 on a GPU, no dropout, no segments): a log-sum-exp per row for the T x T */
  if (k->dropout == 0.0 && g.seg_q < 0)
    c->saved_bytes_fused = c->saved_bytes - 4 * g.h * g.tq * (g.tk - 1);
  c->out_bytes = g.tq * g.d * 4;
  c->w_bytes = 4 * (g.tq * g.d + 2 * g.tk * g.dkv); /* d(projections), held from B to W */
}

/* Which param index holds what (the biases are absent without bias). */
void gp_attn_param_ix(const gp_layer *l, int *w_in, int *b_in, int *w_out, int *b_out) {
  const gp_attn_conf *k = l->conf;
  *w_in = 0;
  *b_in = k->bias ? 1 : -1;
  *w_out = k->bias ? 2 : 1;
  *b_out = k->bias ? 3 : -1;
}

static int dropout_on(const gp_attn_conf *k, const gp_exec *e) {
  return e->training && k->dropout > 0.0;
}

/* The mask counter of the first probability of this micro-batch, as dropout.c does it. */
static uint64_t mask_offset(const gp_attn_geo *g, const gp_exec *e) {
  return (uint64_t)e->sample_offset * (uint64_t)(g->h * g->tq * g->tk);
}

/* The fused op's view of this micro-batch: the strided Q, K, V of s and the key-padding mask. */
static void sdpa_desc(const gp_attn_geo *g, const gp_attn_conf *k, const gp_exec *e,
                      const gp_tensor *in, int64_t nb, const gp_attn_saved *s, gp_sdpa_desc *sd) {
  *sd = (gp_sdpa_desc){.batch = nb,
                       .heads = g->h,
                       .kv_heads = g->kvh,
                       .tq = g->tq,
                       .tk = g->tk,
                       .dh = g->dh,
                       .ldq = s->ldq,
                       .ldkv = s->ldk,
                       .scale = (float)(1.0 / sqrt((double)g->dh)),
                       .causal = k->causal,
                       .training = e->training};
  if (g->mask >= 0 && in[g->mask].dtype == GP_I32) sd->keep_i32 = GP_I32P(&in[g->mask]);
  if (g->mask >= 0 && in[g->mask].dtype != GP_I32) sd->keep_f32 = GP_F32P(&in[g->mask]);
}

/* The context through the backend's fused attention (s->lse set) where it has one and takes
 * this call; dropout (its masks must come from the sample, as the plain path's) and packed
 * segments stay on the plain path. */
static gp_status try_fused_forward(const gp_layer *l, gp_exec *e, const gp_attn_geo *g,
                                   const gp_tensor *in, gp_attn_saved *s, int *fused) {
  const gp_attn_conf *k = l->conf;
  gp_backend *be = e->be;
  const int64_t nb = in[0].shape.d[0];
  *fused = 0;
  if (!be->sdpa_forward || be->precision == GP_PREC_FP32 || dropout_on(k, e) || g->seg_q >= 0)
    return GP_OK;
  gp_sdpa_desc sd;
  sdpa_desc(g, k, e, in, nb, s, &sd);
  float *lse;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(nb * g->h * g->tq) * sizeof(float), (void **)&lse));
  GP_TRY(be->sdpa_forward(be, &sd, s->q, s->k, s->v, s->ctx, lse, fused));
  if (*fused) s->lse = lse;
  return GP_OK;
}

static gp_status attention_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  const gp_attn_conf *k = l->conf;
  if (e->cache) return gp_attn_forward_cached(l, e, in, out, saved);
  gp_backend *be = e->be;
  gp_attn_geo g;
  gp_attn_geometry(l, &g);
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  const int64_t nb = in[0].shape.d[0], d = g.d, dh = g.dh, H = g.h, tq = g.tq, tk = g.tk;
  const int64_t rq = nb * tq, rk = nb * tk, nscore = nb * H * tq * tk, dkv = g.dkv, nq = g.nqkv;
  const int64_t grp = H / g.kvh; /* query heads per key/value head */
  const float *W = e->bind->param[w_in], *bw = b_in >= 0 ? e->bind->param[b_in] : NULL;
  const float *xq = GP_F32P(&in[0]);
  gp_attn_saved *s;
  GP_TRY(gp_arena_host_alloc(e->arena, sizeof *s, (void **)&s)); /* host: a struct of pointers */
  s->dqkv = NULL;
  size_t nproj = (size_t)(g.cross ? rq * d + rk * 2 * dkv : rq * nq);
  GP_TRY(gp_arena_alloc(e->arena, nproj * sizeof(float), (void **)&s->qkv));
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(rq * d) * sizeof(float), (void **)&s->ctx));

  /* Projections: one GEMM for Q, K and V together (self), or Q and then K, V (cross). */
  if (!g.cross) {
    GP_TRY(be->gemm(be, 0, 1, rq, nq, d, 1.0f, xq, d, W, d, 0.0f, s->qkv, nq));
    if (bw) GP_TRY(be->bias_add(be, rq, nq, 1, bw, s->qkv));
    s->ldq = s->ldk = nq;
    s->q = s->qkv;
    s->k = s->qkv + d;
    s->v = s->qkv + d + dkv;
    /* Q's heads and then K's lie side by side in each row: one turn for both */
    if (g.pos >= 0)
      GP_TRY(be->rope(be, rq, H + g.kvh, dh, nq, k->theta, GP_I32P(&in[g.pos]), 0, s->qkv));
  } else {
    float *kv = s->qkv + rq * d;
    GP_TRY(be->gemm(be, 0, 1, rq, d, d, 1.0f, xq, d, W, d, 0.0f, s->qkv, d));
    GP_TRY(be->gemm(be, 0, 1, rk, 2 * dkv, d, 1.0f, GP_F32P(&in[g.kv]), d, W + d * d, d, 0.0f, kv,
                    2 * dkv));
    if (bw) {
      GP_TRY(be->bias_add(be, rq, d, 1, bw, s->qkv));
      GP_TRY(be->bias_add(be, rk, 2 * dkv, 1, bw + d, kv));
    }
    s->ldq = d;
    s->ldk = 2 * dkv;
    s->q = s->qkv;
    s->k = kv;
    s->v = kv + dkv;
  }

  /* bf16 on a GPU: cuDNN's fused attention where it takes the shape (core/backend.h) */
  s->p = s->lse = NULL;
  int fused = 0;
  GP_TRY(try_fused_forward(l, e, &g, in, s, &fused));
  if (fused) goto out_proj;

  /* Scores scaled by 1/sqrt(dh), the masked softmax over all (sample, head) rows at once. */
  GP_TRY(gp_arena_alloc(e->arena, (size_t)nscore * sizeof(float), (void **)&s->p));
  const float scale = (float)(1.0 / sqrt((double)dh));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++)
      GP_TRY(be->gemm(be, 0, 1, tq, tk, dh, scale, s->q + b * tq * s->ldq + h * dh, s->ldq,
                      s->k + b * tk * s->ldk + h / grp * dh, s->ldk, 0.0f,
                      s->p + (b * H + h) * tq * tk, tk));
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
                      s->v + b * tk * s->ldk + h / grp * dh, s->ldk, 0.0f,
                      s->ctx + b * tq * d + h * dh, d));
out_proj:
  GP_TRY(be->gemm(be, 0, 1, rq, d, d, 1.0f, s->ctx, d, e->bind->param[w_out], d, 0.0f, GP_F32P(out),
                  d));
  if (b_out >= 0) GP_TRY(be->bias_add(be, rq, d, 1, e->bind->param[b_out], GP_F32P(out)));
  *saved = s;
  return GP_OK;
}

/* The output projection's parameter gradients from dy and the saved context: weight +=, the
 * bias summed into gbias + nqkv (zeroed by the caller). */
static gp_status out_proj_grads(const gp_layer *l, gp_exec *e, const gp_attn_geo *g,
                                const gp_attn_saved *s, int64_t rq, const float *dy, float *gbias) {
  gp_backend *be = e->be;
  const int64_t d = g->d;
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  GP_TRY(be->gemm(be, 1, 0, d, d, rq, 1.0f, dy, d, s->ctx, d, 1.0f, e->bind->grad[w_out], d));
  if (b_out >= 0) GP_TRY(be->bias_grad(be, rq, d, 1, dy, gbias + g->nqkv));
  return GP_OK;
}

/* The input projections' parameter gradients from dqkv and the inputs, then the biases
 * summed in gbias added to theirs. */
static gp_status in_proj_grads(const gp_layer *l, gp_exec *e, const gp_attn_geo *g,
                               const gp_attn_saved *s, const gp_tensor *in, int64_t rq, int64_t rk,
                               const float *dqkv, float *gbias) {
  const gp_attn_conf *k = l->conf;
  gp_backend *be = e->be;
  const int64_t d = g->d, dkv = g->dkv, nq = g->nqkv;
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  float *gw = e->bind->grad[w_in], *gb = b_in >= 0 ? gbias : NULL;
  const float *xq = GP_F32P(&in[0]);
  if (!g->cross) {
    GP_TRY(be->gemm(be, 1, 0, nq, d, rq, 1.0f, dqkv, nq, xq, d, 1.0f, gw, d));
    if (gb) GP_TRY(be->bias_grad(be, rq, nq, 1, dqkv, gb));
  } else {
    const float *xkv = GP_F32P(&in[g->kv]), *dq = dqkv, *dkvp = dqkv + (s->k - s->qkv);
    GP_TRY(be->gemm(be, 1, 0, d, d, rq, 1.0f, dq, d, xq, d, 1.0f, gw, d));
    GP_TRY(be->gemm(be, 1, 0, 2 * dkv, d, rk, 1.0f, dkvp, 2 * dkv, xkv, d, 1.0f, gw + d * d, d));
    if (gb) {
      GP_TRY(be->bias_grad(be, rq, d, 1, dq, gb));
      GP_TRY(be->bias_grad(be, rk, 2 * dkv, 1, dkvp, gb + d));
    }
  }
  if (gb) {
    /* the key bias moves every score of a query's row by the same q . b: softmax ignores it,
     * so its gradient is exactly 0; summed, it is rounding noise that Adam (eps 1e-9) would
     * turn into lr-sized steps differing with K and M. Not with rope: turned by each key's
     * position, the bias moves each score by another amount. */
    if (!k->rope) GP_TRY(be->zero(be, gbias + d, (size_t)dkv * sizeof(float)));
    GP_TRY(be->axpby(be, nq, 1.0f, gbias, 1.0f, e->bind->grad[b_in]));
    GP_TRY(be->axpby(be, d, 1.0f, gbias + nq, 1.0f, e->bind->grad[b_out]));
  }
  return GP_OK;
}

/* W reads dy, the saved context, the inputs and the projection gradients B kept. */
static gp_status attention_backward_weight(const gp_layer *l, gp_exec *e, const gp_attn_geo *g,
                                           const gp_attn_saved *s, const gp_tensor *in,
                                           const float *dy) {
  if (!s->dqkv)
    return GP_ERR(GP_ERR_RUNTIME, "attention %s: weight gradients before the input half", l->path);
  const int64_t nb = in[0].shape.d[0], nbias = g->nqkv + g->d, rq = nb * g->tq, rk = nb * g->tk;
  float *gbias;
  GP_TRY(e->be->scratch(e->be, (size_t)nbias * sizeof(float), (void **)&gbias));
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  if (b_in >= 0) GP_TRY(e->be->zero(e->be, gbias, (size_t)nbias * sizeof(float)));
  GP_TRY(out_proj_grads(l, e, g, s, rq, dy, gbias));
  return in_proj_grads(l, e, g, s, in, rq, rk, s->dqkv, gbias);
}

static gp_status attention_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  const gp_attn_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_attn_saved *s = saved;
  if (!s) return GP_ERR(GP_ERR_RUNTIME, "attention %s: backward without its forward", l->path);
  gp_attn_geo g;
  gp_attn_geometry(l, &g);
  int w_in, b_in, w_out, b_out;
  gp_attn_param_ix(l, &w_in, &b_in, &w_out, &b_out);
  const int64_t nb = in[0].shape.d[0], d = g.d, dh = g.dh, H = g.h, tq = g.tq, tk = g.tk;
  const int64_t rq = nb * tq, rk = nb * tk, nscore = nb * H * tq * tk, dkv = g.dkv, nq = g.nqkv;
  const int64_t grp = H / g.kvh, nbias = nq + d;
  const int drop = dropout_on(k, e), wg = gp_exec_weight_grads(e);
  const float *dy = GP_F32P(dout), *W = e->bind->param[w_in];
  const float scale = (float)(1.0 / sqrt((double)dh));
  if (e->grad_part == GP_GRAD_WEIGHT) return attention_backward_weight(l, e, &g, s, in, dy);

  /* Scratch: the bias gradients of this pass [nqkv + d], dctx [rq, d], d(projections) laid out
   * like s->qkv, dP, and for dropout the dropped probabilities (recomputed from the mask
   * function) and dP before dropout. B alone keeps d(projections) for its W in the arena. */
  size_t nproj = (size_t)(g.cross ? rq * d + rk * 2 * dkv : rq * nq);
  size_t total = (size_t)(nbias + rq * d) + nproj + (s->lse ? 0 : (size_t)nscore * (drop ? 3 : 1));
  float *gbias;
  GP_TRY(be->scratch(be, total * sizeof(float), (void **)&gbias));
  float *dctx = gbias + nbias, *dqkv = dctx + rq * d, *dp = dqkv + nproj;
  float *pd = drop ? dp + nscore : s->p, *dpd = drop ? dp + 2 * nscore : dp;
  if (!wg) {
    GP_TRY(gp_arena_alloc(e->arena, nproj * sizeof(float), (void **)&s->dqkv));
    dqkv = s->dqkv;
  }
  /* Bias gradients are summed here from 0 and then added (the key bias's set to its exact 0
   * in in_proj_grads). */
  if (b_in >= 0 && wg) GP_TRY(be->zero(be, gbias, (size_t)nbias * sizeof(float)));
  float *dq = dqkv, *dk = dqkv + (s->k - s->qkv), *dv = dqkv + (s->v - s->qkv);

  /* Output projection. */
  if (wg) GP_TRY(out_proj_grads(l, e, &g, s, rq, dy, gbias));
  GP_TRY(be->gemm(be, 0, 0, rq, d, d, 1.0f, dy, d, e->bind->param[w_out], d, 0.0f, dctx, d));
  if (s->lse) { /* the forward was fused: so is this */
    gp_sdpa_desc sd;
    sdpa_desc(&g, k, e, in, nb, s, &sd);
    GP_TRY(be->sdpa_backward(be, &sd, s->q, s->k, s->v, s->ctx, s->lse, dctx, dq, dk, dv));
    goto unrope;
  }

  /* Through P V: dP (after dropout) and dV per head; a key/value head shared by grp query
   * heads sums their gradients, the first written (beta 0), the others added in head order. */
  if (drop)
    GP_TRY(be->dropout_forward(be, nscore, (float)k->dropout, gp_layer_rng_key(l, e),
                               mask_offset(&g, e), s->p, pd));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *dc = dctx + b * tq * d + h * dh;
      const float beta = h % grp ? 1.0f : 0.0f;
      int64_t sc = (b * H + h) * tq * tk, kvo = b * tk * s->ldk + h / grp * dh;
      GP_TRY(be->gemm(be, 0, 1, tq, tk, dh, 1.0f, dc, d, s->v + kvo, s->ldk, 0.0f, dpd + sc, tk));
      GP_TRY(be->gemm(be, 1, 0, tk, dh, tq, 1.0f, pd + sc, tk, dc, d, beta, dv + kvo, s->ldk));
    }
  if (drop)
    GP_TRY(be->dropout_backward(be, nscore, (float)k->dropout, gp_layer_rng_key(l, e),
                                mask_offset(&g, e), dpd, dp));
  /* Through the softmax (masked entries have P = 0, so they get no gradient), then Q K^T. */
  GP_TRY(be->softmax_backward(be, nb * H * tq, tk, s->p, dp, dp));
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < H; h++) {
      const float beta = h % grp ? 1.0f : 0.0f;
      int64_t sc = (b * H + h) * tq * tk, qo = b * tq * s->ldq + h * dh,
              kvo = b * tk * s->ldk + h / grp * dh;
      GP_TRY(be->gemm(be, 0, 0, tq, dh, tk, scale, dp + sc, tk, s->k + kvo, s->ldk, 0.0f, dq + qo,
                      s->ldq));
      GP_TRY(be->gemm(be, 1, 0, tk, dh, tq, scale, dp + sc, tk, s->q + qo, s->ldq, beta, dk + kvo,
                      s->ldk));
    }
  /* Back through rope: the gradients of the rotated Q and K turned back (self-attention only). */
unrope:
  if (g.pos >= 0)
    GP_TRY(be->rope(be, rq, H + g.kvh, dh, nq, k->theta, GP_I32P(&in[g.pos]), 1, dqkv));

  /* Input projections: weight and bias gradients, then the inputs'. */
  if (wg) GP_TRY(in_proj_grads(l, e, &g, s, in, rq, rk, dqkv, gbias));
  if (!g.cross) {
    if (din[0].data)
      GP_TRY(be->gemm(be, 0, 0, rq, d, nq, 1.0f, dqkv, nq, W, d, 0.0f, GP_F32P(&din[0]), d));
  } else {
    if (din[0].data)
      GP_TRY(be->gemm(be, 0, 0, rq, d, d, 1.0f, dq, d, W, d, 0.0f, GP_F32P(&din[0]), d));
    if (din[g.kv].data)
      GP_TRY(be->gemm(be, 0, 0, rk, d, 2 * dkv, 1.0f, dk, 2 * dkv, W + d * d, d, 0.0f,
                      GP_F32P(&din[g.kv]), d));
  }
  /* A mask, segment ids or positions are piecewise constant: their gradient is 0. */
  const int consts[4] = {g.mask, g.seg_q, g.seg_k, g.pos};
  for (int c = 0; c < 4; c++)
    if (consts[c] >= 0 && din[consts[c]].data)
      GP_TRY(be->zero(be, din[consts[c]].data, gp_tensor_bytes(&din[consts[c]])));
  return GP_OK;
}

const gp_layer_type gp_layer_attention = {
    .name = "attention",
    .doc = "multi-head scaled dot-product attention with its projections (PyTorch's "
           "`nn.MultiheadAttention`; with `kv_heads` and `rope`, Llama's attention)",
    .min_inputs = 1,
    .max_inputs = 4,
    .conf_size = sizeof(gp_attn_conf),
    GP_LAYER_SETTINGS(attention_settings),
    .configure = attention_configure,
    .shape = attention_shape,
    .cost = attention_cost,
    .forward = attention_forward,
    .backward = attention_backward,
};
