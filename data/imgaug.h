/* ImageNet geometry as torchvision does it: RandomResizedCrop + horizontal flip for training,
 * Resize(256) + CenterCrop(224) for evaluation, and a resampler equivalent to PIL's antialiased
 * BILINEAR resize, writing normalized CHW floats. Crops are drawn from (seed, epoch, sample)
 * only, so a resumed run sees the same crops. Everything here is thread-safe. */
#ifndef GP_IMGAUG_H
#define GP_IMGAUG_H

#include <stdint.h>

#include "core/status.h"
#include "data/jpeg.h"

/* A source rectangle in pixel coordinates (fractional allowed: DCT-scaled images and eval
 * geometry give non-integer ones). clip = 1: the filter sees only the rectangle, as
 * crop-then-resize does (RandomResizedCrop); clip = 0: the filter may read neighbours outside
 * it, as resize-then-crop does (Resize + CenterCrop). */
typedef struct gp_rect {
  double x, y, w, h;
  int clip;
} gp_rect;

/* One RandomResizedCrop draw: an integer window inside the w x h image, and a flip bit. */
typedef struct gp_rrc {
  int x, y, w, h;
  int flip;
} gp_rrc;

/* RandomResizedCrop.get_params: up to 10 tries of area fraction U(scale_min, scale_max) and
 * log-uniform aspect ratio in [ratio_min, ratio_max], sides rounded half to even, accepted when
 * they fit, at a uniform position; else the centre crop of the image clamped to the ratio
 * range. Then a flip with p 0.5. Depends only on (seed, epoch, sample, w, h, ranges).
 * torchvision's defaults: 0.08, 1, 3/4, 4/3. */
gp_rrc gp_rrc_draw(uint64_t seed, int64_t epoch, int64_t sample, int w, int h, double scale_min,
                   double scale_max, double ratio_min, double ratio_max);

/* The source rectangle of "resize the shorter side to `resize` (longer side truncated as
 * torchvision computes it), then centre-crop crop x crop" (offsets rounded half to even), on a
 * w x h image; clip = 0. Requires crop <= resize. */
gp_rect gp_eval_rect(int w, int h, int resize, int crop);

/* Resamples rectangle r of src to out_w x out_h: separable triangle filter whose support is
 * widened by the scale factor when downscaling (PIL's BILINEAR with antialias), taps clipped to
 * the image (and to r when r.clip) with weights renormalized; mirrored left-right if flip;
 * writes (v / 255 - mean[c]) / std[c] to dst as 3 x out_h x out_w. Computes in float (PIL
 * rounds to u8 after each pass; results agree within that rounding). GP_ERR_RUNTIME for a
 * rectangle outside the image, GP_ERR_NOMEM if its scratch cannot be had. */
gp_status gp_image_crop_resize(const gp_image *src, gp_rect r, int out_w, int out_h, int flip,
                               const float mean[3], const float std[3], float *dst);

/* One ImageNet sample: decode jpg (DCT-downscaled as far as the crop allows, never below
 * out_side source pixels per output side), then train: RandomResizedCrop(out_side, 0.08..1,
 * 3/4..4/3) drawn on the original size + flip; eval: resize to out_side * 256 / 224 (rounded),
 * centre crop out_side. out gets 3 x out_side x out_side normalized floats. scratch holds the
 * decoded image (reused across calls; one per thread). Decode errors name `where`. */
gp_status gp_imagenet_sample(const uint8_t *jpg, size_t n, int train, uint64_t seed, int64_t epoch,
                             int64_t sample, int out_side, const float mean[3], const float std[3],
                             gp_image *scratch, float *out, const char *where);

#endif
