/* The CPU time of Llama's layers (rmsnorm, silu, mul), forward then the whole backward, each
 * built from its YAML as a model file would and run through the layer interface (the test
 * harness, tests/layers/harness.c) on a CPU backend of --threads threads, at Llama-like shapes:
 * 8 rows of 128 tokens, width 256, FFN 688. Prints one line per layer: the median and best
 * milliseconds of --reps runs after 3 warm-up runs. bench/llama_layers.py times PyTorch on the
 * same shapes, alternating with this program, and states the ratios.
 *
 *   bench-llama-layers [--threads N] [--reps R]
 */
#include <stdio.h>

#include "bench/layer_bench.h"

#define ROWS 8
#define TOKENS 128
#define WIDTH 256
#define FFN 688

typedef struct bench_case {
  const char *name, *yaml;
  int n_in;
  int64_t features;
} bench_case;

static const bench_case cases[] = {
    {"rmsnorm", "{type: rmsnorm}", 1, WIDTH},
    {"silu", "{type: silu}", 1, FFN},
    {"mul", "{type: mul}", 2, FFN},
};

static int build(gp_backend *be, int i, lt_layer *t, const char **name, char *shape, size_t n) {
  const bench_case *c = &cases[i];
  gp_shape in[2];
  gp_dtype dt[2] = {GP_F32, GP_F32};
  for (int j = 0; j < c->n_in; j++)
    in[j] = (gp_shape){2, {TOKENS, c->features}};
  *name = c->name;
  snprintf(shape, n, "[%d, %d, %lld]", ROWS, TOKENS, (long long)c->features);
  if (!lt_build_or_report(t, be, c->yaml, c->n_in, in, dt, ROWS)) return 0;
  for (int j = 0; j < c->n_in; j++)
    lt_fill_uniform(11 + (uint64_t)j, t->in[j].data, gp_shape_numel(&t->in[j].shape), -3, 3);
  lt_fill_uniform(21, t->dout.data, gp_shape_numel(&t->dout.shape), -1, 1);
  return 1;
}

int main(int argc, char **argv) {
  return lb_main(argc, argv, (int)(sizeof cases / sizeof cases[0]), build);
}
