/* maxpool, avgpool and global_avgpool over [C, H, W]: the 2-D pooling backend op with the
 * window from the settings (or, for global_avgpool, the whole plane). */
#include "layers/layers.h"

typedef struct pool_conf {
  gp_pool kind;
  int global;
  GP_LAYERS_WINDOW2D_FIELDS;
  int count_pad;
} pool_conf;

/* The settings maxpool and avgpool share (clang-format would scatter a macro's entries). */
/* clang-format off */
#define WINDOW_SETTINGS                                                                            \
  {.key = "kernel", GP_SETTING_INTS_AT(pool_conf, kernel), .required = 1, .min = 1,                \
   .max = GP_LAYER_MAX_DIM, .doc = "window size [height, width]"},                                 \
  {.key = "stride", GP_SETTING_INTS_AT(pool_conf, stride), .same_as = "kernel", .min = 1,          \
   .max = GP_LAYER_MAX_DIM, .doc = "step between windows [height, width]"},                        \
  {.key = "padding", GP_SETTING_INTS_AT(pool_conf, padding), .idflt = 0, .min = 0,                 \
   .max = GP_LAYER_MAX_DIM,                                                                        \
   .doc = "cells added on both sides [height, width], at most half the kernel"}
/* clang-format on */

static const gp_setting maxpool_settings[] = {WINDOW_SETTINGS};
static const gp_setting avgpool_settings[] = {
    WINDOW_SETTINGS,
    {.key = "count_pad",
     GP_SETTING_BOOL_AT(pool_conf, count_pad),
     .idflt = 0,
     .doc = "padding cells count in the average (PyTorch's `count_include_pad`)"},
};

static gp_status window_configure(gp_layer *l, gp_cfg *cfg, gp_pool kind) {
  pool_conf *k = l->conf;
  k->kind = kind;
  GP_TRY(gp_layers_configure(l, cfg));
  /* PyTorch's rule: a window must always hold at least one real cell. */
  if (2 * k->ph > k->kh || 2 * k->pw > k->kw)
    return gp_cfg_error(cfg, "padding",
                        "padding: [%lld, %lld] is more than half the kernel [%lld, %lld]",
                        (long long)k->ph, (long long)k->pw, (long long)k->kh, (long long)k->kw);
  return GP_OK;
}

static gp_status maxpool_configure(gp_layer *l, gp_cfg *cfg) {
  return window_configure(l, cfg, GP_POOL_MAX);
}

static gp_status avgpool_configure(gp_layer *l, gp_cfg *cfg) {
  return window_configure(l, cfg, GP_POOL_AVG);
}

static gp_status global_configure(gp_layer *l, gp_cfg *cfg) {
  pool_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  k->kind = GP_POOL_AVG;
  k->global = 1;
  return GP_OK;
}

static gp_status pool_shape(gp_layer *l) {
  const pool_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  const char *name = l->type->name;
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 3)
    return GP_ERR(GP_ERR_SPEC, "%s expects input [C, H, W], got %s", name,
                  gp_layers_shape_str(x, buf));
  if (x->d[1] * x->d[2] > INT32_MAX) /* argmax is an int32 index into the plane */
    return GP_ERR(GP_ERR_SPEC, "%s: input plane %s is too large", name,
                  gp_layers_shape_str(x, buf));
  if (k->global) {
    gp_shape y = gp_shape_of(1, &x->d[0]);
    return gp_layers_set_out(l, &y);
  }
  int64_t h = x->d[1] + 2 * k->ph, w = x->d[2] + 2 * k->pw;
  if (k->kh > h || k->kw > w)
    return GP_ERR(GP_ERR_SPEC,
                  "%s: kernel %lldx%lld is larger than the padded input %lldx%lld "
                  "(input %s)",
                  name, (long long)k->kh, (long long)k->kw, (long long)h, (long long)w,
                  gp_layers_shape_str(x, buf));
  int64_t od[3] = {x->d[0], (h - k->kh) / k->sh + 1, (w - k->kw) / k->sw + 1};
  gp_shape y = gp_shape_of(3, od);
  return gp_layers_set_out(l, &y);
}

