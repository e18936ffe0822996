/* conv1d: 1-D convolution over [C, L] with stride, padding, dilation and groups (PyTorch's
 * Conv1d). weight [k, C/groups, kernel], bias [k]. It runs as conv2d's ops on a [C, 1, L]
 * image with a [1, kernel] window: the weight's bytes are the same in both layouts. */
#include "layers/layers.h"

typedef struct conv1d_conf {
  int64_t k, kernel, stride, padding, dilation, groups;
  int bias;
} conv1d_conf;

static const gp_setting conv1d_settings[] = {
    {.key = "out_channels",
     GP_SETTING_INT_AT(conv1d_conf, k),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "output channels"},
    {.key = "kernel",
     GP_SETTING_INT_AT(conv1d_conf, kernel),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "kernel size"},
    {.key = "stride",
     GP_SETTING_INT_AT(conv1d_conf, stride),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "stride"},
    {.key = "padding",
     GP_SETTING_INT_AT(conv1d_conf, padding),
     .idflt = 0,
     .min = 0,
     .max = GP_LAYER_MAX_DIM,
     .doc = "zeros added on both sides"},
    {.key = "dilation",
     GP_SETTING_INT_AT(conv1d_conf, dilation),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "spacing of the kernel's taps"},
    {.key = "groups",
     GP_SETTING_INT_AT(conv1d_conf, groups),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "channel groups: must divide the input and the output channels"},
    {.key = "bias", GP_SETTING_BOOL_AT(conv1d_conf, bias), .idflt = 1, .doc = "add a bias"},
};

static gp_status conv1d_configure(gp_layer *l, gp_cfg *cfg) {
  conv1d_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->k % k->groups)
    return gp_cfg_error(cfg, "groups", "out_channels %lld is not divisible by groups %lld",
                        (long long)k->k, (long long)k->groups);
  return GP_OK;
}

static gp_status conv1d_shape(gp_layer *l) {
  const conv1d_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 2)
    return GP_ERR(GP_ERR_SPEC, "conv1d expects input [C, L], got %s", gp_layers_shape_str(x, buf));
  int64_t c = x->d[0], len = x->d[1];
  if (c % k->groups)
    return GP_ERR(GP_ERR_SPEC,
                  "conv1d: input channels %lld (input %s) are not divisible by groups %lld",
                  (long long)c, gp_layers_shape_str(x, buf), (long long)k->groups);
  int64_t e = k->dilation * (k->kernel - 1) + 1;
  if (e > len + 2 * k->padding)
    return GP_ERR(GP_ERR_SPEC,
                  "conv1d: kernel %lld (dilated %lld) is longer than the padded input %lld "
                  "(input %s, padding %lld)",
                  (long long)k->kernel, (long long)e, (long long)(len + 2 * k->padding),
                  gp_layers_shape_str(x, buf), (long long)k->padding);
  int64_t od[2] = {k->k, (len + 2 * k->padding - e) / k->stride + 1};
  gp_shape y = gp_shape_of(2, od);
  GP_TRY(gp_layers_set_out(l, &y));
  int64_t fan_in = c / k->groups * k->kernel;
  int64_t wd[3] = {k->k, c / k->groups, k->kernel};
  gp_shape ws = gp_shape_of(3, wd), bs = gp_shape_of(1, &k->k);
  GP_TRY(gp_layers_add_param(l, "weight", &ws, GP_INIT_UNIFORM_FAN_IN, fan_in, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "bias", &bs, GP_INIT_UNIFORM_FAN_IN, fan_in, 1));
  return GP_OK;
}

static void conv1d_cost(const gp_layer *l, gp_cost *c) {
  const conv1d_conf *k = l->conf;
  double outs = (double)gp_layers_numel(&l->out_shape);
  double macs = outs * (double)(l->in_shape[0].d[0] / k->groups * k->kernel);
  c->fwd_flops = 2.0 * macs + (k->bias ? outs : 0.0);
  c->bwd_flops = 4.0 * macs + (k->bias ? outs : 0.0);
  c->bwd_data_flops = 2.0 * macs;
  c->params = gp_layers_numel(&l->pdesc[0].shape) + (k->bias ? k->k : 0);
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)outs * 4;
}

static gp_conv2d_desc conv1d_desc(const gp_layer *l, const gp_tensor *x) {
  const conv1d_conf *k = l->conf;
  gp_conv2d_desc d = {
      .n = x->shape.d[0],
      .c = l->in_shape[0].d[0],
      .h = 1,
      .w = l->in_shape[0].d[1],
      .k = k->k,
      .oh = 1,
      .ow = l->out_shape.d[1],
      .kh = 1,
      .kw = k->kernel,
      .sh = 1,
      .sw = k->stride,
      .ph = 0,
      .pw = k->padding,
      .dh = 1,
      .dw = k->dilation,
      .groups = k->groups,
  };
  return d;
}

static gp_status conv1d_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                void **saved) {
  (void)saved;
  const conv1d_conf *k = l->conf;
  gp_conv2d_desc d = conv1d_desc(l, &in[0]);
  return e->be->conv2d_forward(e->be, &d, GP_F32P(&in[0]), e->bind->param[0],
                               k->bias ? e->bind->param[1] : NULL, GP_F32P(out));
}

static gp_status conv1d_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                 const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                 void *saved) {
  (void)out;
  (void)saved;
  const conv1d_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_conv2d_desc d = conv1d_desc(l, &in[0]);
  if (gp_exec_weight_grads(e))
    GP_TRY(be->conv2d_backward_filter(be, &d, GP_F32P(&in[0]), GP_F32P(dout), e->bind->grad[0],
                                      k->bias ? e->bind->grad[1] : NULL));
  if (din[0].data)
    GP_TRY(be->conv2d_backward_data(be, &d, GP_F32P(dout), e->bind->param[0], GP_F32P(&din[0])));
  return GP_OK;
}

const gp_layer_type gp_layer_conv1d = {
    .name = "conv1d",
    .doc = "1-D convolution, `[C, L]` to `[out_channels, L']` (PyTorch's `nn.Conv1d`)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(conv1d_conf),
    GP_LAYER_SETTINGS(conv1d_settings),
    .configure = conv1d_configure,
    .shape = conv1d_shape,
    .cost = conv1d_cost,
    .forward = conv1d_forward,
    .backward = conv1d_backward,
    .backward_ignores_out = 1,
};
