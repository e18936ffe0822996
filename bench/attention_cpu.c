/* The attention layer's forward + backward on the CPU backend at one shape, best of --reps,
 * for bench/attention_vs_torch.py, which runs PyTorch's at the same shape alternately with it.
 * Prints one line: "gpipe SECONDS" (forward plus both backward halves, best rep).
 *
 *   bench-attention-cpu [--threads N] [--reps R] [--batch B] [--tokens T] [--dim D]
 *                       [--heads H] [--kv-heads K] [--theta THETA (0: no rope)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/machine.h"
#include "core/backend.h"
#include "tests/layers/harness.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  gp_blas_pick_kernels(argv);
  long threads = 2, reps = 10, batch = 8, tokens = 128, dim = 256, heads = 8, kv = 2;
  double theta = 10000.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "bench-attention-cpu: %s needs a value\n", a);
      return 2;
    }
    const char *v = argv[++i];
    char *end;
    double x = strtod(v, &end);
    if (*end || x < 0) {
      fprintf(stderr, "bench-attention-cpu: %s: '%s' is not a number >= 0\n", a, v);
      return 2;
    }
    if (!strcmp(a, "--threads"))
      threads = (long)x;
    else if (!strcmp(a, "--reps"))
      reps = (long)x;
    else if (!strcmp(a, "--batch"))
      batch = (long)x;
    else if (!strcmp(a, "--tokens"))
      tokens = (long)x;
    else if (!strcmp(a, "--dim"))
      dim = (long)x;
    else if (!strcmp(a, "--heads"))
      heads = (long)x;
    else if (!strcmp(a, "--kv-heads"))
      kv = (long)x;
    else if (!strcmp(a, "--theta"))
      theta = x;
    else {
      fprintf(stderr, "bench-attention-cpu: unknown flag %s\n", a);
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || batch < 1 || tokens < 1) {
    fprintf(stderr, "bench-attention-cpu: threads, reps, batch and tokens must be >= 1\n");
    return 2;
  }
  gp_backend *be;
  if (gp_cpu_backend_create((int)threads, &be) != GP_OK) {
    fprintf(stderr, "bench-attention-cpu: %s\n", gp_error_message());
    return 1;
  }
  char yaml[256], rope_s[64] = "", kv_s[64] = ""; /* kv_heads only where it differs */
  const int rope = theta > 0;
  if (rope) snprintf(rope_s, sizeof rope_s, ", rope: {theta: %.17g}", theta);
  if (kv != heads) snprintf(kv_s, sizeof kv_s, ", kv_heads: %ld", kv);
  snprintf(yaml, sizeof yaml, "{type: attention, heads: %ld%s, bias: false, causal: true%s}", heads,
           kv_s, rope_s);
  gp_shape in[2] = {{2, {tokens, dim}}, {1, {tokens}}};
  gp_dtype dt[2] = {GP_F32, GP_I32};
  lt_layer t;
  if (lt_layer_build(&t, be, yaml, rope ? 2 : 1, in, dt, batch) != GP_OK) {
    fprintf(stderr, "bench-attention-cpu: %s: %s\n", yaml, gp_error_message());
    return 1;
  }
  lt_fill_uniform(1, GP_F32P(&t.in[0]), batch * tokens * dim, -1.0f, 1.0f);
  lt_fill_uniform(2, GP_F32P(&t.dout), batch * tokens * dim, -1.0f, 1.0f);
  if (rope)
    for (long i = 0; i < batch * tokens; i++)
      GP_I32P(&t.in[1])[i] = (int32_t)(i % tokens);
  double best = 1e30;
  for (long r = 0; r < reps + 1; r++) { /* the first is a warm-up */
    double t0 = now();
    if (lt_forward(&t) != GP_OK || lt_backward(&t) != GP_OK) {
      fprintf(stderr, "bench-attention-cpu: %s\n", gp_error_message());
      return 1;
    }
    double s = now() - t0;
    if (r > 0 && s < best) best = s;
  }
  printf("gpipe %.6f\n", best);
  lt_layer_free(&t);
  gp_backend_destroy(be);
  return 0;
}
