/* flatten: [d0, d1, ...] -> [d0 * d1 * ...] per sample (NCHW memory is already in that
 * order, so it is a copy). */
#include "layers/layers.h"

static gp_status flatten_shape(gp_layer *l) {
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  int64_t n = 1;
  for (int i = 0; i < l->in_shape[0].ndim; i++)
    n *= l->in_shape[0].d[i];
  gp_shape s = gp_shape_of(1, &n);
  return gp_layers_set_out(l, &s);
}

static void flatten_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

const gp_layer_type gp_layer_flatten = {
    .name = "flatten",
    .doc = "`[d0, d1, ...]` to `[d0 * d1 * ...]` per sample",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = 0,
    .configure = gp_layers_configure,
    .shape = flatten_shape,
    .cost = flatten_cost,
    .forward = gp_layers_copy_forward,
    .backward = gp_layers_copy_backward,
    .backward_ignores_out = 1,
    .grad_is_dout = 1,
};
