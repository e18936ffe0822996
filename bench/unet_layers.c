/* The CPU time of a U-Net decoder's layers (conv_transpose2d, upsample), forward then the
 * whole backward, each built from its YAML as a model file would and run through the layer
 * interface (the test harness, tests/layers/harness.c) on a CPU backend of --threads threads,
 * at shapes of a U-Net on 28x28 Fashion-MNIST: batch 32, 64 channels at 7x7 and 14x14. Prints
 * one line per case: the median and best milliseconds of --reps runs after 3 warm-up runs.
 * bench/unet_layers.py times PyTorch on the same shapes, alternating with this program, and
 * states the ratios.
 *
 *   bench-unet-layers [--threads N] [--reps R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/layers/harness.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define BATCH 32

typedef struct bench_case {
  const char *name, *yaml;
  int64_t c, h, w;
} bench_case;

/* Names as bench/unet_layers.py's */
static const bench_case cases[] = {
    {"convt_7to14", "{type: conv_transpose2d, out_channels: 32, kernel: 2, stride: 2}", 64, 7, 7},
    {"convt_14to28", "{type: conv_transpose2d, out_channels: 32, kernel: 2, stride: 2}", 64, 14,
     14},
    {"bilinear_x2", "{type: upsample, mode: bilinear, scale_factor: 2}", 64, 14, 14},
    {"nearest_x2", "{type: upsample, scale_factor: 2}", 64, 14, 14},
    /* h 0: a [C, L] input (L = w) */
    {"conv1d_k3", "{type: conv1d, out_channels: 64, kernel: 3, padding: 1}", 64, 0, 196},
};

static int run(gp_backend *be, const bench_case *c, int reps) {
  lt_layer t;
  gp_shape in[1] = {{3, {c->c, c->h, c->w}}};
  if (!c->h) in[0] = (gp_shape){2, {c->c, c->w}};
  gp_dtype dt[1] = {GP_F32};
  if (!lt_build_or_report(&t, be, c->yaml, 1, in, dt, BATCH)) return 1;
  lt_fill_uniform(11, t.in[0].data, gp_shape_numel(&t.in[0].shape), -3, 3);
  lt_fill_uniform(21, t.dout.data, gp_shape_numel(&t.dout.shape), -1, 1);
  double *ms = malloc((size_t)reps * sizeof *ms);
  gp_status s = GP_OK;
  for (int r = -3; r < reps && s == GP_OK && ms; r++) {
    double t0 = now();
    s = lt_forward(&t);
    if (s == GP_OK) s = lt_backward(&t);
    if (r >= 0) ms[r] = (now() - t0) * 1e3;
  }
  if (s != GP_OK || !ms) {
    printf("FAIL %s: %s\n", c->name, ms ? gp_error_message() : "out of memory");
    free(ms);
    lt_layer_free(&t);
    return 1;
  }
  qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
  printf("%-12s [%d, %lld, %lld, %lld] forward+backward: median %.4f ms, best %.4f ms\n", c->name,
         BATCH, (long long)c->c, (long long)c->h, (long long)c->w, ms[reps / 2], ms[0]);
  free(ms);
  lt_layer_free(&t);
  return 0;
}

int main(int argc, char **argv) {
  int threads = 2, reps = 30;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--threads N] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || reps < 1) {
    fprintf(stderr, "%s: --threads and --reps take a positive number\n", argv[0]);
    return 2;
  }
  gp_backend *be;
  if (gp_cpu_backend_create(threads, &be) != GP_OK) {
    fprintf(stderr, "cpu backend: %s\n", gp_error_message());
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bad += run(be, &cases[i], reps);
  gp_backend_destroy(be);
  return bad ? 1 : 0;
}
