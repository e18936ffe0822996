/* Re-materialization chosen per stage (remat auto): after the split, each stage drops as
 * little as makes its estimated memory fit the limit (--memory-limit, else a CUDA device's
 * memory; none on the CPU without a limit): the cheap layers' activations of the fewest
 * in-flight micro-batches first (selective), then whole micro-batches' (solve.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/probe.h"
#include "core/plan/plan.h"
#include "core/plan/solve.h"

/* Stage s's limit: the plan's, else its CUDA device's total memory, else none (0). */
static double limit_of(const gp_pipeline_spec *ps, const gp_plan *p, int s) {
  if (ps->mem_limit) return (double)ps->mem_limit;
  size_t free_b = 0, total_b = 0;
  if (strncmp(p->st[s].device, "cuda:", 5) == 0 &&
      gp_cuda_mem_info(atoi(p->st[s].device + 5), &free_b, &total_b) == 0)
    return (double)total_b;
  return 0;
}

/* Micro-batches stage s of p holds at once (gp_partition_in_flight). */
static int in_flight_of(const gp_plan *p, int s) {
  gp_partition_req r = {.stages = p->stages, .micro = p->micro, .schedule = p->schedule};
  return gp_partition_in_flight(&r, p->stages, s);
}

static void mib(double b, char *buf, size_t n) {
  snprintf(buf, n, "%.2f MiB", b / 1048576.0);
}

gp_status gp_plan_choose_remat(const gp_model *m, const gp_pipeline_spec *ps, gp_plan *p) {
  int K = p->stages;
  memset(p->remat_drop, 0, sizeof p->remat_drop);
  memset(p->mem_est, 0, sizeof p->mem_est);
  memset(p->remat_sel, 0, sizeof p->remat_sel);
  memset(p->remat_cheap, 0, sizeof p->remat_cheap);
  if (p->remat != GP_REMAT_AUTO) return GP_OK;
  int64_t micro = (m->train.batch_size + p->micro - 1) / p->micro;
  double lim[GP_MAX_DEVICES];
  int any = 0;
  for (int s = 0; s < K; s++)
    any |= (lim[s] = limit_of(ps, p, s)) > 0;
  gp_unit_costs c;
  GP_TRY(gp_unit_costs_compute(m, micro > 0 ? micro : 1, GP_COST_FLOPS, 1, NULL, &c));
  gp_partition_req req;
  gp_plan_partition_req(m, ps, &req);
  req.stages = K;
  req.micro = p->micro;
  req.schedule = p->schedule;
  req.remat = GP_REMAT_AUTO;
  req.mem_limit = any ? lim : NULL;
  int first[GP_MAX_DEVICES + 1];
  for (int s = 0; s < K; s++)
    first[s] = p->st[s].first_unit;
  first[K] = p->st[K - 1].end_unit;
  gp_partition part;
  gp_status st = gp_partition_evaluate(&c, &req, first, &part);
  for (int s = 0; st == GP_OK && s < K; s++) {
    p->remat_drop[s] = part.drop[s];
    p->mem_est[s] = part.memory[s];
    p->remat_sel[s] = part.sel[s];
    p->remat_cheap[s] = part.cheap_bytes[s];
    /* a stage with one micro-batch in flight has nothing to choose: gp_pipeline_check_fit and
     * the backend say what does not fit */
    if (lim[s] <= 0 || part.memory[s] <= lim[s] || in_flight_of(p, s) <= 1) continue;
    /* even with every micro-batch dropped: say what would fit */
    char need[32], have[32], hint[1024];
    mib(part.memory[s], need, sizeof need);
    mib(lim[s], have, sizeof have);
    /* the partitioner says which split or number of stages would (its line names them) */
    gp_partition fit;
    if (gp_partition_solve(&c, &req, &fit) == GP_OK)
      snprintf(hint, sizeof hint,
               "the automatic split into %d stages fits it (no --balance); or a smaller "
               "micro-batch (more --micro-batches or a smaller --batch-size)",
               K);
    else
      snprintf(hint, sizeof hint, "%s", gp_error_message());
    gp_error_clear();
    st = GP_ERR(GP_ERR_USAGE,
                "stage %d needs an estimated %s even with every micro-batch re-materialized, "
                "more than its limit of %s: %s",
                s, need, have, hint);
  }
  gp_unit_costs_free(&c);
  return st;
}

int gp_plan_recomputed(const gp_plan *p, int s) {
  gp_partition_req r = {
      .stages = p->stages, .micro = p->micro, .schedule = p->schedule, .remat = p->remat};
  int P = gp_partition_in_flight(&r, p->stages, s);
  if (p->remat == GP_REMAT_AUTO)
    return P > 1 ? gp_partition_dropped_micro(p->micro, P, p->remat_drop[s]) : 0;
  if (!gp_partition_remats(&r, p->stages, s)) return 0;
  return p->remat == GP_REMAT_ALWAYS ? p->micro : p->micro - 1;
}

int gp_plan_selective(const gp_plan *p, int s) {
  if (p->remat != GP_REMAT_AUTO || p->remat_sel[s] < 1) return 0;
  gp_partition_req r = {.stages = p->stages, .micro = p->micro, .schedule = p->schedule};
  int P = gp_partition_in_flight(&r, p->stages, s), d = p->remat_drop[s];
  return gp_partition_dropped_micro(p->micro, P, d + p->remat_sel[s]) -
         gp_partition_dropped_micro(p->micro, P, d);
}
