/* The partitioner: per-unit costs (analytic FLOPs and bytes, parameter counts, or measured
 * time) and the exact split of N units into K contiguous stages that minimizes the slowest
 * stage (compute + recompute + boundary transfer, devices of different speeds allowed) under
 * a per-device memory limit, ties broken toward the smaller spread. */
#ifndef GP_PARTITION_H
#define GP_PARTITION_H

#include "core/spec/spec.h"

typedef enum gp_cost_by { GP_COST_FLOPS, GP_COST_PARAMS, GP_COST_TIME } gp_cost_by;

/* Costs of each unit for one micro-batch of `micro_batch` samples. */
typedef struct gp_unit_costs {
  int n; /* units */
  int64_t micro_batch;
  gp_cost_by by;
  double *fwd, *bwd;             /* the balancing weight: FLOPs, params (bwd 0) or seconds */
  double *fwd_flops, *bwd_flops; /* always the analytic FLOPs, for reports */
  int64_t *params;               /* trainable elements */
  int64_t *act_bytes;            /* bytes a forward keeps for backward: outputs + saved state */
  int64_t *out_bytes;            /* bytes of the unit's own output */
  /* bytes of the input gradients the unit's backward allocates for one micro-batch: a stage
   * holds those of one backward at a time, beside the activations (NULL: none counted) */
  int64_t *grad_bytes;
  /* n + 1 entries: bytes of every tensor made before unit c and read at or after it (the
   * labels and other model inputs read later included): what a cut before unit c sends per
   * micro-batch. cut_bytes[0] = the model inputs' bytes, cut_bytes[n] = 0. */
  int64_t *cut_bytes;
} gp_unit_costs;

/* Node i's cost() as the executor runs it: a node none of whose inputs takes a gradient
 * (model inputs, integer tensors) computes no input gradient, and without parameters no
 * backward at all (core/train/exec.c), so bwd_flops drops that part. The loss always runs. */
void gp_node_cost(const gp_model *m, int i, gp_cost *c);

/* Analytic costs from the layers' cost(), or (GP_COST_TIME) forward+backward time measured on
 * the CPU backend with `threads` threads: warm-up, repetitions, median. Measurements are cached
 * in cache_dir (NULL: none) keyed by (layer type and settings, input shapes, dtype, device,
 * micro-batch), so a second run is instant. */
gp_status gp_unit_costs_compute(const gp_model *m, int64_t micro_batch, gp_cost_by by, int threads,
                                const char *cache_dir, gp_unit_costs *out);
void gp_unit_costs_free(gp_unit_costs *c);

typedef struct gp_partition_req {
  int stages, micro;
  gp_schedule_kind schedule;
  gp_remat remat;
  const double *speed;     /* per stage, relative (NULL: all 1) */
  const double *mem_limit; /* per stage, bytes (NULL or 0 entries: no limit) */
  double bytes_per_s;      /* boundary transfer bandwidth (0: transfers are free) */
  double optim_slots;      /* optimizer state per parameter: sgd+momentum 1, adamw 2 */
} gp_partition_req;

typedef struct gp_partition {
  int stages;
  int first[GP_MAX_DEVICES + 1]; /* stage s = units [first[s], first[s+1]) */
  double time[GP_MAX_DEVICES];   /* per micro-batch: (fwd + bwd + recompute) / speed + transfer */
  double memory[GP_MAX_DEVICES]; /* estimated peak bytes: weights, grads, optimizer state,
                                    activations of the micro-batches in flight, working set */
  double max_time, spread;       /* slowest stage, slowest - fastest */
  double imbalance;              /* max / mean stage time */
  double bubble;                 /* simulated with core/train/schedule.h */
  /* the baselines run the whole mini-batch at once (M = 1) without re-materialization */
  double speedup_naive; /* over the same split */
  double speedup_k1;    /* over one stage (the whole model at speed[0]) */
} gp_partition;

/* Exact: the smallest max stage time; among those, the smallest spread. Impossible requests
 * are GP_ERR_USAGE with the reason: K < 1 or K > N, or a memory limit no split meets, naming
 * the smallest limit that would fit at this K and the smallest K that fits this limit. */
/* Units beyond which the search is refused (GP_ERR_USAGE): its time grows as their square,
 * about 2.5 s for 10000 units in 64 stages (one 2.6 GHz core). */
#define GP_PARTITION_MAX_UNITS 10000
gp_status gp_partition_solve(const gp_unit_costs *c, const gp_partition_req *r, gp_partition *out);
/* Stage times, memory and predictions for a given split (first[] as in gp_partition). */
gp_status gp_partition_evaluate(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                                gp_partition *out);

#endif
