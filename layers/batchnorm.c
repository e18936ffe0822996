/* batchnorm: per-channel batch normalization over [C, ...] (BatchNorm1d for [C] and
 * [C, L], BatchNorm2d for [C, H, W]). Running statistics are updated once per mini-batch:
 * each micro-batch's forward pools its mean and variance into e->bind->stats (so they hold the
 * statistics of all the values seen so far in the step, however they were split), and
 * step_end applies them with the momentum: PyTorch's update for the whole mini-batch, as
 * torchgpipe's DeferredBatchNorm. Normalizing uses each micro-batch's own statistics, as in
 * GPipe. */
#include "layers/layers.h"

typedef struct batchnorm_conf {
  double eps, momentum;
} batchnorm_conf;

enum { P_WEIGHT, P_BIAS, P_MEAN, P_VAR };

static const gp_setting batchnorm_settings[] = {
    {.key = "eps",
     GP_SETTING_FLOAT_AT(batchnorm_conf, eps),
     .fdflt = 1e-5,
     .range = {0, 1, 1, 0},
     .doc = "added to the variance before its square root"},
    {.key = "momentum",
     GP_SETTING_FLOAT_AT(batchnorm_conf, momentum),
     .fdflt = 0.1,
     .range = {0, 1, 0, 0},
     .doc = "running statistics: new = (1 - momentum) old + momentum batch (PyTorch's)"},
};

static gp_status batchnorm_shape(gp_layer *l) {
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "batchnorm expects input [C, ...], got %s",
                  gp_layers_shape_str(x, buf));
  GP_TRY(gp_layers_set_out(l, x));
  gp_shape cs = gp_shape_of(1, &x->d[0]);
  GP_TRY(gp_layers_add_param(l, "weight", &cs, GP_INIT_ONES, 0, 1));
  GP_TRY(gp_layers_add_param(l, "bias", &cs, GP_INIT_ZEROS, 0, 1));
  GP_TRY(gp_layers_add_param(l, "running_mean", &cs, GP_INIT_ZEROS, 0, 0));
  GP_TRY(gp_layers_add_param(l, "running_var", &cs, GP_INIT_ONES, 0, 0));
  return GP_OK;
}

static void batchnorm_cost(const gp_layer *l, gp_cost *c) {
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = 6.0 * n; /* mean, variance, scale and shift */
  c->bwd_flops = 8.0 * n;
  c->bwd_data_flops = 4.0 * n; /* the parameter gradients are two sums over x-hat and dy */
  c->params = 2 * l->in_shape[0].d[0];
  c->saved_bytes = 0; /* mean and invstd are per channel, not per sample */
  c->out_bytes = (int64_t)n * 4;
}

static int64_t batchnorm_stats_floats(const gp_layer *l) {
  return 2 * l->in_shape[0].d[0];
}

static void dims(const gp_layer *l, const gp_tensor *x, int64_t *n, int64_t *c, int64_t *inner) {
  *n = x->shape.d[0];
  *c = l->in_shape[0].d[0];
  *inner = gp_layers_numel(&l->in_shape[0]) / *c;
}

static gp_status batchnorm_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  batchnorm_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n, c, inner;
  dims(l, &in[0], &n, &c, &inner);
  if (!e->training)
    return be->batchnorm_forward_eval(be, n, c, inner, (float)k->eps, GP_F32P(&in[0]),
                                      e->bind->param[P_WEIGHT], e->bind->param[P_BIAS],
                                      e->bind->param[P_MEAN], e->bind->param[P_VAR], GP_F32P(out));
  char sh[GP_LAYER_SHAPE_STR];
  if (n * inner == 1)
    return GP_ERR(GP_ERR_USAGE,
                  "batchnorm %s: one value per channel to normalize (a micro-batch of 1 sample of "
                  "%s): the output would be the bias alone; use fewer micro-batches or a larger "
                  "batch (PyTorch refuses this too)",
                  l->path, gp_layers_shape_str(&l->in_shape[0], sh));
  float *st;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(2 * c) * sizeof(float), (void **)&st));
  GP_TRY(be->batchnorm_forward_train(be, n, c, inner, (float)k->eps, GP_F32P(&in[0]),
                                     e->bind->param[P_WEIGHT], e->bind->param[P_BIAS], GP_F32P(out),
                                     st, st + c));
  *saved = st;
  /* A re-materializing forward sees the same micro-batch again: count it only once. */
  if (!e->recompute) {
    if (!e->bind->stats)
      return GP_ERR(GP_ERR_RUNTIME, "batchnorm %s: no statistics buffer (stats_floats)", l->path);
    GP_TRY(be->batchnorm_stats_accumulate(be, c, e->bind->stats_count, n * inner, (float)k->eps, st,
                                          st + c, e->bind->stats));
    e->bind->stats_count += n * inner;
  }
  return GP_OK;
}

static gp_status batchnorm_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  const float *st = saved;
  int64_t n, c, inner;
  if (!st)
    return GP_ERR(GP_ERR_RUNTIME, "batchnorm %s: backward needs a training forward", l->path);
  dims(l, &in[0], &n, &c, &inner);
  /* dx and dgamma, dbeta come from the same per-channel sums of dy and dy xhat: each half
   * recomputes them from x, dy and the saved mean and invstd, in the same order, so B and W
   * give the bytes of one call. */
  float *dx = din[0].data ? GP_F32P(&din[0]) : NULL;
  int w = gp_exec_weight_grads(e);
  if (!dx && !w) return GP_OK;
  return e->be->batchnorm_backward(
      e->be, n, c, inner, GP_F32P(&in[0]), GP_F32P(dout), e->bind->param[P_WEIGHT], st, st + c, dx,
      w ? e->bind->grad[P_WEIGHT] : NULL, w ? e->bind->grad[P_BIAS] : NULL);
}

static gp_status batchnorm_step_end(const gp_layer *l, gp_layer_bind *b, gp_backend *be) {
  const batchnorm_conf *k = l->conf;
  if (b->stats_count == 0 || !b->stats) return GP_OK;
  int64_t n = b->stats_count;
  b->stats_count = 0;
  return be->batchnorm_stats_apply(be, l->in_shape[0].d[0], (float)k->momentum, n, b->stats,
                                   b->param[P_MEAN], b->param[P_VAR]);
}

const gp_layer_type gp_layer_batchnorm = {
    .name = "batchnorm",
    .doc = "per-channel batch normalization over `[C, ...]` with an affine weight and bias "
           "(PyTorch's BatchNorm1d/2d)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(batchnorm_conf),
    GP_LAYER_SETTINGS(batchnorm_settings),
    .configure = gp_layers_configure,
    .shape = batchnorm_shape,
    .cost = batchnorm_cost,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .backward_ignores_out = 1,
    .stats_floats = batchnorm_stats_floats,
    .step_end = batchnorm_step_end,
};