static void pool_cost(const gp_layer *l, gp_cost *c) {
  const pool_conf *k = l->conf;
  double outs = (double)gp_layers_numel(&l->out_shape);
  double win =
      k->global ? (double)(l->in_shape[0].d[1] * l->in_shape[0].d[2]) : (double)(k->kh * k->kw);
  c->fwd_flops = outs * win;
  c->bwd_flops = k->kind == GP_POOL_MAX ? outs : outs * win;
  c->params = 0;
  c->saved_bytes = k->kind == GP_POOL_MAX ? (int64_t)outs * 4 : 0; /* int32 argmax */
  c->out_bytes = (int64_t)outs * 4;
}

static gp_pool2d_desc pool_desc(const gp_layer *l, const gp_tensor *x) {
  const pool_conf *k = l->conf;
  const gp_shape *s = &l->in_shape[0];
  gp_pool2d_desc d = {
      .n = x->shape.d[0],
      .c = s->d[0],
      .h = s->d[1],
      .w = s->d[2],
      .oh = k->global ? 1 : l->out_shape.d[1],
      .ow = k->global ? 1 : l->out_shape.d[2],
      .kh = k->global ? s->d[1] : k->kh,
      .kw = k->global ? s->d[2] : k->kw,
      .sh = k->global ? 1 : k->sh,
      .sw = k->global ? 1 : k->sw,
      .ph = k->global ? 0 : k->ph,
      .pw = k->global ? 0 : k->pw,
      .count_pad = k->count_pad,
  };
  return d;
}

static gp_status pool_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                              void **saved) {
  const pool_conf *k = l->conf;
  gp_pool2d_desc d = pool_desc(l, &in[0]);
  int32_t *am = NULL;
  if (k->kind == GP_POOL_MAX) {
    GP_TRY(gp_arena_alloc(e->arena, (size_t)gp_shape_numel(&out->shape) * sizeof(int32_t),
                          (void **)&am));
    *saved = am;
  }
  return e->be->pool2d_forward(e->be, k->kind, &d, GP_F32P(&in[0]), GP_F32P(out), am);
}

static gp_status pool_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                               const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                               void *saved) {
  (void)out;
  const pool_conf *k = l->conf;
  if (!din[0].data) return GP_OK;
  if (k->kind == GP_POOL_MAX && !saved)
    return GP_ERR(GP_ERR_RUNTIME, "maxpool %s: backward without its forward", l->path);
  gp_pool2d_desc d = pool_desc(l, &in[0]);
  return e->be->pool2d_backward(e->be, k->kind, &d, GP_F32P(dout), saved, GP_F32P(&din[0]));
}

#define POOL_TYPE(var, nm, what, conf_fn, ...)                                                     \
  const gp_layer_type var = {                                                                      \
      .name = (nm),                                                                                \
      .doc = (what),                                                                               \
      __VA_ARGS__,                                                                                 \
      .min_inputs = 1,                                                                             \
      .max_inputs = 1,                                                                             \
      .conf_size = sizeof(pool_conf),                                                              \
      .configure = (conf_fn),                                                                      \
      .shape = pool_shape,                                                                         \
      .cost = pool_cost,                                                                           \
      .forward = pool_forward,                                                                     \
      .backward = pool_backward,                                                                   \
      .backward_ignores_out = 1,                                                                   \
  }

POOL_TYPE(gp_layer_maxpool, "maxpool", "the maximum of each window of `[C, H, W]`",
          maxpool_configure, GP_LAYER_SETTINGS(maxpool_settings));
POOL_TYPE(gp_layer_avgpool, "avgpool", "the mean of each window of `[C, H, W]`", avgpool_configure,
          GP_LAYER_SETTINGS(avgpool_settings));
POOL_TYPE(gp_layer_global_avgpool, "global_avgpool",
          "the mean of each channel: `[C, H, W]` to `[C]`", global_configure, .n_settings = 0);
