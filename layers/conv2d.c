/* conv2d: 2-D convolution over [C, H, W] with stride, padding, dilation and groups
 * (PyTorch's Conv2d). weight [k, C/groups, kh, kw], bias [k]. */
#include "layers/layers.h"

typedef struct conv2d_conf {
  int64_t k;
  GP_LAYERS_WINDOW2D_FIELDS;
  union {
    int64_t dilation[2];
    struct {
      int64_t dh, dw;
    };
  };
  int64_t groups;
  int bias, he;
} conv2d_conf;

static const gp_setting conv2d_settings[] = {
    {.key = "out_channels",
     GP_SETTING_INT_AT(conv2d_conf, k),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "output channels"},
    {.key = "kernel",
     GP_SETTING_INTS_AT(conv2d_conf, kernel),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "kernel size [height, width]"},
    {.key = "stride",
     GP_SETTING_INTS_AT(conv2d_conf, stride),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "stride [height, width]"},
    {.key = "padding",
     GP_SETTING_INTS_AT(conv2d_conf, padding),
     .idflt = 0,
     .min = 0,
     .max = GP_LAYER_MAX_DIM,
     .doc = "zeros added on both sides [height, width]"},
    {.key = "dilation",
     GP_SETTING_INTS_AT(conv2d_conf, dilation),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "spacing of the kernel's taps [height, width]"},
    {.key = "groups",
     GP_SETTING_INT_AT(conv2d_conf, groups),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "channel groups: must divide the input and the output channels"},
    {.key = "bias", GP_SETTING_BOOL_AT(conv2d_conf, bias), .idflt = 1, .doc = "add a bias"},
    {.key = "init",
     GP_SETTING_CHOICE_AT(conv2d_conf, he),
     .choices = gp_layers_inits,
     .idflt = 0,
     .doc = "weight init: `default` U(-b, b), b = 1/sqrt(fan_in) (PyTorch's); `he` "
            "N(0, 2/fan_in)"},
};

static gp_status conv2d_configure(gp_layer *l, gp_cfg *cfg) {
  conv2d_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->k % k->groups)
    return gp_cfg_error(cfg, "groups", "out_channels %lld is not divisible by groups %lld",
                        (long long)k->k, (long long)k->groups);
  return GP_OK;
}

static gp_status conv2d_shape(gp_layer *l) {
  const conv2d_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 3)
    return GP_ERR(GP_ERR_SPEC, "conv2d expects input [C, H, W], got %s",
                  gp_layers_shape_str(x, buf));
  int64_t c = x->d[0], h = x->d[1], w = x->d[2];
  if (c % k->groups)
    return GP_ERR(GP_ERR_SPEC,
                  "conv2d: input channels %lld (input %s) are not divisible by "
                  "groups %lld",
                  (long long)c, gp_layers_shape_str(x, buf), (long long)k->groups);
  int64_t eh = k->dh * (k->kh - 1) + 1, ew = k->dw * (k->kw - 1) + 1;
  if (eh > h + 2 * k->ph || ew > w + 2 * k->pw)
    return GP_ERR(GP_ERR_SPEC,
                  "conv2d: kernel %lldx%lld (dilated %lldx%lld) is larger than "
                  "the padded input %lldx%lld (input %s, padding [%lld, %lld])",
                  (long long)k->kh, (long long)k->kw, (long long)eh, (long long)ew,
                  (long long)(h + 2 * k->ph), (long long)(w + 2 * k->pw),
                  gp_layers_shape_str(x, buf), (long long)k->ph, (long long)k->pw);
  int64_t od[3] = {k->k, (h + 2 * k->ph - eh) / k->sh + 1, (w + 2 * k->pw - ew) / k->sw + 1};
  gp_shape y = gp_shape_of(3, od);
  GP_TRY(gp_layers_set_out(l, &y));
  int64_t fan_in = c / k->groups * k->kh * k->kw;
  int64_t wd[4] = {k->k, c / k->groups, k->kh, k->kw};
  gp_shape ws = gp_shape_of(4, wd), bs = gp_shape_of(1, &k->k);
  GP_TRY(gp_layers_add_param(l, "weight", &ws,
                             k->he ? GP_INIT_KAIMING_NORMAL : GP_INIT_UNIFORM_FAN_IN, fan_in, 1));
  if (k->bias)
    GP_TRY(gp_layers_add_param(l, "bias", &bs, k->he ? GP_INIT_ZEROS : GP_INIT_UNIFORM_FAN_IN,
                               fan_in, 1));
  return GP_OK;
}

static void conv2d_cost(const gp_layer *l, gp_cost *c) {
  const conv2d_conf *k = l->conf;
  double outs = (double)gp_layers_numel(&l->out_shape);
  double macs = outs * (double)(l->in_shape[0].d[0] / k->groups * k->kh * k->kw);
  c->fwd_flops = 2.0 * macs + (k->bias ? outs : 0.0);
  c->bwd_flops = 4.0 * macs + (k->bias ? outs : 0.0); /* data and filter gradients */
  c->bwd_data_flops = 2.0 * macs;
  c->params = gp_layers_numel(&l->pdesc[0].shape) + (k->bias ? k->k : 0);
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)outs * 4;
}

static gp_conv2d_desc conv2d_desc(const gp_layer *l, const gp_tensor *x) {
  const conv2d_conf *k = l->conf;
  gp_conv2d_desc d = {
      .n = x->shape.d[0],
      .c = l->in_shape[0].d[0],
      .h = l->in_shape[0].d[1],
      .w = l->in_shape[0].d[2],
      .k = k->k,
      .oh = l->out_shape.d[1],
      .ow = l->out_shape.d[2],
      .kh = k->kh,
      .kw = k->kw,
      .sh = k->sh,
      .sw = k->sw,
      .ph = k->ph,
      .pw = k->pw,
      .dh = k->dh,
      .dw = k->dw,
      .groups = k->groups,
  };
  return d;
}

static gp_status conv2d_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                void **saved) {
  (void)saved;
  const conv2d_conf *k = l->conf;
  gp_conv2d_desc d = conv2d_desc(l, &in[0]);
  return e->be->conv2d_forward(e->be, &d, GP_F32P(&in[0]), e->bind->param[0],
                               k->bias ? e->bind->param[1] : NULL, GP_F32P(out));
}

static gp_status conv2d_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                 const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                 void *saved) {
  (void)out;
  (void)saved;
  const conv2d_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_conv2d_desc d = conv2d_desc(l, &in[0]);
  if (gp_exec_weight_grads(e)) /* W: reads x and dy */
    GP_TRY(be->conv2d_backward_filter(be, &d, GP_F32P(&in[0]), GP_F32P(dout), e->bind->grad[0],
                                      k->bias ? e->bind->grad[1] : NULL));
  /* A first layer's input needs no gradient: skip the data GEMM and col2im entirely. */
  if (din[0].data)
    GP_TRY(be->conv2d_backward_data(be, &d, GP_F32P(dout), e->bind->param[0], GP_F32P(&din[0])));
  return GP_OK;
}

const gp_layer_type gp_layer_conv2d = {
    .name = "conv2d",
    .doc = "2-D convolution, `[C, H, W]` to `[out_channels, H', W']` (PyTorch's `nn.Conv2d`)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(conv2d_conf),
    GP_LAYER_SETTINGS(conv2d_settings),
    .configure = conv2d_configure,
    .shape = conv2d_shape,
    .cost = conv2d_cost,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .backward_ignores_out = 1,
};
