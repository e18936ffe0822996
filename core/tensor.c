/* Shapes, dtypes and tensors. */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name, *spec_name; /* safetensors', the model file's */
  size_t size;
} dtypes[] = {{"F32", "f32", 4}, {"F16", "f16", 2}, {"BF16", "bf16", 2},
              {"I32", "i32", 4}, {"I64", "i64", 8}, {"U8", "u8", 1}};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == GP_DTYPE_COUNT, "dtype table");

size_t gp_dtype_size(gp_dtype t) {
  return (unsigned)t < GP_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *gp_dtype_name(gp_dtype t) {
  return (unsigned)t < GP_DTYPE_COUNT ? dtypes[t].name : "?";
}

const char *gp_dtype_spec_name(gp_dtype t) {
  return (unsigned)t < GP_DTYPE_COUNT ? dtypes[t].spec_name : "?";
}

int gp_dtype_parse(const char *name, gp_dtype *out) {
  for (int i = 0; i < GP_DTYPE_COUNT; i++)
    if (strcmp(name, dtypes[i].name) == 0) {
      *out = (gp_dtype)i;
      return 1;
    }
  return 0;
}

gp_shape gp_shape_of(int ndim, const int64_t *dims) {
  gp_shape s = {0};
  s.ndim = ndim;
  for (int i = 0; i < ndim && i < GP_MAX_DIMS; i++)
    s.d[i] = dims[i];
  return s;
}

gp_shape gp_shape_batch(int64_t n, const gp_shape *sample) {
  gp_shape s = {0};
  s.ndim = sample->ndim + 1;
  s.d[0] = n;
  for (int i = 0; i < sample->ndim && i + 1 < GP_MAX_DIMS; i++)
    s.d[i + 1] = sample->d[i];
  return s;
}

int64_t gp_shape_numel(const gp_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    n *= s->d[i];
  return n;
}

gp_status gp_shape_numel_checked(const gp_shape *s, int64_t limit, int64_t *out) {
  int64_t n = 1;
  char buf[128];
  for (int i = 0; i < s->ndim; i++) {
    if (s->d[i] <= 0)
      return GP_ERR(GP_ERR_SPEC, "shape %s has a non-positive dimension",
                    gp_shape_str(s, buf, sizeof buf));
    if (n > limit / s->d[i])
      return GP_ERR(GP_ERR_SPEC, "shape %s has more than %lld elements",
                    gp_shape_str(s, buf, sizeof buf), (long long)limit);
    n *= s->d[i];
  }
  *out = n;
  return GP_OK;
}

int gp_shape_equal(const gp_shape *a, const gp_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

const char *gp_shape_str(const gp_shape *s, char *buf, size_t n) {
  size_t k = 0;
  if (n == 0) return buf;
  buf[0] = 0;
  k += (size_t)snprintf(buf + k, n - k, "[");
  for (int i = 0; i < s->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)s->d[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

size_t gp_tensor_bytes(const gp_tensor *t) {
  return (size_t)gp_shape_numel(&t->shape) * gp_dtype_size(t->dtype);
}
