/* add: the element-wise sum of 2..8 inputs of one shape (residual connections). */
#include "layers/layers.h"

static gp_status add_shape(gp_layer *l) {
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  for (int i = 1; i < l->n_in; i++)
    if (!gp_shape_equal(&l->in_shape[i], &l->in_shape[0]))
      return GP_ERR(GP_ERR_SPEC, "add: input %d has shape %s, input 1 has %s", i + 1,
                    gp_layers_shape_str(&l->in_shape[i], b1),
                    gp_layers_shape_str(&l->in_shape[0], b2));
  return gp_layers_set_out(l, &l->in_shape[0]);
}

static void add_cost(const gp_layer *l, gp_cost *c) {
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = n * (l->n_in - 1);
  c->bwd_flops = 0.0; /* copies */
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)n * 4;
}

static gp_status add_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                             void **saved) {
  (void)saved;
  gp_backend *be = e->be;
  int64_t n = gp_shape_numel(&out->shape);
  GP_TRY(be->copy(be, out->data, in[0].data, (size_t)n * sizeof(float)));
  for (int i = 1; i < l->n_in; i++)
    GP_TRY(be->axpby(be, n, 1.0f, GP_F32P(&in[i]), 1.0f, GP_F32P(out)));
  return GP_OK;
}

static gp_status add_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                              const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                              void *saved) {
  (void)in;
  (void)out;
  (void)saved;
  for (int i = 0; i < l->n_in; i++)
    if (din[i].data) GP_TRY(gp_layers_copy(e->be, dout, &din[i]));
  return GP_OK;
}

const gp_layer_type gp_layer_add = {
    .name = "add",
    .doc = "the element-wise sum of 2 to 8 inputs of one shape (residual connections)",
    .min_inputs = 2,
    .max_inputs = GP_MAX_INPUTS,
    .conf_size = 0,
    .configure = gp_layers_configure,
    .shape = add_shape,
    .cost = add_cost,
    .forward = add_forward,
    .backward = add_backward,
    .backward_ignores_out = 1,
    .grad_is_dout = 1,
};
