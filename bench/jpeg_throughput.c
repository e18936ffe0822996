/* ImageNet input pipeline speed on one core: gp_imagenet_sample for training (decode with DCT
 * downscaling, RandomResizedCrop 224, flip, normalize) and for evaluation (resize 256, centre
 * crop 224), on JPEGs of ImageNet's typical sizes made in memory (smooth gradients, blobs and
 * texture noise, quality 90), with plain decodes for reference. Prints images/s per core.
 *   bench-jpeg-throughput [--seconds S] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/imgaug.h"
#include "data/jpeg.h"
#include "tests/data/jpeg_fixture.h"

#define PER_SIZE 8

typedef struct set {
  int w, h;
  uint8_t *jpg[PER_SIZE];
  size_t n[PER_SIZE];
} set;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};

/* mode 0: train sample, 1: eval sample, 2: full decode, 3: decode for a 256 shorter side. */
static int one(const set *s, int mode, int64_t i, gp_image *img, float *out) {
  const uint8_t *j = s->jpg[i % PER_SIZE];
  size_t n = s->n[i % PER_SIZE];
  gp_status st;
  if (mode < 2)
    st = gp_imagenet_sample(j, n, mode == 0, 1, 0, i, 224, mean, sd, img, out, "bench.jpg");
  else
    st = gp_jpeg_decode(j, n, mode == 2 ? 0 : 256, "bench.jpg", img);
  if (st != GP_OK) fprintf(stderr, "%s\n", gp_error_message());
  return st == GP_OK;
}

static double rate(const set *s, int mode, double seconds) {
  gp_image img = {0};
  float *out = malloc(sizeof(float) * 3 * 224 * 224);
  for (int64_t i = 0; i < PER_SIZE; i++) /* warm-up: buffers, caches */
    if (!one(s, mode, i, &img, out)) exit(1);
  int64_t count = 0;
  double t0 = now(), t = t0;
  while (t - t0 < seconds) {
    for (int k = 0; k < 16; k++, count++)
      if (!one(s, mode, count, &img, out)) exit(1);
    t = now();
  }
  gp_image_free(&img);
  free(out);
  return (double)count / (t - t0);
}

int main(int argc, char **argv) {
  double seconds = 2;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
  set sets[2] = {{500, 375, {0}, {0}}, {1024, 768, {0}, {0}}};
  for (int k = 0; k < 2; k++) {
    set *s = &sets[k];
    uint8_t *px = malloc((size_t)s->w * s->h * 3);
    size_t total = 0;
    for (int i = 0; i < PER_SIZE; i++) {
      jfix_photo(px, s->w, s->h, (uint64_t)(100 * k + i));
      s->jpg[i] = jfix_encode(px, s->w, s->h, 3, 90, 0, &s->n[i]);
      if (!s->jpg[i]) return 1;
      total += s->n[i];
    }
    free(px);
    printf("%dx%d: %d JPEGs, quality 90, %.0f KB on average\n", s->w, s->h, PER_SIZE,
           (double)total / PER_SIZE / 1024);
  }
  static const char *what[4] = {"train: RRC 224 + flip + normalize", "eval: resize 256, crop 224",
                                "decode only, full size", "decode only, DCT-scaled (short >= 256)"};
  printf("\n%-36s %14s %14s\n", "images/s on one core", "500x375", "1024x768");
  for (int mode = 0; mode < 4; mode++) {
    double r0 = rate(&sets[0], mode, seconds), r1 = rate(&sets[1], mode, seconds);
    printf("%-36s %14.0f %14.0f\n", what[mode], r0, r1);
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PER_SIZE; i++)
      free(sets[k].jpg[i]);
  return 0;
}
