/* The denoising task of image data (data.task: denoise): the clean image is the f32 target,
 * the image plus Gaussian noise the input. The noise of a sample is a pure function of (seed,
 * split, epoch for the training split, position in the epoch), so K, M, the schedule and the
 * processes never change it; each training epoch draws it afresh, the test split always the
 * same. */
#ifndef GP_DATA_DENOISE_H
#define GP_DATA_DENOISE_H

#include <stdint.h>

#include "core/spec/spec.h"

typedef struct gp_denoise {
  float std; /* of the noise, on the 0..1 scale */
  int train;
  uint64_t key;
  int channels;
  int64_t plane;             /* numel / channels */
  float mean[4], inv_std[4]; /* data.normalize, applied to the noisy input only */
  double sq_sum;             /* the noise's squared values, summed since the last reset */
  int64_t sq_n;              /* elements in sq_sum */
} gp_denoise;

/* For samples of shape `sample` ([C, H, W], or any shape: one channel) of a split. */
void gp_denoise_init(gp_denoise *d, const gp_data_spec *spec, const gp_shape *sample, int train,
                     uint64_t seed);
/* Rows first .. first + n - 1 of `epoch`: x holds the clean images on the 0..1 scale; on
 * return t holds them and x the noisy inputs, normalized. Adds the noise to sq_sum. */
void gp_denoise_apply(gp_denoise *d, int64_t epoch, int64_t first, int64_t n, float *x, float *t);

#endif
