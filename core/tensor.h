/* Shapes, dtypes and tensors. A tensor is a view: it does not own its data. */
#ifndef GP_TENSOR_H
#define GP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum gp_dtype { GP_F32, GP_F16, GP_BF16, GP_I32, GP_I64, GP_U8, GP_DTYPE_COUNT } gp_dtype;

size_t gp_dtype_size(gp_dtype t);
const char *gp_dtype_name(gp_dtype t);      /* safetensors names: "F32", "BF16", ... */
const char *gp_dtype_spec_name(gp_dtype t); /* the model file's, for messages: "f32", "bf16" */
int gp_dtype_parse(const char *name, gp_dtype *out); /* 1 if known */

#define GP_MAX_DIMS 8
/* Dimensions are int64 so that products can be checked for overflow before use. */
typedef struct gp_shape {
  int ndim;
  int64_t d[GP_MAX_DIMS];
} gp_shape;

gp_shape gp_shape_of(int ndim, const int64_t *dims);
gp_shape gp_shape_batch(int64_t n, const gp_shape *sample); /* [n, sample...] */
int64_t gp_shape_numel(const gp_shape *s);                  /* assumes it was checked at load */
/* Product of dims, refusing negative dims and products above limit (GP_ERR_SPEC). */
gp_status gp_shape_numel_checked(const gp_shape *s, int64_t limit, int64_t *out);
int gp_shape_equal(const gp_shape *a, const gp_shape *b);
/* "[1, 28, 28]"; returns buf. */
const char *gp_shape_str(const gp_shape *s, char *buf, size_t n);

typedef struct gp_tensor {
  void *data;
  gp_shape shape;
  gp_dtype dtype;
  int device; /* -1 host/cpu backend, >= 0 a CUDA device */
} gp_tensor;

#define GP_F32P(t) ((float *)(t)->data)
#define GP_I32P(t) ((int32_t *)(t)->data)

size_t gp_tensor_bytes(const gp_tensor *t);

#endif
