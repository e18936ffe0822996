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

/* Runs t as the executor runs a view (gp_node_in_place, core/exec/pass.c): where the type
 * says forward_in_place, its output is its input's memory, and where grad_is_dout, its input
 * gradient is dout's (din NULL: nothing to write). For reshape, whose input's producer in a
 * model is most often a layer whose backward ignores its output (conv2d, linear, add). */
void lb_as_executor(lt_layer *t);

/* Parses [--threads N] [--reps R] [--case NAME], then builds and times each of the n cases (or
 * the one named); 0 when all ran. */
int lb_main(int argc, char **argv, int n, lb_build_fn build);

#endif
