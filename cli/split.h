/* The automatic split of gpipe-train and gpipe-bench, and gpipe-partition's cache folder: --by
 * (flops, params or time, the default) and --cache-dir read the same way in each, a progress
 * line while units are timed, and a default cache that cannot be written costs a warning. */
#ifndef GP_CLI_SPLIT_H
#define GP_CLI_SPLIT_H

#include <stddef.h>

#include "cli/args.h"
#include "core/plan/split.h"

/* --by's names, indexed by gp_cost_by */
extern const char *const gp_cli_by_names[];

/* --cache-dir's folder, else $XDG_CACHE_HOME/gpipe, else ~/.cache/gpipe ("" when neither is
 * set: nothing is cached). */
void gp_cli_cache_dir(const gp_flag *cache, char *buf, size_t n);

typedef struct gp_cli_split {
  const char *prog;          /* "gpipe-train": the progress line's prefix */
  const gp_flag *by, *cache; /* --by (default time) and --cache-dir */
  int quiet;                 /* no progress line */
} gp_cli_split;

/* --by as gp_cost_by (GP_ERR_USAGE for an unknown word). */
gp_status gp_cli_split_by(const gp_cli_split *f, gp_cost_by *by);

/* The costs the automatic split of ps balances, each stage on `threads` CPU threads: the unit
 * times (measured with a progress line on stderr, or read from the cache), FLOPs or parameters.
 * *note (n bytes) says how the split was made, for the run's pipeline line. */
gp_status gp_cli_split_costs(const gp_cli_split *f, const gp_model *m, const gp_pipeline_spec *ps,
                             int threads, gp_unit_costs *out, char *note, size_t n);

/* Seconds a FLOP takes on stage 0's device, for schedule auto's hand-offs between processes
 * on FLOP costs: sgemm measured on `threads` CPU threads (about half a second), or a CUDA
 * device's fp32 GEMM; 0 where it cannot be measured. */
double gp_cli_split_seconds_per_flop(const gp_pipeline_spec *ps, int threads);

#endif
