/* The CPU backend's convolutions, direct (core/cpu/direct_conv.c, with AVX2 tiles and, where
 * the CPU has AVX-512F, its own) against im2col + GEMM (core/cpu/gemm_conv.c), on the shapes
 * of the repository's models: each direction timed with the paths alternated in one run, best
 * of --reps, GFLOP/s and the ratio of the direct path the backend picks to GEMM. Like
 * gpipe-bench, it first makes OpenBLAS load the kernels the CPU supports.
 *
 *   bench-conv-throughput [--threads N] [--reps R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "cli/machine.h"
#include "core/cpu/cpu.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct shape {
  const char *what;
  int n, c, h, k, ks, pad;
} shape;

static float *rnd(size_t n, unsigned seed) {
  float *p = malloc(n * sizeof *p);
  srand(seed);
  for (size_t i = 0; p && i < n; i++)
    p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return p;
}

/* Best time of each direction over reps, per path (a direct-conv level: 0 is GEMM). */
static int run(gp_backend *be, const gp_conv2d_desc *d, int reps, int paths, double best[][3]) {
  const size_t nx = (size_t)(d->n * d->c * d->h * d->w), ny = (size_t)(d->n * d->k * d->oh * d->ow);
  const size_t nw = (size_t)(d->k * (d->c / d->groups) * d->kh * d->kw);
  float *x = rnd(nx, 1), *w = rnd(nw, 2), *dy = rnd(ny, 3), *y = malloc(ny * sizeof(float));
  float *dx = malloc(nx * sizeof(float)), *dw = calloc(nw, sizeof(float));
  int ok = x && w && dy && y && dx && dw;
  for (int p = 0; p < paths; p++)
    for (int i = 0; i < 3; i++)
      best[p][i] = 1e30;
  for (int r = 0; ok && r < reps; r++)
    for (int p = 0; ok && p < paths; p++) {
      gp_cpu_direct_conv_set(p);
      double t[4];
      t[0] = now();
      ok = be->conv2d_forward(be, d, x, w, NULL, y) == GP_OK;
      t[1] = now();
      ok = ok && be->conv2d_backward_data(be, d, dy, w, dx) == GP_OK;
      t[2] = now();
      ok = ok && be->conv2d_backward_filter(be, d, x, dy, dw, NULL) == GP_OK;
      t[3] = now();
      for (int i = 0; i < 3; i++)
        if (t[i + 1] - t[i] < best[p][i]) best[p][i] = t[i + 1] - t[i];
    }
  free(x), free(w), free(dy), free(y), free(dx), free(dw);
  return ok;
}

int main(int argc, char **argv) {
  gp_blas_pick_kernels(argv);
  int threads = 2, reps = 10;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) {
      threads = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench-conv-throughput [--threads N] [--reps R]\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1) {
    fprintf(stderr, "bench-conv-throughput: --threads and --reps must be positive\n");
    return 2;
  }
  static const shape shapes[] = {
      {"resnet56 stage 1", 128, 16, 32, 16, 3, 1},
      {"resnet56 stage 2", 128, 32, 16, 32, 3, 1},
      {"resnet56 stage 3", 128, 64, 8, 64, 3, 1},
      {"fashion-cnn block 2", 128, 32, 14, 64, 3, 1},
      {"resnet56 micro-batch 1", 1, 16, 32, 16, 3, 1},
      {"balanced-cnn batch 128", 128, 32, 16, 32, 3, 1},
      {"balanced-cnn micro 4", 4, 32, 16, 32, 3, 1},
      {"56x56, 32 channels", 16, 32, 56, 32, 3, 1},
      {"7x7 kernel, 28x28", 16, 64, 28, 64, 7, 3},
  };
  gp_backend *be = NULL;
  if (gp_cpu_backend_create(threads, &be) != GP_OK) {
    fprintf(stderr, "bench-conv-throughput: %s\n", gp_error_message());
    return 1;
  }
  const int top = gp_cpu_direct_conv_set(GP_CPU_DIRECT_AVX512), paths = top + 1;
  if (!top) {
    printf("this CPU has no AVX2 and FMA: every convolution takes im2col + GEMM\n");
    gp_backend_destroy(be);
    return 0;
  }
  printf("%d threads, best of %d, OpenBLAS %s; GFLOP/s im2col+GEMM -> direct AVX2%s (ratio of "
         "the last to GEMM)\n",
         threads, reps, gp_blas_kernels(), top > 1 ? " -> direct AVX-512" : "");
  printf("%-24s %-30s %-30s %-30s\n", "shape", "forward", "backward data", "backward filter");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const shape *sh = &shapes[s];
    const int o = sh->h + 2 * sh->pad - sh->ks + 1;
    gp_conv2d_desc d = {sh->n,  sh->c, sh->h, sh->h,   sh->k,   o, o, sh->ks,
                        sh->ks, 1,     1,     sh->pad, sh->pad, 1, 1, 1};
    double best[3][3];
    if (!run(be, &d, reps, paths, best)) {
      fprintf(stderr, "bench-conv-throughput: %s: %s\n", sh->what, gp_error_message());
      gp_backend_destroy(be);
      return 1;
    }
    const double gf = 2.0 * sh->n * sh->k * sh->c * sh->ks * sh->ks * o * o / 1e9;
    printf("%-24s", sh->what);
    for (int i = 0; i < 3; i++) {
      char cell[64];
      int n = snprintf(cell, sizeof cell, "%.0f -> %.0f", gf / best[0][i], gf / best[1][i]);
      if (top > 1) n += snprintf(cell + n, sizeof cell - (size_t)n, " -> %.0f", gf / best[2][i]);
      snprintf(cell + n, sizeof cell - (size_t)n, " (%.2fx)", best[0][i] / best[top][i]);
      printf(" %-30s", cell);
    }
    printf("\n");
  }
  gp_backend_destroy(be);
  return 0;
}
