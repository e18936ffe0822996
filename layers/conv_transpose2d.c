/* conv_transpose2d: the transposed 2-D convolution (PyTorch's ConvTranspose2d), the U-Net
 * decoder's learned upsampling. weight [C, out_channels/groups, kh, kw], bias [out_channels]. */
#include "layers/layers.h"

/* A transposed convolution from x [C, H, W] to y [K, H', W'] is the data gradient of the
 * convolution from y's shape to x's with the same weight, which is already [C, K/groups, kh,
 * kw] in conv2d's layout ([out, in/groups, ...] of that convolution). So its forward is that
 * convolution's backward_data, its input gradient that convolution's forward, and its weight
 * gradient that convolution's filter gradient with the roles of x and dy swapped: every backend
 * already has all three. */
typedef struct convt_conf {
  int64_t k;
  GP_LAYERS_WINDOW2D_FIELDS;
  union {
    int64_t dilation[2];
    struct {
      int64_t dh, dw;
    };
  };
  union {
    int64_t output_padding[2];
    struct {
      int64_t oph, opw;
    };
  };
  int64_t groups;
  int bias;
} convt_conf;

static const gp_setting convt_settings[] = {
    {.key = "out_channels",
     GP_SETTING_INT_AT(convt_conf, k),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "output channels"},
    {.key = "kernel",
     GP_SETTING_INTS_AT(convt_conf, kernel),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "kernel size [height, width]"},
    {.key = "stride",
     GP_SETTING_INTS_AT(convt_conf, stride),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "stride [height, width]: the upsampling factor"},
    {.key = "padding",
     GP_SETTING_INTS_AT(convt_conf, padding),
     .idflt = 0,
     .min = 0,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows and columns taken off both sides of the output [height, width]"},
    {.key = "output_padding",
     GP_SETTING_INTS_AT(convt_conf, output_padding),
     .idflt = 0,
     .min = 0,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows and columns added to the bottom and right of the output [height, width]; "
            "smaller than stride"},
    {.key = "dilation",
     GP_SETTING_INTS_AT(convt_conf, dilation),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "spacing of the kernel's taps [height, width]"},
    {.key = "groups",
     GP_SETTING_INT_AT(convt_conf, groups),
     .idflt = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "channel groups: must divide the input and the output channels"},
    {.key = "bias", GP_SETTING_BOOL_AT(convt_conf, bias), .idflt = 1, .doc = "add a bias"},
};

static gp_status convt_configure(gp_layer *l, gp_cfg *cfg) {
  convt_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->k % k->groups)
    return gp_cfg_error(cfg, "groups", "out_channels %lld is not divisible by groups %lld",
                        (long long)k->k, (long long)k->groups);
  /* PyTorch allows output_padding < max(stride, dilation); past the stride the extra rows
   * would be a convolution's second output row, which the shared descriptor cannot say. */
  for (int i = 0; i < 2; i++)
    if (k->output_padding[i] >= k->stride[i])
      return gp_cfg_error(
          cfg, "output_padding", "output_padding %lld must be smaller than stride %lld (%s)",
          (long long)k->output_padding[i], (long long)k->stride[i], i ? "width" : "height");
  return GP_OK;
}

static gp_status convt_shape(gp_layer *l) {
  const convt_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 3)
    return GP_ERR(GP_ERR_SPEC, "conv_transpose2d expects input [C, H, W], got %s",
                  gp_layers_shape_str(x, buf));
  int64_t c = x->d[0], h = x->d[1], w = x->d[2];
  if (c % k->groups)
    return GP_ERR(GP_ERR_SPEC,
                  "conv_transpose2d: input channels %lld (input %s) are not divisible by "
                  "groups %lld",
                  (long long)c, gp_layers_shape_str(x, buf), (long long)k->groups);
  int64_t oh = (h - 1) * k->sh - 2 * k->ph + k->dh * (k->kh - 1) + k->oph + 1;
  int64_t ow = (w - 1) * k->sw - 2 * k->pw + k->dw * (k->kw - 1) + k->opw + 1;
  if (oh < 1 || ow < 1)
    return GP_ERR(GP_ERR_SPEC,
                  "conv_transpose2d: padding [%lld, %lld] leaves no output (%lldx%lld) of "
                  "input %s",
                  (long long)k->ph, (long long)k->pw, (long long)oh, (long long)ow,
                  gp_layers_shape_str(x, buf));
  int64_t od[3] = {k->k, oh, ow};
  gp_shape y = gp_shape_of(3, od);
  GP_TRY(gp_layers_set_out(l, &y));
  /* PyTorch's fan_in for ConvTranspose2d is weight.size(1) * kh * kw */
  int64_t fan_in = k->k / k->groups * k->kh * k->kw;
  int64_t wd[4] = {c, k->k / k->groups, k->kh, k->kw};
  gp_shape ws = gp_shape_of(4, wd), bs = gp_shape_of(1, &k->k);
  GP_TRY(gp_layers_add_param(l, "weight", &ws, GP_INIT_UNIFORM_FAN_IN, fan_in, 1));
  if (k->bias) GP_TRY(gp_layers_add_param(l, "bias", &bs, GP_INIT_UNIFORM_FAN_IN, fan_in, 1));
  return GP_OK;
}

