/* mul: the element-wise product of two inputs of one shape, for gates (SwiGLU and GeGLU are
 * linear, silu or gelu, mul, linear in a model file). */
#include "layers/layers.h"

static gp_status mul_shape(gp_layer *l) {
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (!gp_shape_equal(&l->in_shape[1], &l->in_shape[0]))
    return GP_ERR(GP_ERR_SPEC, "mul: input 2 has shape %s, input 1 has %s (no broadcasting)",
                  gp_layers_shape_str(&l->in_shape[1], b1),
                  gp_layers_shape_str(&l->in_shape[0], b2));
  return gp_layers_set_out(l, &l->in_shape[0]);
}

static void mul_cost(const gp_layer *l, gp_cost *c) {
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = n;
  c->bwd_flops = 2.0 * n; /* one product per input */
  c->params = 0;
  c->saved_bytes = 0; /* the backward reads the inputs, which the executor keeps */
  c->out_bytes = (int64_t)n * 4;
}

static gp_status mul_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                             void **saved) {
  (void)l;
  (void)saved;
  return e->be->mul(e->be, gp_shape_numel(&out->shape), GP_F32P(&in[0]), GP_F32P(&in[1]),
                    GP_F32P(out));
}

/* d(a b)/da = b and /db = a: each input's gradient is dout times the other input. */
static gp_status mul_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                              const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                              void *saved) {
  (void)l;
  (void)out;
  (void)saved;
  int64_t n = gp_shape_numel(&dout->shape);
  for (int i = 0; i < 2; i++)
    if (din[i].data)
      GP_TRY(e->be->mul(e->be, n, GP_F32P(dout), GP_F32P(&in[1 - i]), GP_F32P(&din[i])));
  return GP_OK;
}

const gp_layer_type gp_layer_mul = {
    .name = "mul",
    .doc = "the element-wise product of two inputs of one shape (gates: SwiGLU, GeGLU)",
    .min_inputs = 2,
    .max_inputs = 2,
    .conf_size = 0,
    .configure = gp_layers_configure,
    .shape = mul_shape,
    .cost = mul_cost,
    .forward = mul_forward,
    .backward = mul_backward,
    .backward_ignores_out = 1,
};
