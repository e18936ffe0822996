/* Helpers shared by the layer files: settings, checked shapes, parameter descriptions. */
#include <stdio.h>
#include <string.h>

#include "core/spec/spec.h"
#include "layers/layers.h"

const char *const gp_layers_inits[] = {"default", "he", NULL};

gp_status gp_layers_configure(gp_layer *l, gp_cfg *cfg) {
  return gp_settings_read(cfg, l->type->settings, l->type->n_settings, l->conf);
}

gp_status gp_layers_init_std(gp_cfg *cfg, int normal, int has_std, double *std) {
  if (has_std && !normal) return gp_cfg_error(cfg, "std", "std: applies only with init: normal");
  if (!has_std) *std = GP_LAYERS_INIT_STD;
  return GP_OK;
}

const char *gp_layers_shape_str(const gp_shape *s, char *buf) {
  return gp_shape_str(s, buf, GP_LAYER_SHAPE_STR);
}

gp_status gp_layers_check_f32(const gp_layer *l) {
  for (int i = 0; i < l->n_in; i++)
    if (l->in_dtype[i] != GP_F32)
      return GP_ERR(GP_ERR_SPEC, "%s: input %d must be f32, got %s", l->type->name, i + 1,
                    gp_dtype_spec_name(l->in_dtype[i]));
  return GP_OK;
}

gp_status gp_layers_set_out(gp_layer *l, const gp_shape *s) {
  int64_t n;
  char buf[GP_LAYER_SHAPE_STR];
  if (gp_shape_numel_checked(s, GP_SPEC_MAX_ELEMENTS, &n) != GP_OK)
    return GP_ERR(GP_ERR_SPEC, "%s: output shape %s is empty or has more than 2^40 elements",
                  l->type->name, gp_layers_shape_str(s, buf));
  l->out_shape = *s;
  l->out_dtype = GP_F32;
  return GP_OK;
}

gp_status gp_layers_add_param(gp_layer *l, const char *name, const gp_shape *s, gp_init init,
                              int64_t fan_in, int trainable) {
  int64_t n;
  char buf[GP_LAYER_SHAPE_STR];
  if (l->n_params >= GP_MAX_PARAMS)
    return GP_ERR(GP_ERR_RUNTIME, "%s: too many parameters", l->type->name);
  if (gp_shape_numel_checked(s, GP_SPEC_MAX_ELEMENTS, &n) != GP_OK)
    return GP_ERR(GP_ERR_SPEC,
                  "%s: parameter '%s' of shape %s is empty or has more than 2^40 "
                  "elements",
                  l->type->name, name, gp_layers_shape_str(s, buf));
  gp_param_desc *p = &l->pdesc[l->n_params++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->shape = *s;
  p->init = init;
  p->fan_in = fan_in;
  p->trainable = trainable;
  return GP_OK;
}

int64_t gp_layers_numel(const gp_shape *s) {
  return gp_shape_numel(s);
}

int64_t gp_layers_rows(const gp_tensor *t) {
  int64_t r = 1;
  for (int i = 0; i + 1 < t->shape.ndim; i++)
    r *= t->shape.d[i];
  return r;
}

gp_status gp_layers_copy(gp_backend *be, const gp_tensor *src, gp_tensor *dst) {
  size_t bytes = gp_tensor_bytes(src);
  if (gp_tensor_bytes(dst) != bytes)
    return GP_ERR(GP_ERR_RUNTIME, "copy between tensors of %zu and %zu bytes", bytes,
                  gp_tensor_bytes(dst));
  if (dst->data == src->data) return GP_OK; /* a layer run in place (forward_in_place) */
  return be->copy(be, dst->data, src->data, bytes);
}

gp_status gp_layers_copy_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved) {
  (void)l;
  (void)saved;
  return gp_layers_copy(e->be, &in[0], out);
}

gp_status gp_layers_copy_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved) {
  (void)l;
  (void)in;
  (void)out;
  (void)saved;
  if (!din[0].data) return GP_OK;
  return gp_layers_copy(e->be, dout, &din[0]);
}
