/* Private to layers/: the layer type tables the registry lists, and small helpers every
 * layer file shares (shape checks, parameter descriptions, message formatting). */
#ifndef GP_LAYERS_H
#define GP_LAYERS_H

#include <stdint.h>

#include "core/layer.h"

/* A 2-D window's settings inside a layer's conf (conv2d, pooling): kernel, stride and padding,
 * each as the array its settings table reads and as the names the code uses. */
#define GP_LAYERS_WINDOW2D_FIELDS                                                                  \
  union {                                                                                          \
    int64_t kernel[2];                                                                             \
    struct {                                                                                       \
      int64_t kh, kw;                                                                              \
    };                                                                                             \
  };                                                                                               \
  union {                                                                                          \
    int64_t stride[2];                                                                             \
    struct {                                                                                       \
      int64_t sh, sw;                                                                              \
    };                                                                                             \
  };                                                                                               \
  union {                                                                                          \
    int64_t padding[2];                                                                            \
    struct {                                                                                       \
      int64_t ph, pw;                                                                              \
    };                                                                                             \
  }

extern const gp_layer_type gp_layer_identity;
extern const gp_layer_type gp_layer_relu;
extern const gp_layer_type gp_layer_gelu;
extern const gp_layer_type gp_layer_tanh;
extern const gp_layer_type gp_layer_sigmoid;
extern const gp_layer_type gp_layer_flatten;
extern const gp_layer_type gp_layer_linear;
extern const gp_layer_type gp_layer_conv2d;
extern const gp_layer_type gp_layer_batchnorm;
extern const gp_layer_type gp_layer_layernorm;
extern const gp_layer_type gp_layer_maxpool;
extern const gp_layer_type gp_layer_avgpool;
extern const gp_layer_type gp_layer_global_avgpool;
extern const gp_layer_type gp_layer_dropout;
extern const gp_layer_type gp_layer_add;
extern const gp_layer_type gp_layer_concat;
extern const gp_layer_type gp_layer_pad;
extern const gp_layer_type gp_layer_softmax_cross_entropy;
extern const gp_layer_type gp_layer_pad2d;
extern const gp_layer_type gp_layer_slice;
extern const gp_layer_type gp_layer_embedding;
extern const gp_layer_type gp_layer_positional;
extern const gp_layer_type gp_layer_attention;
extern const gp_layer_type gp_layer_rmsnorm;
extern const gp_layer_type gp_layer_silu;
extern const gp_layer_type gp_layer_mul;
extern const gp_layer_type gp_layer_reshape;
extern const gp_layer_type gp_layer_permute;
extern const gp_layer_type gp_layer_groupnorm;
extern const gp_layer_type gp_layer_mse;
extern const gp_layer_type gp_layer_l1;
extern const gp_layer_type gp_layer_bce_with_logits;
extern const gp_layer_type gp_layer_conv_transpose2d;
extern const gp_layer_type gp_layer_upsample;
extern const gp_layer_type gp_layer_conv1d;

/* Largest value a size-like setting (channels, kernel, ...) may take: far beyond any real
 * model, small enough that products of a few of them cannot overflow int64. */
#define GP_LAYER_MAX_DIM ((int64_t)1 << 30)

/* The weight inits of linear and conv2d: default (PyTorch's), he. */
extern const char *const gp_layers_inits[];

/* The standard deviation of an `init: normal` (GPT-2's and Llama's 0.02 unless `std` is
 * given); a `std` given without `init: normal` is an error located at it. */
#define GP_LAYERS_INIT_STD 0.02
gp_status gp_layers_init_std(gp_cfg *cfg, int normal, int has_std, double *std);

/* A configure for a type whose settings need no check beyond their table's: reads
 * l->type->settings into l->conf. Other configures call it first, then check the rest. */
gp_status gp_layers_configure(gp_layer *l, gp_cfg *cfg);

/* "[1, 28, 28]" into a caller buffer of at least GP_LAYER_SHAPE_STR bytes. */
#define GP_LAYER_SHAPE_STR 160
const char *gp_layers_shape_str(const gp_shape *s, char *buf);

/* Every input must be F32; else an error naming the layer type and the input. */
gp_status gp_layers_check_f32(const gp_layer *l);
/* out_shape = s after checking its element count against GP_SPEC_MAX_ELEMENTS. */
gp_status gp_layers_set_out(gp_layer *l, const gp_shape *s);
/* Appends a parameter description, checking its element count. */
gp_status gp_layers_add_param(gp_layer *l, const char *name, const gp_shape *s, gp_init init,
                              int64_t fan_in, int trainable);
/* Elements per sample of a shape checked at load (no overflow possible any more). */
int64_t gp_layers_numel(const gp_shape *s);
/* Rows of a runtime tensor: batch times all dims but the last (for [..., features] ops). */
int64_t gp_layers_rows(const gp_tensor *t);
/* Copies bytes of src into dst through the backend (identity-like layers). */
gp_status gp_layers_copy(gp_backend *be, const gp_tensor *src, gp_tensor *dst);
/* forward/backward of layers whose output is their input's data (identity, flatten) */
gp_status gp_layers_copy_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved);
gp_status gp_layers_copy_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                  const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                  void *saved);

#endif
