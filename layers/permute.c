/* permute: reorders the per-sample axes (torch.permute(x, (0, 1 + a0, 1 + a1, ...)) then
 * .contiguous()): output axis j is input axis axes[j], axes numbered as concat numbers them
 * (0 is the first per-sample axis; negative counts from the end). Backward permutes dout by
 * the inverse order. */
#include "layers/layers.h"

typedef struct permute_conf {
  int64_t axes[GP_MAX_DIMS];
  int count;
  int ax[GP_MAX_DIMS]; /* resolved by shape() */
} permute_conf;

static const gp_setting permute_settings[] = {
    {.key = "axes",
     GP_SETTING_INT_LIST_AT(permute_conf, axes, count),
     .required = 1,
     .min = -GP_MAX_DIMS,
     .max = GP_MAX_DIMS - 1,
     .doc = "output axis j is input axis axes[j] (per sample; negative counts from the end)"},
};

static gp_status permute_shape(gp_layer *l) {
  permute_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char b1[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (k->count != x->ndim)
    return GP_ERR(GP_ERR_SPEC, "permute: %d axes given for input %s of %d axes", k->count,
                  gp_layers_shape_str(x, b1), x->ndim);
  int seen[GP_MAX_DIMS] = {0};
  gp_shape y = *x;
  for (int j = 0; j < k->count; j++) {
    const int64_t a = k->axes[j] < 0 ? k->axes[j] + x->ndim : k->axes[j];
    if (a < 0 || a >= x->ndim || seen[a]++)
      return GP_ERR(GP_ERR_SPEC,
                    "permute: axes is not an order of input %s's axes 0 to %d (axis %lld %s)",
                    gp_layers_shape_str(x, b1), x->ndim - 1, (long long)k->axes[j],
                    a < 0 || a >= x->ndim ? "is outside them" : "comes twice");
    k->ax[j] = (int)a;
    y.d[j] = x->d[a];
  }
  return gp_layers_set_out(l, &y);
}

static void permute_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

/* x of runtime shape s (the batch first) to y, y's per-sample axis j being x's order[j]. */
static gp_status run(gp_backend *be, const gp_shape *s, const int *order, const float *x,
                     float *y) {
  int perm[GP_MAX_DIMS + 1];
  perm[0] = 0;
  for (int j = 1; j < s->ndim; j++)
    perm[j] = 1 + order[j - 1];
  return be->permute(be, s->ndim, s->d, perm, x, y);
}

static gp_status permute_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  (void)saved;
  const permute_conf *k = l->conf;
  return run(e->be, &in[0].shape, k->ax, GP_F32P(&in[0]), GP_F32P(out));
}

static gp_status permute_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved) {
  (void)in;
  (void)out;
  (void)saved;
  const permute_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  int inv[GP_MAX_DIMS];
  for (int j = 0; j < k->count; j++)
    inv[k->ax[j]] = j;
  return run(e->be, &dout->shape, inv, GP_F32P(dout), GP_F32P(&din[0]));
}

const gp_layer_type gp_layer_permute = {
    .name = "permute",
    .doc = "reorders the per-sample axes (torch.permute of the non-batch axes, made contiguous)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(permute_conf),
    GP_LAYER_SETTINGS(permute_settings),
    .configure = gp_layers_configure,
    .shape = permute_shape,
    .cost = permute_cost,
    .forward = permute_forward,
    .backward = permute_backward,
    .backward_ignores_out = 1,
};
