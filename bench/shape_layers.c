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

#include "bench/layer_bench.h"

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

static int build(gp_backend *be, int i, lt_layer *t, const char **name, char *shape, size_t n) {
  const bench_case *c = &cases[i];
  gp_shape in[2];
  gp_dtype dt[2] = {GP_F32, GP_F32};
  for (int j = 0; j < c->n_in; j++)
    in[j] = c->in;
  *name = c->name;
  snprintf(shape, n, "[%d, %lld, %lld, %lld]", BATCH, (long long)c->in.d[0], (long long)c->in.d[1],
           (long long)c->in.d[2]);
  if (!lt_build_or_report(t, be, c->yaml, c->n_in, in, dt, BATCH)) return 0;
  for (int j = 0; j < c->n_in; j++)
    lt_fill_uniform(11 + (uint64_t)j, t->in[j].data, gp_shape_numel(&t->in[j].shape), -3, 3);
  lt_fill_uniform(21, t->dout.data, gp_shape_numel(&t->dout.shape), -1, 1);
  return 1;
}

int main(int argc, char **argv) {
  return lb_main(argc, argv, (int)(sizeof cases / sizeof cases[0]), build);
}
