/* gpipe-bench --data-only: loader throughput without training. */
#ifndef GP_CLI_BENCH_DATA_H
#define GP_CLI_BENCH_DATA_H

#include "core/spec/spec.h"

/* Times the model's training data at each decode-thread count in workers[] and prints a
 * table (or JSON) on stdout; progress on stderr unless quiet. */
gp_status gp_bench_data_only(const gp_model *m, int64_t batch, const int *workers, int n_workers,
                             int steps, int warmup, int json, int quiet);

#endif