static void convt_cost(const gp_layer *l, gp_cost *c) {
  const convt_conf *k = l->conf;
  double outs = (double)gp_layers_numel(&l->out_shape);
  /* every input value meets out_channels/groups * kh * kw weights */
  double macs =
      (double)gp_layers_numel(&l->in_shape[0]) * (double)(k->k / k->groups * k->kh * k->kw);
  c->fwd_flops = 2.0 * macs + (k->bias ? outs : 0.0);
  c->bwd_flops = 4.0 * macs + (k->bias ? outs : 0.0);
  c->bwd_data_flops = 2.0 * macs;
  c->params = gp_layers_numel(&l->pdesc[0].shape) + (k->bias ? k->k : 0);
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)outs * 4;
}

/* The convolution whose data gradient this layer is: from y's shape to x's. */
static gp_conv2d_desc convt_desc(const gp_layer *l, const gp_tensor *x) {
  const convt_conf *k = l->conf;
  gp_conv2d_desc d = {
      .n = x->shape.d[0],
      .c = k->k,
      .h = l->out_shape.d[1],
      .w = l->out_shape.d[2],
      .k = l->in_shape[0].d[0],
      .oh = l->in_shape[0].d[1],
      .ow = l->in_shape[0].d[2],
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

static gp_status convt_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                               void **saved) {
  (void)saved;
  const convt_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_conv2d_desc d = convt_desc(l, &in[0]);
  GP_TRY(be->conv2d_backward_data(be, &d, GP_F32P(&in[0]), e->bind->param[0], GP_F32P(out)));
  if (k->bias) GP_TRY(be->bias_add(be, d.n, d.c, d.h * d.w, e->bind->param[1], GP_F32P(out)));
  return GP_OK;
}

static gp_status convt_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                void *saved) {
  (void)out;
  (void)saved;
  const convt_conf *k = l->conf;
  gp_backend *be = e->be;
  gp_conv2d_desc d = convt_desc(l, &in[0]);
  if (gp_exec_weight_grads(e)) { /* W: reads x and dy; the filter op's own dbias would sum x */
    GP_TRY(
        be->conv2d_backward_filter(be, &d, GP_F32P(dout), GP_F32P(&in[0]), e->bind->grad[0], NULL));
    if (k->bias) GP_TRY(be->bias_grad(be, d.n, d.c, d.h * d.w, GP_F32P(dout), e->bind->grad[1]));
  }
  if (din[0].data)
    GP_TRY(be->conv2d_forward(be, &d, GP_F32P(dout), e->bind->param[0], NULL, GP_F32P(&din[0])));
  return GP_OK;
}

const gp_layer_type gp_layer_conv_transpose2d = {
    .name = "conv_transpose2d",
    .doc = "transposed 2-D convolution, `[C, H, W]` to `[out_channels, H', W']` with H' = (H - 1) "
           "stride - 2 padding + dilation (kernel - 1) + output_padding + 1 (PyTorch's "
           "`nn.ConvTranspose2d`, same weight layout)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(convt_conf),
    GP_LAYER_SETTINGS(convt_settings),
    .configure = convt_configure,
    .shape = convt_shape,
    .cost = convt_cost,
    .forward = convt_forward,
    .backward = convt_backward,
    .backward_ignores_out = 1,
};
