/* The CPU time of the shape layers and the losses (reshape, permute, groupnorm, mse, l1,
 * bce_with_logits, softmax_cross_entropy over axis 0), forward then the whole backward, each
 * built from its YAML and run through the layer interface (tests/layers/harness.c) on a CPU
 * backend of --threads threads, at the shapes of a U-Net on 28x28 Fashion-MNIST at batch 64
 * (32 channels at 28x28, 64 at 14x14) and of models/llama.yaml (32 rows of 64 tokens, 4 heads
 * of 64): the table below. Prints one line per case: the median and best milliseconds of
 * --reps runs after 3 warm-up runs. bench/shape_layers.py times PyTorch on the same shapes,
 * alternating with this program.
 *
 *   bench-shape-layers [--threads N] [--reps R]
 */
#include <stdio.h>

#include "bench/layer_bench.h"

enum { PLAIN, VIEW, COPY, LABELS };

typedef struct bench_case {
  const char *name, *yaml;
  int n_in, how; /* VIEW: as the executor runs a view; COPY: where it cannot (the forward copies;
                  * the input gradient is still dout's); LABELS: the second input is i32 classes */
  int64_t batch;
  gp_shape in;
} bench_case;

/* Names as bench/shape_layers.py's */
static const bench_case cases[] = {
    {"reshape", "{type: reshape, shape: [32, -1]}", 1, VIEW, 64, {3, {32, 28, 28}}},
    {"reshape_copy", "{type: reshape, shape: [32, -1]}", 1, COPY, 64, {3, {32, 28, 28}}},
    {"permute_hwc", "{type: permute, axes: [1, 2, 0]}", 1, PLAIN, 64, {3, {32, 28, 28}}},
    {"permute_heads", "{type: permute, axes: [1, 0, 2]}", 1, PLAIN, 32, {3, {64, 4, 64}}},
    {"groupnorm_28", "{type: groupnorm, groups: 8}", 1, PLAIN, 64, {3, {32, 28, 28}}},
    {"groupnorm_14", "{type: groupnorm, groups: 32}", 1, PLAIN, 64, {3, {64, 14, 14}}},
    {"mse", "{type: mse}", 2, PLAIN, 64, {3, {1, 28, 28}}},
    {"l1", "{type: l1}", 2, PLAIN, 64, {3, {1, 28, 28}}},
    {"bce", "{type: bce_with_logits}", 2, PLAIN, 64, {3, {1, 28, 28}}},
    {"xent_axis0", "{type: softmax_cross_entropy, axis: 0}", 2, LABELS, 64, {3, {10, 28, 28}}},
};

#define CLASSES 10

static int build(gp_backend *be, int i, lt_layer *t, const char **name, char *shape, size_t n) {
  const bench_case *c = &cases[i];
  gp_shape in[2] = {c->in, c->in};
  gp_dtype dt[2] = {GP_F32, GP_F32};
  if (c->how == LABELS) { /* [C, H, W] logits, [H, W] labels */
    in[1] = (gp_shape){2, {c->in.d[1], c->in.d[2]}};
    dt[1] = GP_I32;
  }
  *name = c->name;
  snprintf(shape, n, "[%lld, %lld, %lld, %lld]", (long long)c->batch, (long long)c->in.d[0],
           (long long)c->in.d[1], (long long)c->in.d[2]);
  if (!lt_build_or_report(t, be, c->yaml, c->n_in, in, dt, c->batch)) return 0;
  lt_fill_uniform(11, t->in[0].data, gp_shape_numel(&t->in[0].shape), -3, 3);
  if (c->how == LABELS) {
    int32_t *y = t->in[1].data;
    for (int64_t j = 0; j < gp_shape_numel(&t->in[1].shape); j++)
      y[j] = (int32_t)((j * 7 + j / 13) % CLASSES);
  } else if (c->n_in == 2) {
    lt_fill_uniform(12, t->in[1].data, gp_shape_numel(&t->in[1].shape), 0, 1);
  }
  lt_fill_uniform(21, t->dout.data, gp_shape_numel(&t->dout.shape), -1, 1);
  if (c->how == VIEW) lb_as_executor(t);
  if (c->how == COPY) t->din[0].data = NULL; /* the executor hands dout on (grad_is_dout) */
  return 1;
}

int main(int argc, char **argv) {
  return lb_main(argc, argv, (int)(sizeof cases / sizeof cases[0]), build);
}
