/* selftest_scale: y = w x, correct when bug = none and wrong in one way per other bug. It
 * runs on the CPU backend only (host loops), which is all the tests use. */
#include "tests/layers/selftest_layer.h"

#include <string.h>

enum {
  BUG_NONE,
  BUG_GRAD,
  BUG_DIN_ACCUM,
  BUG_PARAM_ASSIGN,
  BUG_RECOMPUTE,
  BUG_OVERFLOW,
  BUG_COST,
  BUG_SPLIT_B, /* B adds the weight gradient too */
  BUG_SPLIT_W, /* W adds nothing */
};

/* test_grad.c's (the combined backward's) bugs, then test_split.c's (its halves') */
static const char *const all_bugs[] = {"none",     "grad", "din_accum", "param_assign", "recompute",
                                       "overflow", "cost", "split_b",   "split_w",      NULL};
const char *const lt_selftest_bugs[] = {"none",      "grad",     "din_accum", "param_assign",
                                        "recompute", "overflow", "cost",      NULL};
const char *const lt_selftest_split_bugs[] = {"none", "split_b", "split_w", NULL};

typedef struct scale_conf {
  int bug;
} scale_conf;

static const gp_setting scale_settings[] = {
    {.key = "bug",
     GP_SETTING_CHOICE_AT(scale_conf, bug),
     .choices = all_bugs,
     .idflt = BUG_NONE,
     .doc = "which mistake the layer makes"},
};

static gp_status scale_configure(gp_layer *l, gp_cfg *cfg) {
  return gp_settings_read(cfg, l->type->settings, l->type->n_settings, l->conf);
}

static gp_status scale_shape(gp_layer *l) {
  gp_shape one = {1, {1}};
  l->out_shape = l->in_shape[0];
  l->out_dtype = GP_F32;
  l->n_params = 1;
  memset(&l->pdesc[0], 0, sizeof l->pdesc[0]);
  strcpy(l->pdesc[0].name, "weight");
  l->pdesc[0].shape = one;
  l->pdesc[0].init = GP_INIT_ONES;
  l->pdesc[0].trainable = 1;
  return GP_OK;
}

static void scale_cost(const gp_layer *l, gp_cost *c) {
  const scale_conf *k = l->conf;
  memset(c, 0, sizeof *c);
  c->params = k->bug == BUG_COST ? 0 : 1;
  c->out_bytes = gp_shape_numel(&l->out_shape) * 4;
}

static gp_status scale_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                               void **saved) {
  const scale_conf *k = l->conf;
  (void)saved;
  int64_t n = gp_shape_numel(&in[0].shape);
  const float *x = GP_F32P(&in[0]);
  float *y = GP_F32P(out), w = e->bind->param[0][0];
  for (int64_t i = 0; i < n; i++)
    y[i] = w * x[i];
  if (k->bug == BUG_RECOMPUTE && e->recompute) y[0] += 1e-3f;
  if (k->bug == BUG_OVERFLOW) y[n] = 0.0f;
  return GP_OK;
}

static gp_status scale_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                void *saved) {
  const scale_conf *k = l->conf;
  (void)out;
  (void)saved;
  int64_t n = gp_shape_numel(&in[0].shape);
  const float *x = GP_F32P(&in[0]), *dy = GP_F32P(dout);
  float w = e->bind->param[0][0];
  double dw = 0;
  for (int64_t i = 0; i < n; i++)
    dw += (double)x[i] * dy[i];
  int wg = gp_exec_weight_grads(e) || k->bug == BUG_SPLIT_B;
  if (e->grad_part == GP_GRAD_WEIGHT && k->bug == BUG_SPLIT_W) wg = 0;
  if (!wg)
    ;
  else if (k->bug == BUG_PARAM_ASSIGN)
    e->bind->grad[0][0] = (float)dw;
  else
    e->bind->grad[0][0] += (float)dw;
  if (!din[0].data) return GP_OK;
  float *dx = GP_F32P(&din[0]);
  for (int64_t i = 0; i < n; i++) {
    float g = (k->bug == BUG_GRAD && i == n / 2 ? 1.1f : 1.0f) * w * dy[i];
    dx[i] = k->bug == BUG_DIN_ACCUM ? dx[i] + g : g;
  }
  return GP_OK;
}

const gp_layer_type lt_selftest_scale = {
    .name = "selftest_scale",
    .doc = "y = w x, right or wrong in one chosen way (the gradient checks' own test)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(scale_conf),
    GP_LAYER_SETTINGS(scale_settings),
    .configure = scale_configure,
    .shape = scale_shape,
    .cost = scale_cost,
    .forward = scale_forward,
    .backward = scale_backward,
};
