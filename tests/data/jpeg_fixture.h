/* JPEGs made on the fly for the tests, the fuzz corpus and the benchmark: libjpeg's
 * compressor in memory, and synthetic "natural-ish" content (smooth gradients and noise). */
#ifndef GP_TESTS_JPEG_FIXTURE_H
#define GP_TESTS_JPEG_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

enum {
  JFIX_PROGRESSIVE = 1, /* jpeg_simple_progression */
  JFIX_YCCK = 2,        /* 4 components stored as YCCK (Adobe transform 2) */
  JFIX_NO_ADOBE = 4,    /* 4 components without the Adobe marker (plain CMYK) */
};

/* px: w x h x comps bytes (comps 1 gray, 3 RGB, 4 CMYK as given). Returns malloc'ed bytes
 * (free()), *n their count; NULL if libjpeg refused. */
uint8_t *jfix_encode(const uint8_t *px, int w, int h, int comps, int quality, int flags, size_t *n);
/* Smooth gradients, a few soft blobs and mild noise, RGB; deterministic from seed. */
void jfix_natural(uint8_t *px, int w, int h, uint64_t seed);
/* jfix_natural plus +-30 of uniform texture noise, so that quality-90 files are as large as
 * photos (ImageNet: ~110 KB at ~400x350); entropy decoding is much of a JPEG's cost. */
void jfix_photo(uint8_t *px, int w, int h, uint64_t seed);

#endif
