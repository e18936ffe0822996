/* identity: passes its one input through (a named tap point, or a no-op shortcut). */
#include "layers/layers.h"

static gp_status identity_shape(gp_layer *l) {
  l->n_params = 0;
  GP_TRY(gp_layers_set_out(l, &l->in_shape[0]));
  l->out_dtype = l->in_dtype[0]; /* a pure copy may carry labels or ids too */
  return GP_OK;
}

static void identity_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * (int64_t)gp_dtype_size(l->out_dtype);
}

const gp_layer_type gp_layer_identity = {
    .name = "identity",
    .doc = "its one input, unchanged (a named tap point)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = 0,
    .configure = gp_layers_configure,
    .shape = identity_shape,
    .cost = identity_cost,
    .forward = gp_layers_copy_forward,
    .backward = gp_layers_copy_backward,
    .backward_ignores_out = 1,
    .grad_is_dout = 1,
};
