/* slice: the range [start, end) of one axis of the per-sample shape (default axis 0, the
 * channels), like x[:, start:end] in PyTorch. Negative start or end count from the end of
 * the axis, as in Python; end left out means to the end. A range outside the axis or an
 * empty one is an error, never clamped. One strided copy. */
#include "layers/layers.h"

typedef struct slice_conf {
  int64_t axis, start, end; /* as written */
  int has_end;
  int ax;         /* resolved by shape() */
  int64_t s0, s1; /* resolved range */
} slice_conf;

static const gp_setting slice_settings[] = {
    {.key = "axis",
     GP_SETTING_INT_AT(slice_conf, axis),
     .idflt = 0,
     .min = -GP_MAX_DIMS,
     .max = GP_MAX_DIMS - 1,
     .doc = "the per-sample dimension sliced; negative counts from the end"},
    {.key = "start",
     GP_SETTING_INT_AT(slice_conf, start),
     .idflt = 0,
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .doc = "first index; negative counts from the end"},
    {.key = "end",
     GP_SETTING_INT_AT(slice_conf, end),
     GP_SETTING_HAS_AT(slice_conf, has_end),
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .dflt_doc = "the axis's end",
     .doc = "index after the last; negative counts from the end"},
};

static gp_status slice_shape(gp_layer *l) {
  slice_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  int64_t ax = k->axis < 0 ? k->axis + x->ndim : k->axis;
  if (ax < 0 || ax >= x->ndim)
    return GP_ERR(GP_ERR_SPEC, "slice: axis %lld is outside the input's shape %s",
                  (long long)k->axis, gp_layers_shape_str(x, buf));
  k->ax = (int)ax;
  int64_t n = x->d[ax];
  int64_t s0 = k->start < 0 ? k->start + n : k->start;
  int64_t s1 = !k->has_end ? n : k->end < 0 ? k->end + n : k->end;
  if (s0 < 0 || s1 > n || s0 >= s1)
    return GP_ERR(GP_ERR_SPEC,
                  "slice: start %lld, end %lld is not a non-empty range of axis %d (size %lld) "
                  "of input %s",
                  (long long)k->start, (long long)(k->has_end ? k->end : n), k->ax, (long long)n,
                  gp_layers_shape_str(x, buf));
  k->s0 = s0;
  k->s1 = s1;
  gp_shape y = *x;
  y.d[ax] = s1 - s0;
  return gp_layers_set_out(l, &y);
}

static void slice_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0.0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

/* rows: batch times the dims before the axis; inner: the dims after it. */
static void geometry(const gp_layer *l, int64_t batch, int64_t *rows, int64_t *inner) {
  const slice_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  *rows = batch;
  *inner = 1;
  for (int j = 0; j < k->ax; j++)
    *rows *= x->d[j];
  for (int j = k->ax + 1; j < x->ndim; j++)
    *inner *= x->d[j];
}

static gp_status slice_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                               void **saved) {
  (void)saved;
  const slice_conf *k = l->conf;
  int64_t rows, inner, n = l->in_shape[0].d[k->ax];
  geometry(l, in[0].shape.d[0], &rows, &inner);
  int64_t cols = (k->s1 - k->s0) * inner;
  return e->be->copy2d(e->be, rows, cols, GP_F32P(&in[0]) + k->s0 * inner, n * inner, GP_F32P(out),
                       cols);
}

static gp_status slice_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                void *saved) {
  (void)out;
  (void)saved;
  const slice_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  int64_t rows, inner, n = l->in_shape[0].d[k->ax];
  geometry(l, in[0].shape.d[0], &rows, &inner);
  int64_t cols = (k->s1 - k->s0) * inner;
  if (cols < n * inner) /* the rest of the input gets zero gradient */
    GP_TRY(e->be->zero(e->be, din[0].data, gp_tensor_bytes(&din[0])));
  return e->be->copy2d(e->be, rows, cols, GP_F32P(dout), cols, GP_F32P(&din[0]) + k->s0 * inner,
                       n * inner);
}

const gp_layer_type gp_layer_slice = {
    .name = "slice",
    .doc = "the range `[start, end)` of one axis of the per-sample shape, like `x[:, start:end]`",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(slice_conf),
    GP_LAYER_SETTINGS(slice_settings),
    .configure = gp_layers_configure,
    .shape = slice_shape,
    .cost = slice_cost,
    .forward = slice_forward,
    .backward = slice_backward,
};
