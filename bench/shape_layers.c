/* The CPU time of the shape layers and losses of f32 targets (reshape, permute, groupnorm, mse,
 * l1, bce_with_logits), forward then the whole backward, each built from its YAML and run
 * through the layer interface (tests/layers/harness.c) on a CPU backend of --threads threads,
 * at U-Net and Llama-like shapes (a batch of 8; the table below). Prints one line per case:
 * the median and best milliseconds of --reps runs after 3 warm-up runs.
 * bench/shape_layers.py times PyTorch on the same shapes, alternating with this program.
 *
 *   bench-shape-layers [--threads N] [--reps R]
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

#define BATCH 8

/* Per-sample shapes: a U-Net level of 64 channels at 32 x 32; Llama's 128 tokens of 4 heads of
 * 64; a diffusion model's noise [3, 32, 32]; a segmentation mask [1, 64, 64]. */
typedef struct bench_case {
  const char *name, *yaml;
  int n_in;
  gp_shape in;
} bench_case;

static const bench_case cases[] = {
    {"reshape", "{type: reshape, shape: [64, -1]}", 1, {3, {64, 32, 32}}},
    {"permute_hwc", "{type: permute, axes: [1, 2, 0]}", 1, {3, {64, 32, 32}}},
    {"permute_heads", "{type: permute, axes: [1, 0, 2]}", 1, {3, {128, 4, 64}}},
    {"groupnorm", "{type: groupnorm, groups: 32}", 1, {3, {64, 32, 32}}},
    {"mse", "{type: mse}", 2, {3, {3, 32, 32}}},
    {"l1", "{type: l1}", 2, {3, {3, 32, 32}}},
    {"bce", "{type: bce_with_logits}", 2, {3, {1, 64, 64}}},
};

static int run(gp_backend *be, const bench_case *c, int reps) {
  lt_layer t;
  gp_shape in[2];
  gp_dtype dt[2] = {GP_F32, GP_F32};
  for (int i = 0; i < c->n_in; i++)
    in[i] = c->in;
  if (!lt_build_or_report(&t, be, c->yaml, c->n_in, in, dt, BATCH)) return 1;
  for (int i = 0; i < c->n_in; i++)
    lt_fill_uniform(11 + (uint64_t)i, t.in[i].data, gp_shape_numel(&t.in[i].shape), -3, 3);
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
  printf("%-13s [%d, %lld, %lld, %lld] forward+backward: median %.4f ms, best %.4f ms\n", c->name,
         BATCH, (long long)c->in.d[0], (long long)c->in.d[1], (long long)c->in.d[2], ms[reps / 2],
         ms[0]);
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
