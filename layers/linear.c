/* linear: y = x W^T + b over the last dimension of any input, [..., in] -> [..., out], as
 * one GEMM over all rows of the micro-batch. weight [out, in], bias [out] (PyTorch). */
#include "layers/layers.h"

enum { LINEAR_INIT_DEFAULT, LINEAR_INIT_HE, LINEAR_INIT_NORMAL };
static const char *const linear_inits[] = {"default", "he", "normal", NULL};

typedef struct linear_conf {
  int64_t out_features;
  int bias, init;
  double std;
  int has_std;
} linear_conf;

static const gp_setting linear_settings[] = {
    {.key = "out_features",
     GP_SETTING_INT_AT(linear_conf, out_features),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "output features (rows of the weight)"},
    {.key = "bias", GP_SETTING_BOOL_AT(linear_conf, bias), .idflt = 1, .doc = "add a bias"},
    {.key = "init",
     GP_SETTING_CHOICE_AT(linear_conf, init),
     .choices = linear_inits,
     .idflt = LINEAR_INIT_DEFAULT,
     .doc = "weight init: `default` U(-b, b), b = 1/sqrt(in) (PyTorch's); `he` N(0, 2/in); "
            "`normal` N(0, std^2) with a zero bias (GPT-2's, Llama's)"},
    {.key = "std",
     GP_SETTING_FLOAT_AT(linear_conf, std),
     GP_SETTING_HAS_AT(linear_conf, has_std),
     .range = GP_RANGE_POSITIVE,
     .dflt_doc = "0.02",
     .doc = "the standard deviation of `init: normal` (only with it)"},
};

static gp_status linear_configure(gp_layer *l, gp_cfg *cfg) {
  linear_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  return gp_layers_init_std(cfg, k->init == LINEAR_INIT_NORMAL, k->has_std, &k->std);
}

static gp_status linear_shape(gp_layer *l) {
  const linear_conf *k = l->conf;
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  const gp_shape *x = &l->in_shape[0];
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "linear expects input [..., features], got %s",
                  gp_layers_shape_str(x, buf));
  int64_t in = x->d[x->ndim - 1];
  gp_shape y = *x;
  y.d[y.ndim - 1] = k->out_features;
  GP_TRY(gp_layers_set_out(l, &y));
  int64_t wd[2] = {k->out_features, in};
  gp_shape ws = gp_shape_of(2, wd), bs = gp_shape_of(1, &k->out_features);
  const gp_init wi = k->init == LINEAR_INIT_HE       ? GP_INIT_KAIMING_NORMAL
                     : k->init == LINEAR_INIT_NORMAL ? GP_INIT_NORMAL_STD
                                                     : GP_INIT_UNIFORM_FAN_IN;
  GP_TRY(gp_layers_add_param(l, "weight", &ws, wi, in, 1));
  l->pdesc[0].std = k->std;
  if (k->bias)
    GP_TRY(gp_layers_add_param(
        l, "bias", &bs, k->init == LINEAR_INIT_DEFAULT ? GP_INIT_UNIFORM_FAN_IN : GP_INIT_ZEROS, in,
        1));
  return GP_OK;
}

static void linear_cost(const gp_layer *l, gp_cost *c) {
  const linear_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  double in = (double)x->d[x->ndim - 1], out = (double)k->out_features;
  double rows = (double)gp_layers_numel(x) / in;
  double mm = 2.0 * rows * in * out;
  c->fwd_flops = mm + (k->bias ? rows * out : 0.0);
  c->bwd_flops = 2.0 * mm + (k->bias ? rows * out : 0.0); /* data and weight gradients */
  c->bwd_data_flops = mm;
  c->params = (int64_t)(in * out) + (k->bias ? k->out_features : 0);
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

static gp_status linear_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                void **saved) {
  (void)saved;
  const linear_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t rows = gp_layers_rows(&in[0]), nin = in[0].shape.d[in[0].shape.ndim - 1];
  int64_t nout = k->out_features;
  GP_TRY(be->gemm(be, 0, 1, rows, nout, nin, 1.0f, GP_F32P(&in[0]), nin, e->bind->param[0], nin,
                  0.0f, GP_F32P(out), nout));
  if (k->bias) GP_TRY(be->bias_add(be, rows, nout, 1, e->bind->param[1], GP_F32P(out)));
  return GP_OK;
}

static gp_status linear_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                 const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                 void *saved) {
  (void)out;
  (void)saved;
  const linear_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t rows = gp_layers_rows(&in[0]), nin = in[0].shape.d[in[0].shape.ndim - 1];
  int64_t nout = k->out_features;
  const float *dy = GP_F32P(dout);
  /* dW[out, in] += dY^T X (W: reads X and dY) */
  if (gp_exec_weight_grads(e)) {
    GP_TRY(be->gemm(be, 1, 0, nout, nin, rows, 1.0f, dy, nout, GP_F32P(&in[0]), nin, 1.0f,
                    e->bind->grad[0], nin));
    if (k->bias) GP_TRY(be->bias_grad(be, rows, nout, 1, dy, e->bind->grad[1]));
  }
  /* dX = dY W, skipped for a first layer whose input needs no gradient. */
  if (din[0].data)
    GP_TRY(be->gemm(be, 0, 0, rows, nin, nout, 1.0f, dy, nout, e->bind->param[0], nin, 0.0f,
                    GP_F32P(&din[0]), nin));
  return GP_OK;
}

/* Forward and an activation as one GEMM with its epilogue, where the backend has one
 * (core/fused.c composes otherwise). */
static gp_status linear_forward_act(const gp_layer *l, gp_exec *e, gp_activation act,
                                    const gp_tensor *in, gp_tensor *pre, gp_tensor *out,
                                    int *taken) {
  const linear_conf *k = l->conf;
  gp_backend *be = e->be;
  *taken = 0;
  if (!be->linear_act_forward) return GP_OK;
  int64_t rows = gp_layers_rows(&in[0]), nin = in[0].shape.d[in[0].shape.ndim - 1];
  return be->linear_act_forward(be, act, rows, k->out_features, nin, GP_F32P(&in[0]),
                                e->bind->param[0], k->bias ? e->bind->param[1] : NULL, GP_F32P(pre),
                                GP_F32P(out), taken);
}

const gp_layer_type gp_layer_linear = {
    .name = "linear",
    .doc = "y = x W^T + b over the last dimension: `[..., in]` to `[..., out_features]`",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(linear_conf),
    GP_LAYER_SETTINGS(linear_settings),
    .configure = linear_configure,
    .shape = linear_shape,
    .cost = linear_cost,
    .forward = linear_forward,
    .backward = linear_backward,
    .backward_ignores_out = 1,
    .forward_act = linear_forward_act,
};
