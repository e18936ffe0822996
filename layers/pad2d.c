/* pad2d: zero-pads (or, with negative amounts, crops) the two spatial dims of [C, H, W], like
 * PyTorch's F.pad(x, (left, right, top, bottom)). AmoebaNet's FactorizedReduce shifts its
 * input by one pixel with {top: -1, left: -1, bottom: 1, right: 1}. */
#include "layers/layers.h"

typedef struct pad2d_conf {
  int64_t top, bottom, left, right;
} pad2d_conf;

static const gp_setting pad2d_settings[] = {
    {.key = "top",
     GP_SETTING_INT_AT(pad2d_conf, top),
     .idflt = 0,
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows or columns added at the top (negative: removed)"},
    {.key = "bottom",
     GP_SETTING_INT_AT(pad2d_conf, bottom),
     .idflt = 0,
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows or columns added at the bottom (negative: removed)"},
    {.key = "left",
     GP_SETTING_INT_AT(pad2d_conf, left),
     .idflt = 0,
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows or columns added at the left (negative: removed)"},
    {.key = "right",
     GP_SETTING_INT_AT(pad2d_conf, right),
     .idflt = 0,
     .min = -GP_LAYER_MAX_DIM,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows or columns added at the right (negative: removed)"},
};

static gp_status pad2d_shape(gp_layer *l) {
  const pad2d_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 3)
    return GP_ERR(GP_ERR_SPEC, "pad2d expects input [C, H, W], got %s",
                  gp_layers_shape_str(x, buf));
  int64_t h = x->d[1] + k->top + k->bottom, w = x->d[2] + k->left + k->right;
  if (h < 1 || w < 1)
    return GP_ERR(GP_ERR_SPEC,
                  "pad2d: top %lld, bottom %lld, left %lld, right %lld leave %lldx%lld of input %s",
                  (long long)k->top, (long long)k->bottom, (long long)k->left, (long long)k->right,
                  (long long)h, (long long)w, gp_layers_shape_str(x, buf));
  int64_t od[3] = {x->d[0], h, w};
  gp_shape y = gp_shape_of(3, od);
  return gp_layers_set_out(l, &y);
}

static void pad2d_cost(const gp_layer *l, gp_cost *c) {
  c->fwd_flops = c->bwd_flops = 0.0;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = gp_layers_numel(&l->out_shape) * 4;
}

/* The rows and columns of the output that come from the input: [r0, r1) x [c0, c1) of the
 * output plane, reading input row r - top and column c - left. Empty when nothing overlaps. */
typedef struct overlap {
  int64_t r0, r1, c0, c1;
} overlap;

static int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

static overlap overlap_of(const gp_layer *l) {
  const pad2d_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0], *y = &l->out_shape;
  overlap o = {max64(0, k->top), min64(y->d[1], x->d[1] + k->top), max64(0, k->left),
               min64(y->d[2], x->d[2] + k->left)};
  return o;
}

/* One strided copy per overlapping row, each over every (sample, channel) plane at once:
 * a handful of calls however large the batch. to_out: input -> output, else back. */
static gp_status move(const gp_layer *l, gp_backend *be, int64_t batch, float *x, float *y,
                      int to_out) {
  const pad2d_conf *k = l->conf;
  const gp_shape *xs = &l->in_shape[0], *ys = &l->out_shape;
  int64_t planes = batch * xs->d[0], hw = xs->d[1] * xs->d[2], ohw = ys->d[1] * ys->d[2];
  overlap o = overlap_of(l);
  if (o.c1 <= o.c0) return GP_OK; /* all padding: nothing to move */
  for (int64_t r = o.r0; r < o.r1; r++) {
    float *in = x + (r - k->top) * xs->d[2] + (o.c0 - k->left);
    float *out = y + r * ys->d[2] + o.c0;
    if (to_out)
      GP_TRY(be->copy2d(be, planes, o.c1 - o.c0, in, hw, out, ohw));
    else
      GP_TRY(be->copy2d(be, planes, o.c1 - o.c0, out, ohw, in, hw));
  }
  return GP_OK;
}

static gp_status pad2d_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                               void **saved) {
  (void)saved;
  overlap o = overlap_of(l);
  if (o.r1 - o.r0 < l->out_shape.d[1] || o.c1 - o.c0 < l->out_shape.d[2])
    GP_TRY(e->be->zero(e->be, out->data, gp_tensor_bytes(out)));
  return move(l, e->be, in[0].shape.d[0], GP_F32P(&in[0]), GP_F32P(out), 1);
}

static gp_status pad2d_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                void *saved) {
  (void)out;
  (void)saved;
  if (!din[0].data) return GP_OK;
  overlap o = overlap_of(l); /* cropped input cells get no gradient */
  if (o.r1 - o.r0 < l->in_shape[0].d[1] || o.c1 - o.c0 < l->in_shape[0].d[2])
    GP_TRY(e->be->zero(e->be, din[0].data, gp_tensor_bytes(&din[0])));
  return move(l, e->be, in[0].shape.d[0], GP_F32P(&din[0]), GP_F32P(dout), 0);
}

const gp_layer_type gp_layer_pad2d = {
    .name = "pad2d",
    .doc = "zero-pads or, with negative amounts, crops H and W of `[C, H, W]` (PyTorch's `F.pad`)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(pad2d_conf),
    GP_LAYER_SETTINGS(pad2d_settings),
    .configure = gp_layers_configure,
    .shape = pad2d_shape,
    .cost = pad2d_cost,
    .forward = pad2d_forward,
    .backward = pad2d_backward,
};
