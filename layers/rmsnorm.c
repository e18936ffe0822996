/* rmsnorm: root-mean-square normalization over the last dimension (Zhang and Sennrich 2019;
 * Hugging Face's LlamaRMSNorm, computed in f32): y = x / sqrt(mean(x^2) + eps) * weight, with
 * a per-feature weight (ones) and no bias, so `N.weight` is Hugging Face's `...norm.weight`. */
#include "layers/layers.h"

typedef struct rmsnorm_conf {
  double eps;
} rmsnorm_conf;

static const gp_setting rmsnorm_settings[] = {
    {.key = "eps",
     GP_SETTING_FLOAT_AT(rmsnorm_conf, eps),
     .fdflt = 1e-6, /* Hugging Face's LlamaConfig rms_norm_eps */
     .range = {0, 1, 1, 0},
     .doc = "added to the mean square before its square root (Llama's `rms_norm_eps`)"},
};

static gp_status rmsnorm_shape(gp_layer *l) {
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "rmsnorm expects input [..., features], got %s",
                  gp_layers_shape_str(x, buf));
  GP_TRY(gp_layers_set_out(l, x));
  gp_shape fs = gp_shape_of(1, &x->d[x->ndim - 1]);
  return gp_layers_add_param(l, "weight", &fs, GP_INIT_ONES, 0, 1);
}

static void rmsnorm_cost(const gp_layer *l, gp_cost *c) {
  const gp_shape *x = &l->in_shape[0];
  double n = (double)gp_layers_numel(x);
  c->fwd_flops = 4.0 * n;      /* square and sum, then x rstd w */
  c->bwd_flops = 10.0 * n;     /* dx: 7 a element; dw: 3 */
  c->bwd_data_flops = 7.0 * n; /* sum(dy w x), then rstd (dy w - x rstd c) */
  c->params = x->d[x->ndim - 1];
  c->saved_bytes = 4 * (int64_t)(n / (double)x->d[x->ndim - 1]); /* rstd per row */
  c->out_bytes = (int64_t)n * 4;
}

static gp_status rmsnorm_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  const rmsnorm_conf *k = l->conf;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  float *rstd;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)rows * sizeof(float), (void **)&rstd));
  GP_TRY(e->be->rmsnorm_forward(e->be, rows, cols, (float)k->eps, GP_F32P(&in[0]),
                                e->bind->param[0], GP_F32P(out), rstd));
  *saved = rstd;
  return GP_OK;
}

/* B computes dx and W the weight gradient, each from x, dy and the saved rstd alone: neither
 * reads what the other computes, so B then W gives the bytes of one call. */
static gp_status rmsnorm_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved) {
  (void)out;
  const float *rstd = saved;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  if (!rstd) return GP_ERR(GP_ERR_RUNTIME, "rmsnorm %s: backward without its forward", l->path);
  float *dx = din[0].data ? GP_F32P(&din[0]) : NULL;
  float *dw = gp_exec_weight_grads(e) ? e->bind->grad[0] : NULL;
  if (!dx && !dw) return GP_OK;
  return e->be->rmsnorm_backward(e->be, rows, cols, GP_F32P(&in[0]), GP_F32P(dout),
                                 e->bind->param[0], rstd, dx, dw);
}

/* The residual add before it and the norm in one kernel, where the backend has one. */
static gp_status rmsnorm_forward_sum(const gp_layer *l, gp_exec *e, int round_sum,
                                     const gp_tensor *in, gp_tensor *sum, gp_tensor *out,
                                     void **saved, int *taken) {
  const rmsnorm_conf *k = l->conf;
  *taken = 0;
  if (!e->be->add_rmsnorm_forward) return GP_OK;
  int64_t rows = gp_layers_rows(&in[0]), cols = in[0].shape.d[in[0].shape.ndim - 1];
  float *rstd;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)rows * sizeof(float), (void **)&rstd));
  GP_TRY(e->be->add_rmsnorm_forward(e->be, rows, cols, (float)k->eps, round_sum, GP_F32P(&in[0]),
                                    GP_F32P(&in[1]), e->bind->param[0], GP_F32P(sum), GP_F32P(out),
                                    rstd));
  *saved = rstd;
  *taken = 1;
  return GP_OK;
}

const gp_layer_type gp_layer_rmsnorm = {
    .name = "rmsnorm",
    .doc = "root-mean-square normalization over the last dimension with a per-feature weight "
           "(Llama's RMSNorm)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(rmsnorm_conf),
    GP_LAYER_SETTINGS(rmsnorm_settings),
    .configure = gp_layers_configure,
    .shape = rmsnorm_shape,
    .cost = rmsnorm_cost,
    .forward = rmsnorm_forward,
    .backward = rmsnorm_backward,
    .backward_ignores_out = 1,
    .forward_sum = rmsnorm_forward_sum,
};
