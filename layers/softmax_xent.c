/* softmax_cross_entropy: the loss layer. Inputs: logits [K] (f32) and labels [] (i32).
 * Output: the per-sample loss. It also adds the mini-batch mean loss, the correct
 * predictions and the sample count to the exec's host accumulators. */
#include "layers/layers.h"

typedef struct xent_conf {
  double smoothing;
} xent_conf;

static gp_status xent_configure(gp_layer *l, gp_cfg *cfg) {
  xent_conf *k = l->conf;
  GP_TRY(gp_cfg_float(cfg, "label_smoothing", 0.0, 0.0, 1.0, &k->smoothing));
  if (k->smoothing >= 1.0)
    return gp_cfg_error(cfg, "label_smoothing", "label_smoothing: must be below 1, got %g",
                        k->smoothing);
  return GP_OK;
}

static gp_status xent_shape(gp_layer *l) {
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  const gp_shape *z = &l->in_shape[0], *y = &l->in_shape[1];
  l->n_params = 0;
  if (l->n_in != 2)
    return GP_ERR(GP_ERR_SPEC, "softmax_cross_entropy takes 2 inputs (logits, labels), got %d",
                  l->n_in);
  if (z->ndim != 1 || y->ndim != 0)
    return GP_ERR(GP_ERR_SPEC,
                  "softmax_cross_entropy expects logits [K] and labels [], got %s "
                  "and %s",
                  gp_layers_shape_str(z, b1), gp_layers_shape_str(y, b2));
  if (l->in_dtype[0] != GP_F32 || l->in_dtype[1] != GP_I32)
    return GP_ERR(GP_ERR_SPEC,
                  "softmax_cross_entropy expects F32 logits and I32 labels, got %s "
                  "and %s",
                  gp_dtype_name(l->in_dtype[0]), gp_dtype_name(l->in_dtype[1]));
  gp_shape s = {0};
  l->out_shape = s;
  l->out_dtype = GP_F32;
  return GP_OK;
}

static void xent_cost(const gp_layer *l, gp_cost *c) {
  double k = (double)l->in_shape[0].d[0];
  c->fwd_flops = 6.0 * k;
  c->bwd_flops = 2.0 * k;
  c->params = 0;
  c->saved_bytes = (int64_t)k * 4; /* probabilities */
  c->out_bytes = 4;
}

/* The mini-batch size the loss is averaged over; a pass that did not set it (a plain
 * evaluation) averages over its own samples. */
static int64_t loss_count(const gp_exec *e, int64_t n) {
  return e->loss_count > 0 ? e->loss_count : n;
}

static gp_status xent_forward(gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                              void **saved) {
  const xent_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n = in[0].shape.d[0], nk = l->in_shape[0].d[0];
  float *probs;
  GP_TRY(gp_arena_alloc(e->arena, (size_t)(n * nk) * sizeof(float), (void **)&probs));
  GP_TRY(be->softmax_xent_forward(be, n, nk, (float)k->smoothing, GP_F32P(&in[0]), GP_I32P(&in[1]),
                                  probs, GP_F32P(out)));
  *saved = probs;
  /* A re-materializing forward must not count the micro-batch twice. */
  if (e->recompute) return GP_OK;
  double sum;
  int64_t correct;
  GP_TRY(be->sum(be, n, GP_F32P(out), &sum));
  GP_TRY(be->count_correct(be, n, nk, GP_F32P(&in[0]), GP_I32P(&in[1]), &correct));
  e->loss_sum += sum / (double)loss_count(e, n);
  e->correct += correct;
  e->counted += n;
  return GP_OK;
}

static gp_status xent_backward(gp_layer *l, gp_exec *e, const gp_tensor *in, const gp_tensor *out,
                               const gp_tensor *dout, gp_tensor *din, void *saved) {
  (void)out;
  (void)dout; /* the loss is the end of the graph: its gradient is 1 / loss_count */
  const xent_conf *k = l->conf;
  int64_t n = in[0].shape.d[0], nk = l->in_shape[0].d[0];
  if (!din[0].data) return GP_OK;
  if (!saved)
    return GP_ERR(GP_ERR_RUNTIME, "softmax_cross_entropy %s: backward without its forward",
                  l->path);
  return e->be->softmax_xent_backward(e->be, n, nk, (float)k->smoothing,
                                      (float)(1.0 / (double)loss_count(e, n)), saved,
                                      GP_I32P(&in[1]), GP_F32P(&din[0]));
}

const gp_layer_type gp_layer_softmax_cross_entropy = {
    .name = "softmax_cross_entropy",
    .min_inputs = 2,
    .max_inputs = 2,
    .conf_size = sizeof(xent_conf),
    .configure = xent_configure,
    .shape = xent_shape,
    .cost = xent_cost,
    .forward = xent_forward,
    .backward = xent_backward,
};
