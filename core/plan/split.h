/* The automatic split's costs as gpipe-train and gpipe-bench weigh them: per-unit forward and
 * backward times measured at the run's micro-batch with a stage's threads (cached on disk, so
 * a second run measures nothing), or the analytic FLOPs or parameters. */
#ifndef GP_SPLIT_H
#define GP_SPLIT_H

#include "core/plan/cost.h"
#include "core/spec/spec.h"

typedef struct gp_split_opts {
  gp_cost_by by;
  int threads;           /* CPU threads of each stage (GP_COST_TIME) */
  const char *cache_dir; /* where measured times are kept (NULL: nowhere) */
  /* told once before any unit is timed (NULL: nobody), with how many distinct units will be
   * and the micro-batch: a progress line */
  void (*measuring)(void *ctx, int units, int64_t micro_batch, int threads);
  void *ctx;
} gp_split_opts;

/* The micro-batch the split is made for: the largest replica's share of the batch over M,
 * rounded up (uneven splits give the first micro-batches one sample more). */
int64_t gp_split_micro_batch(const gp_model *m, const gp_pipeline_spec *ps);

/* Whether o->by can be honoured for ps's devices: GP_COST_TIME measures on the CPU backend,
 * so stages on CUDA devices are split by FLOPs instead (1: measured time is used). */
int gp_split_measures(const gp_pipeline_spec *ps, const gp_split_opts *o);

/* The per-unit costs gp_plan_make_from balances for ps: o->by's, or FLOPs where
 * gp_split_measures says no (out->by tells which). */
gp_status gp_split_costs(const gp_model *m, const gp_pipeline_spec *ps, const gp_split_opts *o,
                         gp_unit_costs *out);

#endif
