/* dropout: inverted dropout while training, identity in evaluation. The mask is a pure
 * function of (seed, step, layer path, element index in the mini-batch), so nothing is
 * stored for backward, a re-materializing forward reproduces it, and the number of
 * micro-batches does not change it. */
#include "layers/layers.h"

typedef struct dropout_conf {
  double p;
} dropout_conf;

static const gp_setting dropout_settings[] = {
    {.key = "p",
     GP_SETTING_FLOAT_AT(dropout_conf, p),
     .fdflt = 0.5,
     .range = GP_RANGE_BELOW_ONE,
     .doc = "probability of zeroing an element while training (the rest are scaled by "
            "1/(1-p)); off in evaluation"},
};

static gp_status dropout_shape(gp_layer *l) {
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  return gp_layers_set_out(l, &l->in_shape[0]);
}

static void dropout_cost(const gp_layer *l, gp_cost *c) {
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = 2.0 * n;
  c->bwd_flops = 2.0 * n;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)n * 4;
}

static uint64_t mask_offset(const gp_layer *l, const gp_exec *e) {
  return (uint64_t)e->sample_offset * (uint64_t)gp_shape_numel(&l->in_shape[0]);
}

static gp_status dropout_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  (void)saved;
  const dropout_conf *k = l->conf;
  if (!e->training || k->p == 0.0) return gp_layers_copy(e->be, &in[0], out);
  return e->be->dropout_forward(e->be, gp_shape_numel(&in[0].shape), (float)k->p,
                                gp_layer_rng_key(l, e), mask_offset(l, e), GP_F32P(&in[0]),
                                GP_F32P(out));
}

static gp_status dropout_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved) {
  (void)out;
  (void)saved;
  const dropout_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  if (!e->training || k->p == 0.0) return gp_layers_copy(e->be, dout, &din[0]);
  return e->be->dropout_backward(e->be, gp_shape_numel(&in[0].shape), (float)k->p,
                                 gp_layer_rng_key(l, e), mask_offset(l, e), GP_F32P(dout),
                                 GP_F32P(&din[0]));
}

const gp_layer_type gp_layer_dropout = {
    .name = "dropout",
    .doc = "inverted dropout while training, the identity in evaluation",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(dropout_conf),
    GP_LAYER_SETTINGS(dropout_settings),
    .configure = gp_layers_configure,
    .shape = dropout_shape,
    .cost = dropout_cost,
    .forward = dropout_forward,
    .backward = dropout_backward,
    /* the mask is recomputed from the counter, so neither pass reads x or y again */
    .forward_in_place = 1,
    .backward_ignores_out = 1,
};
