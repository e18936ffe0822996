/* Checks of the convolution and pooling descriptors, shared by every backend so that a bad
 * descriptor gets the same message on each. */
#include <stdint.h>

#include "core/backend.h"

gp_status gp_conv2d_desc_check(const gp_conv2d_desc *d) {
  if (d->n < 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->kh <= 0 || d->kw <= 0 ||
      d->sh <= 0 || d->sw <= 0 || d->ph < 0 || d->pw < 0 || d->dh <= 0 || d->dw <= 0 ||
      d->groups <= 0 || d->c % d->groups || d->k % d->groups)
    return GP_ERR(GP_ERR_RUNTIME, "conv2d: invalid descriptor (c %lld, k %lld, groups %lld)",
                  (long long)d->c, (long long)d->k, (long long)d->groups);
  int64_t oh = (d->h + 2 * d->ph - d->dh * (d->kh - 1) - 1) / d->sh + 1;
  int64_t ow = (d->w + 2 * d->pw - d->dw * (d->kw - 1) - 1) / d->sw + 1;
  if (d->h + 2 * d->ph < d->dh * (d->kh - 1) + 1 || d->w + 2 * d->pw < d->dw * (d->kw - 1) + 1 ||
      oh != d->oh || ow != d->ow)
    return GP_ERR(GP_ERR_RUNTIME, "conv2d: output %lldx%lld does not match the input and kernel",
                  (long long)d->oh, (long long)d->ow);
  return GP_OK;
}

gp_status gp_pool2d_desc_check(const gp_pool2d_desc *d) {
  if (d->n < 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->kh <= 0 || d->kw <= 0 || d->sh <= 0 ||
      d->sw <= 0 || d->ph < 0 || d->pw < 0 || d->oh <= 0 || d->ow <= 0 ||
      (d->oh - 1) * d->sh - d->ph >= d->h || (d->ow - 1) * d->sw - d->pw >= d->w ||
      d->h * d->w > INT32_MAX)
    return GP_ERR(GP_ERR_RUNTIME, "pool2d: invalid descriptor (%lldx%lld -> %lldx%lld)",
                  (long long)d->h, (long long)d->w, (long long)d->oh, (long long)d->ow);
  return GP_OK;
}

gp_status gp_resize2d_desc_check(const gp_resize2d_desc *d) {
  if (d->n < 0 || d->h <= 0 || d->w <= 0 || d->oh <= 0 || d->ow <= 0 || d->scale_h < 0 ||
      d->scale_w < 0)
    return GP_ERR(GP_ERR_RUNTIME, "resize2d: invalid descriptor (%lldx%lld -> %lldx%lld)",
                  (long long)d->h, (long long)d->w, (long long)d->oh, (long long)d->ow);
  return GP_OK;
}
