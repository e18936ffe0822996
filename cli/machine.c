/* The machine's sgemm rate, measured in the run that reports against it. */
#include "cli/machine.h"

#include <cblas.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/progress.h"
#include "core/cuda/cuda.h"

double gp_sgemm_gflops(int threads) {
  const int n = 1024, reps = 5;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
        *c = malloc(sizeof(float) * n * n);
  if (!a || !b || !c) {
    free(a);
    free(b);
    free(c);
    return 0;
  }
  for (int i = 0; i < n * n; i++) {
    a[i] = (float)(i % 7) * 0.1f;
    b[i] = (float)(i % 5) * 0.1f;
    c[i] = 0;
  }
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int r = 0; r < reps; r++) { /* the first is a warm-up (page faults, packing buffers) */
    double t0 = gp_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double dt = gp_now() - t0;
    if (r > 0 && dt < best) best = dt;
  }
  free(a);
  free(b);
  free(c);
  openblas_set_num_threads(1); /* as the CPU backend runs it (core/cpu/team.c) */
  return 2.0 * n * n * (double)n / best / 1e9;
}

const char *gp_blas_kernels(void) {
  const char *k = openblas_get_corename();
  return k ? k : "unknown";
}

const char *gp_blas_replaced(void) {
  const char *old = getenv("GP_BLAS_REPLACED"), *now = getenv("OPENBLAS_CORETYPE");
  return old && now && strcasecmp(now, gp_blas_kernels()) == 0 ? old : NULL;
}

void gp_blas_pick_kernels(char **argv) {
#if defined(__x86_64__)
  if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or this was the re-run */
  static const char *const old[] = {"unknown",  "katmai",     "coppermine",   "northwood",
                                    "prescott", "banias",     "atom",         "core2",
                                    "penryn",   "dunnington", "nehalem",      "sandybridge",
                                    "athlon",   "opteron",    "opteron_sse3", "barcelona"};
  const char *now = gp_blas_kernels();
  int generic = 0;
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
    generic |= strcasecmp(now, old[i]) == 0;
  if (!generic) return;
  __builtin_cpu_init();
  const char *want = NULL;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = "Haswell";
  if (!want) return;
  fflush(NULL);
  setenv("OPENBLAS_CORETYPE", want, 1);
  setenv("GP_BLAS_REPLACED", now, 1); /* for gp_blas_replaced, in the re-run */
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE"); /* no exec: go on with the kernels loaded */
  unsetenv("GP_BLAS_REPLACED");
#else
  (void)argv;
#endif
}

double gp_gpu_gemm_gflops(int ordinal, gp_precision prec) {
  const int64_t n = 4096;
  const size_t bytes = (size_t)(n * n) * sizeof(float);
  gp_backend *be = NULL;
  float *a = NULL, *b = NULL, *c = NULL;
  double best = 0;
  if (gp_cuda_backend_create(ordinal, &be) != GP_OK) {
    gp_error_clear();
    return 0;
  }
  be->precision = prec;
  if (be->alloc(be, bytes, (void **)&a) == GP_OK && be->alloc(be, bytes, (void **)&b) == GP_OK &&
      be->alloc(be, bytes, (void **)&c) == GP_OK && be->zero(be, a, bytes) == GP_OK &&
      be->zero(be, b, bytes) == GP_OK) {
    for (int r = 0; r < 6; r++) { /* the first is a warm-up (cuBLAS's heuristics, clocks) */
      double t0 = gp_now();
      if (be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) != GP_OK ||
          be->sync(be) != GP_OK)
        break;
      double dt = gp_now() - t0, g = 2.0 * (double)n * (double)n * (double)n / dt / 1e9;
      if (r > 0 && g > best) best = g;
    }
  }
  gp_error_clear();
  if (a) be->free(be, a);
  if (b) be->free(be, b);
  if (c) be->free(be, c);
  gp_backend_destroy(be);
  return best;
}

void gp_cpu_model(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
      v++;
    v[strcspn(v, "\n")] = 0;
    for (char *p = v; *p; p++) /* the name lands in JSON, CSV and SVG: keep it plain */
      if (*p == '"' || *p == '\\' || *p == '<' || *p == '>' || *p == '&' || *p == ',' ||
          (unsigned char)*p < 0x20)
        *p = ' ';
    snprintf(out, n, "%s", v);
    break;
  }
  fclose(f);
}

int gp_cpu_ticks(FILE *stat, const cpu_set_t *cpus, unsigned long long *busy,
                 unsigned long long *steal) {
  *busy = *steal = 0;
  int seen = 0;
  char line[512];
  while (fgets(line, sizeof line, stat)) {
    unsigned cpu;
    unsigned long long v[8] = {0};
    if (strncmp(line, "cpu", 3) != 0 || !isdigit((unsigned char)line[3]) ||
        sscanf(line + 3, "%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7]) != 9 ||
        cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, cpus))
      continue; /* the "cpu" total, other lines, CPUs not ours; older kernels had no steal */
    *busy += v[0] + v[1] + v[2] + v[5] + v[6];
    *steal += v[7];
    seen = 1;
  }
  return seen;
}

int gp_cpu_ticks_now(unsigned long long *busy, unsigned long long *steal) {
  cpu_set_t cpus;
  FILE *f;
  *busy = *steal = 0;
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0 || !(f = fopen("/proc/stat", "r"))) return 0;
  int ok = gp_cpu_ticks(f, &cpus, busy, steal);
  fclose(f);
  return ok;
}
