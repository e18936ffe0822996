/* The automatic split's per-unit costs: measured times (the default of gpipe-train and
 * gpipe-bench; the analytic FLOPs left resnet20's second stage 1.5x busier than its first),
 * FLOPs or parameters. */
#include "core/plan/split.h"

#include <string.h>

int64_t gp_split_micro_batch(const gp_model *m, const gp_pipeline_spec *ps) {
  int64_t r = ps->replicas > 1 ? ps->replicas : 1,
          mb = ps->micro_batches > 0 ? ps->micro_batches : 1;
  int64_t share = (m->train.batch_size + r - 1) / r;
  int64_t micro = (share + mb - 1) / mb;
  return micro > 0 ? micro : 1;
}

int gp_split_measures(const gp_pipeline_spec *ps, const gp_split_opts *o) {
  if (o->by != GP_COST_TIME) return 0;
  for (int d = 0; d < ps->n_devices; d++)
    if (strncmp(ps->devices[d], "cuda", 4) == 0) return 0;
  return 1;
}

gp_status gp_split_costs(const gp_model *m, const gp_pipeline_spec *ps, const gp_split_opts *o,
                         gp_unit_costs *out) {
  int64_t micro = gp_split_micro_batch(m, ps);
  int threads = o->threads > 0 ? o->threads : 1;
  gp_cost_by by = o->by == GP_COST_TIME && !gp_split_measures(ps, o) ? GP_COST_FLOPS : o->by;
  if (by == GP_COST_TIME && o->measuring) {
    int n = gp_unit_costs_unmeasured(m, micro, threads, o->cache_dir);
    if (n > 0) o->measuring(o->ctx, n, micro, threads);
  }
  return gp_unit_costs_compute(m, micro, by, threads, o->cache_dir, out);
}
