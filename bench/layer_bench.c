/* The layer benchmarks' timing loop and command line (layer_bench.h). */
#include "bench/layer_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void lb_as_executor(lt_layer *t) {
  if (t->l.type->forward_in_place) t->out.data = t->in[0].data;
  if (t->l.type->grad_is_dout)
    for (int j = 0; j < t->l.n_in; j++)
      t->din[j].data = NULL;
}

static int time_case(gp_backend *be, int i, int reps, const char *only, lb_build_fn build) {
  lt_layer t;
  const char *name = "?";
  char shape[96] = "";
  if (!build(be, i, &t, &name, shape, sizeof shape)) return 1;
  if (only && strcmp(only, name) != 0) {
    lt_layer_free(&t);
    return 0;
  }
  double *ms = malloc((size_t)reps * sizeof *ms);
  gp_status s = GP_OK;
  for (int r = -3; r < reps && s == GP_OK && ms; r++) {
    double t0 = now();
    s = lt_forward(&t);
    if (s == GP_OK) s = lt_backward(&t);
    if (r >= 0) ms[r] = (now() - t0) * 1e3;
  }
  int bad = s != GP_OK || !ms;
  if (bad) {
    printf("FAIL %s: %s\n", name, ms ? gp_error_message() : "out of memory");
  } else {
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    printf("%-13s %s forward+backward: median %.4f ms, best %.4f ms\n", name, shape, ms[reps / 2],
           ms[0]);
  }
  free(ms);
  lt_layer_free(&t);
  return bad;
}

int lb_main(int argc, char **argv, int n, lb_build_fn build) {
  int threads = 2, reps = 30;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--threads N] [--reps R] [--case NAME]\n", argv[0]);
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
  for (int i = 0; i < n; i++)
    bad += time_case(be, i, reps, only, build);
  gp_backend_destroy(be);
  return bad ? 1 : 0;
}
