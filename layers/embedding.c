/* embedding: int32 token ids of any shape [...] -> f32 [..., dim], a row of the weight
 * [num_embeddings, dim] per id (PyTorch's nn.Embedding), optionally scaled by sqrt(dim) as in
 * Vaswani et al. The row of padding_idx starts at zero and gets no gradient. An id outside
 * [0, num_embeddings) is a data error from forward, never a read out of bounds. */
#include <math.h>

#include "layers/layers.h"

static const char *const embedding_inits[] = {"default", "normal", NULL};

typedef struct embedding_conf {
  int64_t vocab, dim;
  int64_t padding_idx; /* -1: none (after resolving a negative index as PyTorch does) */
  int scale;
  int normal; /* init: normal */
  double std;
  int has_std;
  int64_t padding_written; /* padding_idx as written, when has_padding */
  int has_padding;
} embedding_conf;

static const gp_setting embedding_settings[] = {
    {.key = "num_embeddings",
     GP_SETTING_INT_AT(embedding_conf, vocab),
     .required = 1,
     .min = 1,
     .max = INT32_MAX,
     .doc = "vocabulary size (rows of the weight)"},
    {.key = "dim",
     GP_SETTING_INT_AT(embedding_conf, dim),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "embedding size"},
    {.key = "padding_idx",
     GP_SETTING_INT_AT(embedding_conf, padding_written),
     GP_SETTING_HAS_AT(embedding_conf, has_padding),
     .min = INT32_MIN,
     .max = INT32_MAX,
     .doc = "a row that starts at zero and gets no gradient, in [-num_embeddings, "
            "num_embeddings) (negative counts from the end)"},
    {.key = "scale",
     GP_SETTING_BOOL_AT(embedding_conf, scale),
     .idflt = 0,
     .doc = "multiply the output by sqrt(dim) (Vaswani et al.); the weight starts N(0, 1/dim)"},
    {.key = "init",
     GP_SETTING_CHOICE_AT(embedding_conf, normal),
     .choices = embedding_inits,
     .idflt = 0,
     .doc = "weight init: `default` N(0, 1) (PyTorch's), N(0, 1/dim) with `scale`; `normal` "
            "N(0, std^2) (GPT-2's, Llama's)"},
    {.key = "std",
     GP_SETTING_FLOAT_AT(embedding_conf, std),
     GP_SETTING_HAS_AT(embedding_conf, has_std),
     .range = GP_RANGE_POSITIVE,
     .dflt_doc = "0.02",
     .doc = "the standard deviation of `init: normal` (only with it)"},
};

static gp_status embedding_configure(gp_layer *l, gp_cfg *cfg) {
  embedding_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  GP_TRY(gp_layers_init_std(cfg, k->normal, k->has_std, &k->std));
  k->padding_idx = -1;
  if (k->has_padding) {
    const int64_t p = k->padding_written;
    if (p < -k->vocab || p >= k->vocab)
      return gp_cfg_error(cfg, "padding_idx",
                          "padding_idx: %lld is out of range [-%lld, %lld) (num_embeddings %lld)",
                          (long long)p, (long long)k->vocab, (long long)k->vocab,
                          (long long)k->vocab);
    k->padding_idx = p < 0 ? p + k->vocab : p;
  }
  return GP_OK;
}

static gp_status embedding_shape(gp_layer *l) {
  const embedding_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  if (l->in_dtype[0] != GP_I32)
    return GP_ERR(GP_ERR_SPEC, "embedding expects i32 token ids, got %s %s",
                  gp_dtype_spec_name(l->in_dtype[0]), gp_layers_shape_str(x, buf));
  if (x->ndim >= GP_MAX_DIMS)
    return GP_ERR(GP_ERR_SPEC, "embedding: ids %s leave no room for the embedding dimension",
                  gp_layers_shape_str(x, buf));
  gp_shape y = *x;
  y.d[y.ndim++] = k->dim;
  GP_TRY(gp_layers_set_out(l, &y));
  int64_t wd[2] = {k->vocab, k->dim};
  gp_shape ws = gp_shape_of(2, wd);
  /* scaled by sqrt(dim): N(0, 1/dim), so that the scaled vectors are of unit size like the
   * positions added to them (fairseq); else PyTorch's N(0, 1) */
  const gp_init wi = k->normal  ? GP_INIT_NORMAL_STD
                     : k->scale ? GP_INIT_NORMAL_FAN_IN
                                : GP_INIT_NORMAL;
  GP_TRY(gp_layers_add_param(l, "weight", &ws, wi, k->dim, 1));
  l->pdesc[0].std = k->std;
  if (k->padding_idx >= 0) {
    l->pdesc[0].has_zero_row = 1;
    l->pdesc[0].zero_row = k->padding_idx;
  }
  return GP_OK;
}

static void embedding_cost(const gp_layer *l, gp_cost *c) {
  const embedding_conf *k = l->conf;
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = k->scale ? n : 0.0; /* a gather: memory, not arithmetic */
  c->bwd_flops = n;                  /* the scatter-add */
  c->params = k->vocab * k->dim;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)n * 4;
}

static float scale_of(const embedding_conf *k) {
  return k->scale ? (float)sqrt((double)k->dim) : 1.0f;
}

static gp_status embedding_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  (void)saved;
  const embedding_conf *k = l->conf;
  return e->be->embedding_forward(e->be, gp_shape_numel(&in[0].shape), k->dim, k->vocab,
                                  GP_I32P(&in[0]), e->bind->param[0], scale_of(k), GP_F32P(out));
}

static gp_status embedding_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  (void)din; /* ids take no gradient */
  (void)saved;
  const embedding_conf *k = l->conf;
  if (!gp_exec_weight_grads(e)) return GP_OK; /* B is empty; W reads the ids and dy */
  return e->be->embedding_backward(e->be, gp_shape_numel(&in[0].shape), k->dim, k->vocab,
                                   GP_I32P(&in[0]), GP_F32P(dout), scale_of(k), k->padding_idx,
                                   e->bind->grad[0]);
}

const gp_layer_type gp_layer_embedding = {
    .name = "embedding",
    .doc = "i32 token ids `[...]` to vectors `[..., dim]`, a row of the weight per id (PyTorch's "
           "`nn.Embedding`)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(embedding_conf),
    GP_LAYER_SETTINGS(embedding_settings),
    .configure = embedding_configure,
    .shape = embedding_shape,
    .cost = embedding_cost,
    .forward = embedding_forward,
    .backward = embedding_backward,
};
