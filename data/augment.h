/* Image train augmentation on u8 CHW samples: zero-pad, random crop, horizontal flip, drawn
 * from (seed, epoch, sample) only, so that a resumed run sees the same crops. */
#ifndef GP_AUGMENT_H
#define GP_AUGMENT_H

#include <stdint.h>

typedef struct gp_crop {
  int dy, dx; /* window origin in the padded image, 0..2*pad */
  int flip;   /* mirror left-right after cropping */
} gp_crop;

/* The crop and flip of one sample in one epoch. */
gp_crop gp_augment_draw(uint64_t seed, int64_t epoch, int64_t sample, int pad);
/* dst (c x h x w) = the window of src zero-padded by pad on each side, mirrored if asked. */
void gp_augment_crop(const uint8_t *src, uint8_t *dst, int c, int h, int w, int pad, gp_crop crop);

#endif
