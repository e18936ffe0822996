/* JPEG decoding to RGB u8 through libjpeg-turbo, with DCT-domain downscaling for images much
 * larger than the crop that will be taken from them. Errors never exit: every libjpeg error,
 * and every warning that means damaged pixel data, is GP_ERR_DATA naming the source. */
#ifndef GP_JPEG_H
#define GP_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Refused before anything is allocated: no data set image is this large. */
#define GP_JPEG_MAX_PIXELS ((int64_t)1 << 28)

/* A decoded image: RGB u8, row by row (HWC). px grows as needed and is reused by the next
 * decode into the same struct; zero-initialize, release with gp_image_free. */
typedef struct gp_image {
  int w, h;
  uint8_t *px;
  size_t cap; /* bytes allocated at px */
} gp_image;

void gp_image_free(gp_image *img);
/* Makes room for w x h RGB pixels (contents undefined) and sets w, h. */
gp_status gp_image_reserve(gp_image *img, int w, int h);

/* The image's size from its header only (no pixel data is decoded). */
gp_status gp_jpeg_info(const uint8_t *buf, size_t n, const char *where, int *w, int *h);

/* Decodes buf[0..n) into out. min_side > 0 lets libjpeg scale by M/8 (M = 1, 2, 4, 8) in the
 * DCT domain: the smallest M whose output keeps the shorter side >= min_side (a shorter side
 * already below min_side is decoded at full size; 0 = always full size). The output size is
 * ceil(w * M / 8) x ceil(h * M / 8), in out->w, out->h.
 *
 * Colour: grayscale is replicated to RGB; CMYK and YCCK become RGB with R = C'K' / 255 where
 * C', K' are the stored values, taken as inverted inks (Adobe's convention, as Photoshop
 * writes them; PIL assumes it for every CMYK JPEG, and so does this). Decoded pixels equal
 * PIL's (same libjpeg-turbo ISLOW IDCT; PIL's draft() for the DCT scaling).
 *
 * Errors are GP_ERR_DATA "WHERE: undecodable JPEG: <libjpeg's message>": not a JPEG, empty,
 * truncated ("Premature end of JPEG file"), corrupt entropy data, an unsupported colour space,
 * more than GP_JPEG_MAX_PIXELS pixels. Warnings that leave the pixels intact (bytes between
 * the last scan and the end marker, an unknown JFIF version, a bad ICC profile marker) are
 * accepted. Thread-safe: no state outside the arguments. */
gp_status gp_jpeg_decode(const uint8_t *buf, size_t n, int min_side, const char *where,
                         gp_image *out);

/* The DCT scale numerator M (1, 2, 4 or 8, of 8) gp_jpeg_decode picks for an image whose shorter
 * side is short_side. */
int gp_jpeg_scale_for(int short_side, int min_side);

#endif
