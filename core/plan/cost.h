/* Per-unit costs for the partitioner: analytic FLOPs and bytes, parameter counts, or
 * forward and backward time measured on the CPU backend (cached on disk). */
#ifndef GP_COST_H
#define GP_COST_H

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
  /* bytes B leaves for W (lists that defer W) for one micro-batch: the output gradient of each
   * node with parameters and what its B keeps (gp_cost.w_bytes); B's other gradients and its
   * temporaries are freed at its end (gp_exec.temp) */
  int64_t *wkeep_bytes;
  /* selective re-materialization (gp_stage_remat_set over the unit): the bytes of act_bytes
   * its cheap layers keep, and their share of the unit's forward FLOPs (NULL: none) */
  int64_t *cheap_bytes;
  double *cheap_share;
  /* n + 1 entries: bytes of every tensor made before unit c and read at or after it (the
   * labels and other model inputs read later included): what a cut before unit c sends per
   * micro-batch. cut_bytes[0] = the model inputs' bytes, cut_bytes[n] = 0. */
  int64_t *cut_bytes;
  /* GP_COST_TIME: the scratch space (im2col and the like) the unit's layers took from the
   * backend while timed, beyond what they keep: a stage's backend holds the largest of its
   * units' (NULL under the other bases: the memory estimate then allows the largest unit's
   * activations for it) */
  int64_t *scratch;
} gp_unit_costs;

/* Node i's cost() as the executor runs it: a node none of whose inputs takes a gradient
 * (model inputs, integer tensors) computes no input gradient, and without parameters no
 * backward at all (core/exec/pass.c), so bwd_flops drops that part. The loss always runs. */
void gp_node_cost(const gp_model *m, int i, gp_cost *c);

/* Analytic costs from the layers' cost(), or (GP_COST_TIME) forward+backward time measured on
 * the CPU backend with `threads` threads: warm-up, repetitions, the fastest. Measurements are
 * cached in cache_dir (NULL: none) keyed by (layer type and settings, input shapes, dtype, device,
 * micro-batch), so a second run is instant. */
gp_status gp_unit_costs_compute(const gp_model *m, int64_t micro_batch, gp_cost_by by, int threads,
                                const char *cache_dir, gp_unit_costs *out);
void gp_unit_costs_free(gp_unit_costs *c);
/* --precision bf16-mixed's 16-bit storage (core/exec/bfstore.h): act_bytes (and cheap_bytes)
 * less half the outputs the slots keep packed, an output a later unit reads counted in f32 (a
 * cut there hands it on unpacked). */
gp_status gp_unit_costs_bf16_store(const gp_model *m, gp_unit_costs *c);
/* Units [first_unit, end_unit) timed as one piece, as GP_COST_TIME times one unit (a stage
 * measured whole, against the sum of its units' times): forward and backward seconds, no cache. */
gp_status gp_units_time(const gp_model *m, int first_unit, int end_unit, int64_t micro_batch,
                        int threads, double *fwd, double *bwd);
/* How many distinct units GP_COST_TIME would measure now (their times are not in cache_dir):
 * 0 when a run would read them all from the cache. For a progress line before measuring. */
int gp_unit_costs_unmeasured(const gp_model *m, int64_t micro_batch, int threads,
                             const char *cache_dir);

#endif
