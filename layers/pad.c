/* pad: adds zero channels before and after dim 0 of [C, ...]. With avgpool (kernel 1,
 * stride 2) it makes the parameter-free "option A" shortcut of He et al.'s CIFAR ResNets. */
#include "layers/layers.h"

typedef struct pad_conf {
  union { /* the table reads the array; the code uses the names */
    int64_t channels[2];
    struct {
      int64_t before, after;
    };
  };
} pad_conf;

static const gp_setting pad_settings[] = {
    {.key = "channels",
     GP_SETTING_INTS_AT(pad_conf, channels),
     .required = 1,
     .min = 0,
     .max = GP_LAYER_MAX_DIM,
     .doc = "zero channels added [before, after] dim 0"},
};

static gp_status pad_shape(gp_layer *l) {
  const pad_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim < 1)
    return GP_ERR(GP_ERR_SPEC, "pad expects input [C, ...], got %s", gp_layers_shape_str(x, buf));
  gp_shape y = *x;
  y.d[0] += k->before + k->after;
  return gp_layers_set_out(l, &y);
}

static void pad_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0.0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

static gp_status pad_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                             void **saved) {
  (void)saved;
  const pad_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n = in[0].shape.d[0], xs = gp_layers_numel(&l->in_shape[0]);
  int64_t ys = gp_layers_numel(&l->out_shape), inner = xs / l->in_shape[0].d[0];
  GP_TRY(be->zero(be, out->data, (size_t)(n * ys) * sizeof(float)));
  return be->copy2d(be, n, xs, GP_F32P(&in[0]), xs, GP_F32P(out) + k->before * inner, ys);
}

static gp_status pad_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                              const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                              void *saved) {
  (void)out;
  (void)saved;
  const pad_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  int64_t n = in[0].shape.d[0], xs = gp_layers_numel(&l->in_shape[0]);
  int64_t ys = gp_layers_numel(&l->out_shape), inner = xs / l->in_shape[0].d[0];
  return e->be->copy2d(e->be, n, xs, GP_F32P(dout) + k->before * inner, ys, GP_F32P(&din[0]), xs);
}

const gp_layer_type gp_layer_pad = {
    .name = "pad",
    .doc = "adds zero channels before and after dim 0 of `[C, ...]`",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(pad_conf),
    GP_LAYER_SETTINGS(pad_settings),
    .configure = gp_layers_configure,
    .shape = pad_shape,
    .cost = pad_cost,
    .forward = pad_forward,
    .backward = pad_backward,
};
