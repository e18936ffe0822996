/* See jpeg_fixture.h. */
#include "tests/data/jpeg_fixture.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

#include "core/rng.h"

typedef struct fix_err {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} fix_err;

static void fix_error_exit(j_common_ptr c) {
  longjmp(((fix_err *)c->err)->jb, 1);
}

uint8_t *jfix_encode(const uint8_t *px, int w, int h, int comps, int quality, int flags,
                     size_t *n) {
  struct jpeg_compress_struct c;
  fix_err e;
  unsigned char *out = NULL;
  unsigned long size = 0;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = fix_error_exit;
  if (setjmp(e.jb)) {
    jpeg_destroy_compress(&c);
    free(out);
    return NULL;
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  if (comps == 4) {
    jpeg_set_colorspace(&c, flags & JFIX_YCCK ? JCS_YCCK : JCS_CMYK);
    if (flags & JFIX_NO_ADOBE) c.write_Adobe_marker = FALSE;
  }
  jpeg_set_quality(&c, quality, TRUE);
  if (flags & JFIX_PROGRESSIVE) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * (size_t)w * (size_t)comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *n = size;
  return out;
}

void jfix_natural(uint8_t *px, int w, int h, uint64_t seed) {
  gp_rng r;
  gp_rng_seed(&r, seed);
  double bx[4], by[4], br[4], bc[4][3];
  for (int b = 0; b < 4; b++) {
    bx[b] = gp_rng_uniform(&r) * w;
    by[b] = gp_rng_uniform(&r) * h;
    br[b] = (0.1 + 0.3 * gp_rng_uniform(&r)) * (w < h ? w : h);
    for (int k = 0; k < 3; k++)
      bc[b][k] = 120 * (gp_rng_uniform(&r) - 0.5);
  }
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double u = (double)x / w, v = (double)y / h;
      double base[3] = {40 + 150 * u, 60 + 120 * v, 200 - 120 * u * v};
      for (int b = 0; b < 4; b++) {
        double d2 = ((x - bx[b]) * (x - bx[b]) + (y - by[b]) * (y - by[b])) / (br[b] * br[b]);
        double g = exp(-d2);
        for (int k = 0; k < 3; k++)
          base[k] += bc[b][k] * g;
      }
      for (int k = 0; k < 3; k++) {
        double val = base[k] + 6 * (gp_rng_uniform(&r) - 0.5);
        px[((size_t)y * w + x) * 3 + k] = (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : val + 0.5);
      }
    }
}

void jfix_photo(uint8_t *px, int w, int h, uint64_t seed) {
  jfix_natural(px, w, h, seed);
  gp_rng r;
  gp_rng_seed(&r, seed);
  for (size_t q = 0; q < (size_t)w * h * 3; q++) {
    float v = px[q] + 60 * (gp_rng_uniform(&r) - 0.5f);
    px[q] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}
