/* The CPU time of Llama's layers (rmsnorm, silu, mul, attention with rope and kv_heads),
 * forward then the whole backward, each built from its YAML as models/llama.yaml writes it and
 * run through the layer interface (the test harness, tests/layers/harness.c) on a CPU backend
 * of --threads threads, at llama.yaml's shapes: its batch of 32 rows of 64 tokens, width 256,
 * FFN 688, 4 heads, 2 kv heads, rope theta 10000 (each row one sentence: segment ids 0,
 * positions 0 to 63). Prints one line per layer: the median and best milliseconds of --reps
 * runs after 3 warm-up runs. bench/llama_layers.py times PyTorch on the same shapes,
 * alternating with this program, and states the ratios.
 *
 *   bench-llama-layers [--threads N] [--reps R]
 */
#include <stdio.h>

#include "bench/layer_bench.h"

#define ROWS 32
#define TOKENS 64
#define WIDTH 256
#define FFN 688

typedef struct bench_case {
  const char *name, *yaml;
  int n_in; /* attention: [query, segments, pos], the last two i32 */
  int64_t features;
} bench_case;

/* Names as bench/llama_layers.py's */
static const bench_case cases[] = {
    {"rmsnorm", "{type: rmsnorm, eps: 1.0e-6}", 1, WIDTH},
    {"silu", "{type: silu}", 1, FFN},
    {"mul", "{type: mul}", 2, FFN},
    {"attention",
     "{type: attention, heads: 4, kv_heads: 2, dim: 256, bias: false, causal: true, "
     "rope: {theta: 10000}, inputs: [query, segments, pos]}",
     3, WIDTH},
};

static int build(gp_backend *be, int i, lt_layer *t, const char **name, char *shape, size_t n) {
  const bench_case *c = &cases[i];
  const int attn = c->n_in == 3;
  gp_shape in[3];
  gp_dtype dt[3] = {GP_F32, attn ? GP_I32 : GP_F32, GP_I32};
  for (int j = 0; j < c->n_in; j++)
    in[j] = (gp_shape){2, {TOKENS, c->features}};
  if (attn) in[1] = in[2] = (gp_shape){1, {TOKENS}};
  *name = c->name;
  snprintf(shape, n, "[%d, %d, %lld]", ROWS, TOKENS, (long long)c->features);
  if (!lt_build_or_report(t, be, c->yaml, c->n_in, in, dt, ROWS)) return 0;
  for (int j = 0; j < c->n_in; j++)
    if (dt[j] == GP_F32)
      lt_fill_uniform(11 + (uint64_t)j, t->in[j].data, gp_shape_numel(&t->in[j].shape), -3, 3);
  if (attn)
    for (int64_t j = 0; j < ROWS * TOKENS; j++) {
      ((int32_t *)t->in[1].data)[j] = 0;
      ((int32_t *)t->in[2].data)[j] = (int32_t)(j % TOKENS);
    }
  lt_fill_uniform(21, t->dout.data, gp_shape_numel(&t->dout.shape), -1, 1);
  return 1;
}

int main(int argc, char **argv) {
  return lb_main(argc, argv, (int)(sizeof cases / sizeof cases[0]), build);
}
