/* concat: joins 2..8 inputs along one axis of the per-sample shape (default 0, the channel
 * axis); every other dimension must match. One strided copy per input. */
#include "layers/layers.h"

typedef struct concat_conf {
  int64_t axis; /* as written; may be negative (from the end) */
  int ax;       /* resolved by shape() */
} concat_conf;

static const gp_setting concat_settings[] = {
    {.key = "axis",
     GP_SETTING_INT_AT(concat_conf, axis),
     .idflt = 0,
     .min = -GP_MAX_DIMS,
     .max = GP_MAX_DIMS - 1,
     .doc = "the per-sample dimension joined along; negative counts from the end"},
};

static gp_status concat_shape(gp_layer *l) {
  concat_conf *k = l->conf;
  const gp_shape *a = &l->in_shape[0];
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  int64_t ax = k->axis < 0 ? k->axis + a->ndim : k->axis;
  if (ax < 0 || ax >= a->ndim)
    return GP_ERR(GP_ERR_SPEC, "concat: axis %lld is outside input 1's shape %s",
                  (long long)k->axis, gp_layers_shape_str(a, b1));
  k->ax = (int)ax;
  gp_shape y = *a;
  for (int i = 1; i < l->n_in; i++) {
    const gp_shape *b = &l->in_shape[i];
    int ok = b->ndim == a->ndim;
    for (int j = 0; ok && j < a->ndim; j++)
      ok = j == k->ax || b->d[j] == a->d[j];
    if (!ok)
      return GP_ERR(GP_ERR_SPEC, "concat along axis %d: input %d has shape %s, input 1 has %s",
                    k->ax, i + 1, gp_layers_shape_str(b, b1), gp_layers_shape_str(a, b2));
    y.d[k->ax] += b->d[k->ax];
  }
  return gp_layers_set_out(l, &y);
}

static void concat_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0.0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

/* Elements of one input's block per outer row (its axis extent times the inner dims), and
 * the number of outer rows (batch times the dims before the axis). */
static int64_t block(const gp_shape *s, int ax) {
  int64_t n = 1;
  for (int j = ax; j < s->ndim; j++)
    n *= s->d[j];
  return n;
}

static int64_t outer(const gp_layer *l, int64_t batch) {
  const concat_conf *k = l->conf;
  int64_t n = batch;
  for (int j = 0; j < k->ax; j++)
    n *= l->out_shape.d[j];
  return n;
}

static gp_status concat_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                void **saved) {
  (void)saved;
  const concat_conf *k = l->conf;
  int64_t rows = outer(l, out->shape.d[0]), ld = block(&l->out_shape, k->ax), off = 0;
  for (int i = 0; i < l->n_in; i++) {
    int64_t cols = block(&l->in_shape[i], k->ax);
    GP_TRY(e->be->copy2d(e->be, rows, cols, GP_F32P(&in[i]), cols, GP_F32P(out) + off, ld));
    off += cols;
  }
  return GP_OK;
}

static gp_status concat_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                 const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                 void *saved) {
  (void)in;
  (void)saved;
  const concat_conf *k = l->conf;
  int64_t rows = outer(l, out->shape.d[0]), ld = block(&l->out_shape, k->ax), off = 0;
  for (int i = 0; i < l->n_in; i++) {
    int64_t cols = block(&l->in_shape[i], k->ax);
    if (din[i].data)
      GP_TRY(e->be->copy2d(e->be, rows, cols, GP_F32P(dout) + off, ld, GP_F32P(&din[i]), cols));
    off += cols;
  }
  return GP_OK;
}

const gp_layer_type gp_layer_concat = {
    .name = "concat",
    .doc = "joins 2 to 8 inputs along one axis; every other dimension must match",
    .min_inputs = 2,
    .max_inputs = GP_MAX_INPUTS,
    .conf_size = sizeof(concat_conf),
    GP_LAYER_SETTINGS(concat_settings),
    .configure = gp_layers_configure,
    .shape = concat_shape,
    .cost = concat_cost,
    .forward = concat_forward,
    .backward = concat_backward,
};
