/* The activation layers relu, gelu, silu, tanh and sigmoid: one element-wise backend op each,
 * sharing everything else (they differ only in which gp_activation they run). */
#include "layers/layers.h"

typedef struct act_conf {
  gp_activation act;
  int approximate; /* gelu: 1 = the tanh form */
} act_conf;

static const gp_setting gelu_settings[] = {
    {.key = "approximate",
     GP_SETTING_CHOICE_AT(act_conf, approximate),
     .choices = (const char *const[]){"none", "tanh", NULL},
     .idflt = 0,
     .doc = "`tanh`: the tanh approximation (PyTorch's `approximate='tanh'`); `none`: erf"},
};

static gp_status act_configure(gp_layer *l, gp_cfg *cfg, gp_activation act) {
  act_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  k->act = act == GP_ACTIVATION_GELU && k->approximate ? GP_ACTIVATION_GELU_TANH : act;
  return GP_OK;
}

static gp_status relu_configure(gp_layer *l, gp_cfg *cfg) {
  return act_configure(l, cfg, GP_ACTIVATION_RELU);
}
static gp_status tanh_configure(gp_layer *l, gp_cfg *cfg) {
  return act_configure(l, cfg, GP_ACTIVATION_TANH);
}
static gp_status sigmoid_configure(gp_layer *l, gp_cfg *cfg) {
  return act_configure(l, cfg, GP_ACTIVATION_SIGMOID);
}
static gp_status gelu_configure(gp_layer *l, gp_cfg *cfg) {
  return act_configure(l, cfg, GP_ACTIVATION_GELU);
}
static gp_status silu_configure(gp_layer *l, gp_cfg *cfg) {
  return act_configure(l, cfg, GP_ACTIVATION_SILU);
}

static gp_status act_shape(gp_layer *l) {
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  return gp_layers_set_out(l, &l->in_shape[0]);
}

/* Rough per-element costs, so the partitioner sees that gelu is not free. */
static void act_cost(const gp_layer *l, gp_cost *c) {
  const act_conf *k = l->conf;
  double n = (double)gp_layers_numel(&l->out_shape);
  double per = k->act == GP_ACTIVATION_RELU      ? 1.0
               : k->act == GP_ACTIVATION_SIGMOID ? 4.0
               : k->act == GP_ACTIVATION_SILU    ? 5.0 /* sigmoid's, times x */
                                                 : 8.0;
  c->fwd_flops = n * per;
  c->bwd_flops = n * (per + 2.0);
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)n * 4;
}

static gp_status act_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                             void **saved) {
  (void)saved;
  const act_conf *k = l->conf;
  int64_t n = gp_shape_numel(&in[0].shape);
  return e->be->act_forward(e->be, k->act, n, GP_F32P(&in[0]), GP_F32P(out));
}

static gp_status act_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                              const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                              void *saved) {
  (void)saved;
  const act_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  int64_t n = gp_shape_numel(&in[0].shape);
  return e->be->act_backward(e->be, k->act, n, GP_F32P(&in[0]), GP_F32P(out), GP_F32P(dout),
                             GP_F32P(&din[0]));
}

static gp_activation act_kind(const gp_layer *l) {
  return ((const act_conf *)l->conf)->act;
}

#define ACT_TYPE(var, nm, what, conf_fn, in_place, ...)                                            \
  const gp_layer_type var = {                                                                      \
      .name = (nm),                                                                                \
      .doc = (what),                                                                               \
      __VA_ARGS__,                                                                                 \
      .min_inputs = 1,                                                                             \
      .max_inputs = 1,                                                                             \
      .conf_size = sizeof(act_conf),                                                               \
      .configure = (conf_fn),                                                                      \
      .shape = act_shape,                                                                          \
      .cost = act_cost,                                                                            \
      .forward = act_forward,                                                                      \
      .backward = act_backward,                                                                    \
      .forward_in_place = (in_place),                                                              \
      .activation = act_kind,                                                                      \
  }

/* In place where the backward reads nothing x alone holds: ReLU's mask x > 0 is y > 0,
 * tanh's and sigmoid's derivatives are of y. GELU's and SiLU's backward need x itself. */
ACT_TYPE(gp_layer_relu, "relu", "max(x, 0), element-wise", relu_configure, 1, .n_settings = 0);
ACT_TYPE(gp_layer_gelu, "gelu", "x * Phi(x), element-wise, Phi the standard normal CDF",
         gelu_configure, 0, GP_LAYER_SETTINGS(gelu_settings));
ACT_TYPE(gp_layer_silu, "silu", "x * sigmoid(x), element-wise (SiLU, swish; Llama's SwiGLU gate)",
         silu_configure, 0, .n_settings = 0, .backward_ignores_out = 1);
ACT_TYPE(gp_layer_tanh, "tanh", "tanh(x), element-wise", tanh_configure, 1, .n_settings = 0);
ACT_TYPE(gp_layer_sigmoid, "sigmoid", "1 / (1 + exp(-x)), element-wise", sigmoid_configure, 1,
         .n_settings = 0);
