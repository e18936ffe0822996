/* Seeded Gaussian noise on images for the denoising task (see denoise.h). */
#include "data/denoise.h"

#include <string.h>

#include "core/rng.h"

void gp_denoise_init(gp_denoise *d, const gp_data_spec *spec, const gp_shape *sample, int train,
                     uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->std = (float)spec->noise_std;
  d->train = train;
  d->key = gp_hash_combine(gp_hash_str(seed, "denoise"), (uint64_t)train);
  int64_t numel = gp_shape_numel(sample);
  d->channels = sample->ndim == 3 && sample->d[0] <= 4 ? (int)sample->d[0] : 1;
  d->plane = numel / d->channels;
  for (int c = 0; c < d->channels; c++) {
    int k = spec->n_norm == 1 ? 0 : c;
    d->mean[c] = spec->n_norm ? spec->mean[k] : 0.0f;
    d->inv_std[c] = spec->n_norm ? 1.0f / spec->std[k] : 1.0f;
  }
}

void gp_denoise_apply(gp_denoise *d, int64_t epoch, int64_t first, int64_t n, float *x, float *t) {
  const int64_t numel = d->plane * d->channels;
  memcpy(t, x, (size_t)(n * numel) * sizeof(float));
  /* the test split's noise is the same at every evaluation */
  const uint64_t ekey = gp_hash_combine(d->key, d->train ? (uint64_t)epoch : 0);
  double sq = 0.0;
  for (int64_t r = 0; r < n; r++) {
    gp_rng g;
    gp_rng_seed(&g, gp_hash_combine(ekey, (uint64_t)(first + r)));
    float *row = x + r * numel;
    for (int c = 0; c < d->channels; c++) {
      float *p = row + c * d->plane;
      for (int64_t k = 0; k < d->plane; k++) {
        float e = d->std * gp_rng_normal(&g);
        sq += (double)e * e;
        p[k] = (p[k] + e - d->mean[c]) * d->inv_std[c];
      }
    }
  }
  d->sq_sum += sq;
  d->sq_n += n * numel;
}
