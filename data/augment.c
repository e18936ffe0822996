/* Pad-crop-flip augmentation (He et al. for CIFAR). Padding is done implicitly: a window
 * pixel outside the source is 0, as torchvision's RandomCrop(padding=4) pads with black. */
#include "data/augment.h"

#include <string.h>

#include "core/rng.h"

gp_crop gp_augment_draw(uint64_t seed, int64_t epoch, int64_t sample, int pad) {
  gp_rng r;
  uint64_t key = gp_hash_combine(gp_hash_str(seed, "augment"), (uint64_t)epoch);
  gp_rng_seed(&r, gp_hash_combine(key, (uint64_t)sample));
  gp_crop c;
  c.dy = (int)gp_rng_below(&r, (uint64_t)(2 * pad + 1));
  c.dx = (int)gp_rng_below(&r, (uint64_t)(2 * pad + 1));
  c.flip = (int)gp_rng_below(&r, 2);
  return c;
}

void gp_augment_crop(const uint8_t *src, uint8_t *dst, int c, int h, int w, int pad, gp_crop crop) {
  int oy = crop.dy - pad, ox = crop.dx - pad; /* window origin in source coordinates */
  /* The source columns the window covers: [x0, x1) of the output map to ox + x. */
  int x0 = ox < 0 ? -ox : 0, x1 = w - ox < w ? w - ox : w;
  for (int ch = 0; ch < c; ch++) {
    const uint8_t *s = src + (size_t)ch * h * w;
    uint8_t *d = dst + (size_t)ch * h * w;
    for (int y = 0; y < h; y++) {
      uint8_t *row = d + (size_t)y * w;
      int sy = oy + y;
      if (sy < 0 || sy >= h || x1 <= x0) {
        memset(row, 0, (size_t)w);
        continue;
      }
      const uint8_t *srow = s + (size_t)sy * w;
      if (!crop.flip) {
        memset(row, 0, (size_t)x0);
        memcpy(row + x0, srow + ox + x0, (size_t)(x1 - x0));
        memset(row + x1, 0, (size_t)(w - x1));
      } else {
        /* Output x shows window column w - 1 - x. */
        for (int x = 0; x < w; x++) {
          int wx = w - 1 - x;
          row[x] = wx >= x0 && wx < x1 ? srow[ox + wx] : 0;
        }
      }
    }
  }
}
