/* The shared part of the layer benchmarks (bench/llama_layers.c, shape_layers.c, unet_layers.c):
 * each times its layers, forward then the whole backward, through the layer interface
 * (tests/layers/harness.c) on a CPU backend of --threads threads, and prints one line per case with
 * the median and best milliseconds of --reps runs after 3 warm-up runs, which
 * bench/torch_vs_gpipe.py reads. */
#ifndef GP_BENCH_LAYER_BENCH_H
#define GP_BENCH_LAYER_BENCH_H

#include <stddef.h>

#include "tests/layers/harness.h"

/* Builds case i into t with its inputs and dout filled; its name in *name and its shape, as
 * printed, in shape (n bytes). 0: not built (said already). */
typedef int (*lb_build_fn)(gp_backend *be, int i, lt_layer *t, const char **name, char *shape,
                           size_t n);

/* Parses [--threads N] [--reps R], then builds and times each of the n cases; 0 when all ran. */
int lb_main(int argc, char **argv, int n, lb_build_fn build);

#endif
