/* upsample: resizes [C, H, W] to [C, H', W'] by nearest or bilinear interpolation, as
 * PyTorch's nn.Upsample / F.interpolate (the U-Net decoder's fixed upsampling). */
#include <math.h>

#include "layers/layers.h"

static const char *const upsample_modes[] = {"nearest", "bilinear", NULL};

typedef struct upsample_conf {
  int bilinear;
  double scale;
  int has_scale;
  int64_t size[2];
  int has_size;
  int align_corners, has_align;
} upsample_conf;

static const gp_setting upsample_settings[] = {
    {.key = "mode",
     GP_SETTING_CHOICE_AT(upsample_conf, bilinear),
     .choices = upsample_modes,
     .idflt = 0,
     .doc = "`nearest`: the pixel at floor(dst in / out); `bilinear`: the four nearest, "
            "weighted (PyTorch's modes of the same names)"},
    {.key = "scale_factor",
     GP_SETTING_FLOAT_AT(upsample_conf, scale),
     GP_SETTING_HAS_AT(upsample_conf, has_scale),
     .range = GP_RANGE_POSITIVE,
     .dflt_doc = "2 without `size`",
     .doc = "multiplier of height and width (output floor(H scale_factor)); this or `size`"},
    {.key = "size",
     GP_SETTING_INTS_AT(upsample_conf, size),
     GP_SETTING_HAS_AT(upsample_conf, has_size),
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "output [height, width]; this or `scale_factor`"},
    {.key = "align_corners",
     GP_SETTING_BOOL_AT(upsample_conf, align_corners),
     GP_SETTING_HAS_AT(upsample_conf, has_align),
     .dflt_doc = "false",
     .doc = "bilinear only: corner pixels' centres meet (PyTorch's `align_corners`)"},
};

static gp_status upsample_configure(gp_layer *l, gp_cfg *cfg) {
  upsample_conf *k = l->conf;
  GP_TRY(gp_layers_configure(l, cfg));
  if (k->has_scale && k->has_size)
    return gp_cfg_error(cfg, "size", "upsample: give size or scale_factor, not both");
  if (!k->has_scale && !k->has_size)  /* nn.Upsample refuses; a default keeps x2 short */
    k->scale = 2.0, k->has_scale = 1; /* the U-Net's doubling */
  if (k->has_align && !k->bilinear)
    return gp_cfg_error(cfg, "align_corners",
                        "upsample: align_corners is for mode bilinear only (as PyTorch)");
  return GP_OK;
}

static gp_status upsample_shape(gp_layer *l) {
  const upsample_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  GP_TRY(gp_layers_check_f32(l));
  if (x->ndim != 3)
    return GP_ERR(GP_ERR_SPEC, "upsample expects input [C, H, W], got %s",
                  gp_layers_shape_str(x, buf));
  int64_t od[3] = {x->d[0], k->size[0], k->size[1]};
  if (k->has_scale)
    for (int i = 0; i < 2; i++) {
      double v = floor((double)x->d[1 + i] * k->scale); /* F.interpolate's, in double */
      if (v < 1 || v > (double)GP_LAYER_MAX_DIM)
        return GP_ERR(GP_ERR_SPEC,
                      "upsample: scale_factor %g makes the %s of input %s %.0f (must be in [1, "
                      "%lld])",
                      k->scale, i ? "width" : "height", gp_layers_shape_str(x, buf), v,
                      (long long)GP_LAYER_MAX_DIM);
      od[1 + i] = (int64_t)v;
    }
  gp_shape y = gp_shape_of(3, od);
  return gp_layers_set_out(l, &y);
}

static void upsample_cost(const gp_layer *l, gp_cost *c) {
  const upsample_conf *k = l->conf;
  double outs = (double)gp_layers_numel(&l->out_shape);
  /* bilinear: six multiplies and three adds an output each way; nearest only copies */
  c->fwd_flops = k->bilinear ? 9.0 * outs : 0.0;
  c->bwd_flops = c->bwd_data_flops = k->bilinear ? 12.0 * outs : outs;
  c->params = 0;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)outs * 4;
}

static gp_resize2d_desc upsample_desc(const gp_layer *l, const gp_tensor *x) {
  const upsample_conf *k = l->conf;
  gp_resize2d_desc d = {
      .n = x->shape.d[0] * l->in_shape[0].d[0],
      .h = l->in_shape[0].d[1],
      .w = l->in_shape[0].d[2],
      .oh = l->out_shape.d[1],
      .ow = l->out_shape.d[2],
      .bilinear = k->bilinear,
      .align_corners = k->align_corners,
      .scale_h = k->has_scale ? k->scale : 0.0,
      .scale_w = k->has_scale ? k->scale : 0.0,
  };
  return d;
}

static gp_status upsample_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  gp_tensor *out, void **saved) {
  (void)saved;
  gp_resize2d_desc d = upsample_desc(l, &in[0]);
  return e->be->resize2d_forward(e->be, &d, GP_F32P(&in[0]), GP_F32P(out));
}

static gp_status upsample_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                   const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                   void *saved) {
  (void)out;
  (void)saved;
  if (!din[0].data) return GP_OK; /* W, or a first layer: nothing to write */
  gp_resize2d_desc d = upsample_desc(l, &in[0]);
  return e->be->resize2d_backward(e->be, &d, GP_F32P(dout), GP_F32P(&din[0]));
}

const gp_layer_type gp_layer_upsample = {
    .name = "upsample",
    .doc = "nearest or bilinear resizing, `[C, H, W]` to `[C, H', W']` (PyTorch's "
           "`nn.Upsample`)",
    .min_inputs = 1,
    .max_inputs = 1,
    .conf_size = sizeof(upsample_conf),
    GP_LAYER_SETTINGS(upsample_settings),
    .configure = upsample_configure,
    .shape = upsample_shape,
    .cost = upsample_cost,
    .forward = upsample_forward,
    .backward = upsample_backward,
    .backward_ignores_out = 1,
};
