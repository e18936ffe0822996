/* layernorm: normalization over the last dimension (PyTorch's LayerNorm(normalized_shape =
 * last dim)), with an elementwise affine weight (ones) and bias (zeros). */
#include "layers/layers.h"

typedef struct layernorm_conf {
  double eps;
} layernorm_conf;

static const gp_setting layernorm_settings[] = {
    {.key = "eps",
     GP_SETTING_FLOAT_AT(layernorm_conf, eps),
     .fdflt = 1e-5,
     .range = {0, 1, 1, 0},
     .doc = "added to the variance before its square root"},
};

static gp_status layernorm_shape(gp_layer *l) {
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "layernorm expects input [..., features], got %s",
                  gp_layers_shape_str(x, buf));
  GP_TRY(gp_layers_set_out(l, x));
  gp_shape fs = gp_shape_of(1, &x->d[x->ndim - 1]);
  GP_TRY(gp_layers_add_param(l, "weight", &fs, GP_INIT_ONES, 0, 1));
  GP_TRY(gp_layers_add_param(l, "bias", &fs, GP_INIT_ZEROS, 0, 1));
  return GP_OK;
}

static void layernorm_cost(const gp_layer *l, gp_cost *c) {
  const gp_shape *x = &l->in_shape[0];
  double n = (double)gp_layers_numel(x);
  c->fwd_flops = 7.0 * n;
  c->bwd_flops = 12.0 * n;
  c->bwd_data_flops = 8.0 * n;
  c->params = 2 * x->d[x->ndim - 1];
  c->saved_bytes = 2 * 4 * (int64_t)(n / (double)x->d[x->ndim - 1]); /* mean, rstd per row */
  c->out_bytes = (int64_t)n * 4;
}

static gp_status layernorm_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  const layernorm_conf *k = l->conf;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  float *st;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(2 * rows) * sizeof(float), (void **)&st));
  GP_TRY(e->be->layernorm_forward(e->be, rows, cols, (float)k->eps, GP_F32P(&in[0]),
                                  e->bind->param[0], e->bind->param[1], GP_F32P(out), st,
                                  st + rows));
  *saved = st;
  return GP_OK;
}

static gp_status layernorm_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  const float *st = saved;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  if (!st) return GP_ERR(GP_ERR_RUNTIME, "layernorm %s: backward without its forward", l->path);
  /* B and W each run the row pass over x, dy and the saved mean and rstd; the sums of one
   * do not feed the other's outputs, so the halves give the bytes of one call. */
  float *dx = din[0].data ? GP_F32P(&din[0]) : NULL;
  int w = gp_exec_weight_grads(e);
  if (!dx && !w) return GP_OK;
  return e->be->layernorm_backward(e->be, rows, cols, GP_F32P(&in[0]), GP_F32P(dout),
                                   e->bind->param[0], st, st + rows, dx,
                                   w ? e->bind->grad[0] : NULL, w ? e->bind->grad[1] : NULL);
}

/* The residual add before it and the norm in one kernel, where the backend has one. */
static gp_status layernorm_forward_sum(const gp_layer *l, gp_exec *e, int round_sum,
                                       const gp_tensor *in, gp_tensor *sum, gp_tensor *out,
                                       void **saved, int *taken) {
  const layernorm_conf *k = l->conf;
  *taken = 0;
  if (!e->be->add_layernorm_forward) return GP_OK;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  float *st;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(2 * rows) * sizeof(float), (void **)&st));
  GP_TRY(e->be->add_layernorm_forward(e->be, rows, cols, (float)k->eps, round_sum, GP_F32P(&in[0]),
                                      GP_F32P(&in[1]), e->bind->param[0], e->bind->param[1],
                                      GP_F32P(sum), GP_F32P(out), st, st + rows));
  *saved = st;
  *taken = 1;
  return GP_OK;
}

const gp_layer_type gp_layer_layernorm = {
    .name = "layernorm",
    .doc = "normalization over the last dimension with an affine weight and bias (PyTorch's "
           "LayerNorm)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(layernorm_conf),
    GP_LAYER_SETTINGS(layernorm_settings),
    .configure = gp_layers_configure,
    .shape = layernorm_shape,
    .cost = layernorm_cost,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .forward_sum = layernorm_forward_sum,
};
