/* mse, l1, bce_with_logits: the losses of f32 targets. Inputs: the prediction and a target of
 * its shape (f32). Output: the loss of each element. The loss is PyTorch's reduction 'mean'
 * over every element of the whole mini-batch: each adds sum / (loss_count x elements a
 * sample) to the exec's loss_sum, loss_count being the mini-batch's samples. */
#include "layers/layers.h"

static gp_status eltloss_shape(gp_layer *l) {
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  if (l->n_in != 2)
    return GP_ERR(GP_ERR_SPEC, "%s takes 2 inputs (prediction, target), got %d", l->type->name,
                  l->n_in);
  if (l->in_dtype[0] != GP_F32 || l->in_dtype[1] != GP_F32)
    return GP_ERR(GP_ERR_SPEC, "%s expects an f32 prediction and an f32 target, got %s and %s",
                  l->type->name, gp_dtype_spec_name(l->in_dtype[0]),
                  gp_dtype_spec_name(l->in_dtype[1]));
  if (!gp_shape_equal(&l->in_shape[0], &l->in_shape[1]))
    return GP_ERR(GP_ERR_SPEC, "%s: the target has shape %s, the prediction %s (they must match)",
                  l->type->name, gp_layers_shape_str(&l->in_shape[1], b1),
                  gp_layers_shape_str(&l->in_shape[0], b2));
  l->out_shape = l->in_shape[0];
  l->out_dtype = GP_F32;
  return GP_OK;
}

static void eltloss_cost(const gp_layer *l, gp_cost *c) {
  double n = (double)gp_layers_numel(&l->in_shape[0]);
  c->fwd_flops = 4.0 * n;
  c->bwd_flops = 4.0 * n;
  c->params = 0;
  c->saved_bytes = 0; /* backward reads the inputs */
  c->out_bytes = (int64_t)n * 4;
}

static gp_eltloss kind_of(const gp_layer *l);

/* The elements the loss is averaged over: the whole mini-batch's (loss_count samples, set by
 * the pipeline), else this pass's own. */
static double count(const gp_exec *e, const gp_tensor *p) {
  const int64_t per = gp_shape_numel(&p->shape) / (p->shape.d[0] > 0 ? p->shape.d[0] : 1);
  const int64_t samples = e->loss_count > 0 ? e->loss_count : p->shape.d[0];
  return (double)(samples > 0 ? samples : 1) * (double)(per > 0 ? per : 1);
}

static gp_status eltloss_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  (void)saved;
  const int64_t n = gp_shape_numel(&in[0].shape);
  GP_TRY(
      e->be->eltloss_forward(e->be, kind_of(l), n, GP_F32P(&in[0]), GP_F32P(&in[1]), GP_F32P(out)));
  if (e->recompute) return GP_OK; /* a re-materializing forward must not count twice */
  double sum;
  GP_TRY(e->be->sum(e->be, n, GP_F32P(out), &sum));
  e->loss_sum += sum / count(e, &in[0]);
  e->counted += in[0].shape.d[0];
  return GP_OK;
}

/* d/dp of the mean; the target's gradient (when asked: a target computed by layers) is
 * -d/dp for mse and l1, and -p / count for bce_with_logits. */
static gp_status eltloss_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved) {
  (void)out;
  (void)dout; /* the loss is the end of the graph */
  (void)saved;
  const int64_t n = gp_shape_numel(&in[0].shape);
  const float scale = (float)(1.0 / count(e, &in[0]));
  const float *p = GP_F32P(&in[0]), *t = GP_F32P(&in[1]);
  gp_backend *be = e->be;
  if (din[0].data) GP_TRY(be->eltloss_backward(be, kind_of(l), n, scale, p, t, GP_F32P(&din[0])));
  if (!din[1].data) return GP_OK;
  if (kind_of(l) == GP_ELTLOSS_BCE_LOGITS)
    return be->axpby(be, n, -scale, p, 0.0f, GP_F32P(&din[1]));
  GP_TRY(be->eltloss_backward(be, kind_of(l), n, scale, p, t, GP_F32P(&din[1])));
  return be->axpby(be, n, -1.0f, GP_F32P(&din[1]), 0.0f, GP_F32P(&din[1]));
}

#define ELTLOSS_TYPE(var, nm, what)                                                                \
  const gp_layer_type var = {                                                                      \
      .name = nm,                                                                                  \
      .doc = what,                                                                                 \
      .is_loss = 1,                                                                                \
      .min_inputs = 2,                                                                             \
      .max_inputs = 2,                                                                             \
      .conf_size = 0,                                                                              \
      .configure = gp_layers_configure,                                                            \
      .shape = eltloss_shape,                                                                      \
      .cost = eltloss_cost,                                                                        \
      .forward = eltloss_forward,                                                                  \
      .backward = eltloss_backward,                                                                \
      .backward_ignores_out = 1,                                                                   \
  }

ELTLOSS_TYPE(gp_layer_mse, "mse",
             "the loss: mean squared error of a prediction against an f32 target of its shape");
ELTLOSS_TYPE(gp_layer_l1, "l1",
             "the loss: mean absolute error of a prediction against an f32 target of its shape");
ELTLOSS_TYPE(gp_layer_bce_with_logits, "bce_with_logits",
             "the loss: binary cross-entropy of logits against f32 probabilities of their shape");

static gp_eltloss kind_of(const gp_layer *l) {
  return l->type == &gp_layer_mse  ? GP_ELTLOSS_MSE
         : l->type == &gp_layer_l1 ? GP_ELTLOSS_L1
                                   : GP_ELTLOSS_BCE_LOGITS;
}
