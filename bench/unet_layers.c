/* The CPU time of a U-Net decoder's layers (conv_transpose2d, upsample), forward then the
 * whole backward, each built from its YAML as a model file would and run through the layer
 * interface (the test harness, tests/layers/harness.c) on a CPU backend of --threads threads,
 * at shapes of a U-Net on 28x28 Fashion-MNIST: batch 64, 64 channels at 7x7 and 14x14. Prints
 * one line per case: the median and best milliseconds of --reps runs after 3 warm-up runs.
 * bench/unet_layers.py times PyTorch on the same shapes, alternating with this program, and
 * states the ratios.
 *
 *   bench-unet-layers [--threads N] [--reps R]
 */
#include <stdio.h>

#include "bench/layer_bench.h"

#define BATCH 64

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

static int build(gp_backend *be, int i, lt_layer *t, const char **name, char *shape, size_t n) {
  const bench_case *c = &cases[i];
  gp_shape in[1] = {{3, {c->c, c->h, c->w}}};
  if (!c->h) in[0] = (gp_shape){2, {c->c, c->w}};
  gp_dtype dt[1] = {GP_F32};
  *name = c->name;
  snprintf(shape, n, "[%d, %lld, %lld, %lld]", BATCH, (long long)c->c, (long long)c->h,
           (long long)c->w);
  if (!lt_build_or_report(t, be, c->yaml, 1, in, dt, BATCH)) return 0;
  lt_fill_uniform(11, t->in[0].data, gp_shape_numel(&t->in[0].shape), -3, 3);
  lt_fill_uniform(21, t->dout.data, gp_shape_numel(&t->dout.shape), -1, 1);
  return 1;
}

int main(int argc, char **argv) {
  return lb_main(argc, argv, (int)(sizeof cases / sizeof cases[0]), build);
}
