/* groupnorm: group normalization (Wu and He 2018; torch.nn.GroupNorm) of [C, ...] per sample:
 * the C channels in `groups` groups, each normalized over its channels and positions, then a
 * per-channel weight (ones) and bias (zeros). The U-Nets of diffusion models use it. */
#include "layers/layers.h"

typedef struct groupnorm_conf {
  int64_t groups;
  double eps;
} groupnorm_conf;

static const gp_setting groupnorm_settings[] = {
    {.key = "groups",
     GP_SETTING_INT_AT(groupnorm_conf, groups),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "groups the channels are split into (must divide them)"},
    {.key = "eps",
     GP_SETTING_FLOAT_AT(groupnorm_conf, eps),
     .fdflt = 1e-5, /* torch.nn.GroupNorm's */
     .range = {0, 1, 1, 0},
     .doc = "added to the variance before its square root"},
};

static gp_status groupnorm_shape(gp_layer *l) {
  const groupnorm_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "groupnorm expects input [C, ...], got %s",
                  gp_layers_shape_str(x, buf));
  if (x->d[0] % k->groups)
    return GP_ERR(GP_ERR_SPEC, "groupnorm: %lld channels of input %s do not split into %lld groups",
                  (long long)x->d[0], gp_layers_shape_str(x, buf), (long long)k->groups);
  GP_TRY(gp_layers_set_out(l, x));
  gp_shape cs = gp_shape_of(1, &x->d[0]);
  GP_TRY(gp_layers_add_param(l, "weight", &cs, GP_INIT_ONES, 0, 1));
  return gp_layers_add_param(l, "bias", &cs, GP_INIT_ZEROS, 0, 1);
}

static void groupnorm_cost(const gp_layer *l, gp_cost *c) {
  const groupnorm_conf *k = l->conf;
  double n = (double)gp_layers_numel(&l->in_shape[0]);
  c->fwd_flops = 6.0 * n;  /* sum, squared deviations, (x - mean) w' + b */
  c->bwd_flops = 14.0 * n; /* dx: 10 an element; dw, db: 4 */
  c->bwd_data_flops = 10.0 * n;
  c->params = 2 * l->in_shape[0].d[0];
  c->saved_bytes = 8 * k->groups; /* mean and rstd per group */
  c->out_bytes = (int64_t)n * 4;
}

static void dims(const gp_tensor *x, int64_t *n, int64_t *c, int64_t *inner) {
  *n = x->shape.d[0];
  *c = x->shape.d[1];
  *inner = 1;
  for (int i = 2; i < x->shape.ndim; i++)
    *inner *= x->shape.d[i];
}

static gp_status groupnorm_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   gp_tensor *out, void **saved) {
  const groupnorm_conf *k = l->conf;
  int64_t n, c, inner;
  dims(&in[0], &n, &c, &inner);
  float *stats;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(2 * n * k->groups) * sizeof(float), (void **)&stats));
  GP_TRY(e->be->groupnorm_forward(e->be, n, c, inner, k->groups, (float)k->eps, GP_F32P(&in[0]),
                                  e->bind->param[0], e->bind->param[1], GP_F32P(out), stats,
                                  stats + n * k->groups));
  *saved = stats;
  return GP_OK;
}

/* B computes dx and W the weight and bias gradients, each from x, dy and the saved mean and
 * rstd alone, so B then W gives the bytes of one call. */
static gp_status groupnorm_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                    void *saved) {
  (void)out;
  const groupnorm_conf *k = l->conf;
  const float *stats = saved;
  if (!stats) return GP_ERR(GP_ERR_RUNTIME, "groupnorm %s: backward without its forward", l->path);
  int64_t n, c, inner;
  dims(&in[0], &n, &c, &inner);
  float *dx = din[0].data ? GP_F32P(&din[0]) : NULL;
  const int w = gp_exec_weight_grads(e);
  if (!dx && !w) return GP_OK;
  return e->be->groupnorm_backward(e->be, n, c, inner, k->groups, GP_F32P(&in[0]), GP_F32P(dout),
                                   e->bind->param[0], stats, stats + n * k->groups, dx,
                                   w ? e->bind->grad[0] : NULL, w ? e->bind->grad[1] : NULL);
}

const gp_layer_type gp_layer_groupnorm = {
    .name = "groupnorm",
    .doc = "group normalization of `[C, ...]` with a per-channel weight and bias "
           "(torch.nn.GroupNorm)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(groupnorm_conf),
    GP_LAYER_SETTINGS(groupnorm_settings),
    .configure = gp_layers_configure,
    .shape = groupnorm_shape,
    .cost = groupnorm_cost,
    .forward = groupnorm_forward,
    .backward = groupnorm_backward,
    .backward_ignores_out = 1,
};
