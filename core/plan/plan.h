/* A plan: which units (and so nodes) each stage runs, on which device, with how many
 * micro-batches, which schedule and which re-materialization. An automatic split is the
 * partitioner's (core/plan/solve.h) on the layers' analytic costs. */
#ifndef GP_PLAN_H
#define GP_PLAN_H

#include "core/spec/spec.h"

typedef struct gp_stage_range {
  int first_unit, end_unit; /* units [first, end) */
  int first_node, end_node; /* nodes [first, end) */
  char device[16];          /* "cpu" or "cuda:N" */
} gp_stage_range;

typedef struct gp_plan {
  /* stages: the chunks (virtual stages) the model is cut into, K V; on K devices (interleaved:
   * virtual_stages V >= 2, chunk v on device v % K; 0 or 1: a stage a device) */
  int stages, micro;
  int virtual_stages;
  gp_schedule_kind schedule;
  /* the schedule was chosen (schedule: auto): the choice and the others', as
   * gp_schedule_choice_str writes them; "" when the schedule was given */
  char chosen[320];
  gp_remat remat;
  gp_stage_range st[GP_MAX_DEVICES];
  /* gp_plan_choose_remat (remat auto): per stage, the activation slots that drop (micro-batch
   * m recomputes where m % slots < remat_drop, gp_schedule_build_drops), and the estimated
   * peak bytes with that choice; 0 under the fixed modes */
  int remat_drop[GP_MAX_DEVICES];
  double mem_est[GP_MAX_DEVICES];
  /* and the slots after those that drop their cheap layers' activations alone (selective:
   * micro-batch m where remat_drop <= m % slots < remat_drop + remat_sel; the layers are
   * gp_stage_remat_set's), with the bytes those layers keep a micro-batch */
  int remat_sel[GP_MAX_DEVICES];
  double remat_cheap[GP_MAX_DEVICES];
  int64_t batch; /* gp_plan_read: the batch_size the file was made for; 0 where it records none */
  /* across processes: each stage's process (interleaved: each device's, gp_plan_devices
   * entries), by position in its replica (gp_layout_make's procs_of); n_procs: the positions, 0
   * where the plan leaves it to the launch (even) */
  int n_procs;
  int procs[GP_MAX_DEVICES];
  /* gp_plan_read: "plan.yaml:4:13: checkpoint: is now remat:" when the file used the old
   * name (the program tells the user); "" otherwise */
  char renamed[320];
} gp_plan;

/* From the model's pipeline section (already overridden by flags). GP_ERR_USAGE for splits
 * that cannot be: more stages than units, a balance that does not sum to the units. Under
 * schedule: auto the schedule with the shortest simulated step on the layers' analytic costs
 * (core/plan/choose.h), on the given split or on each schedule's own automatic one. */
gp_status gp_plan_make(const gp_model *m, const gp_pipeline_spec *ps, gp_plan *out);
/* remat auto's choice for p's split (gp_plan_make calls it): each stage's fewest dropping
 * slots whose estimate fits ps->mem_limit (else a CUDA device's memory; on the CPU without a
 * limit, none drop), slots dropping their cheap layers' activations alone first. GP_ERR_USAGE in
 * one line when a stage does not fit even with every slot dropping, saying how many stages would.
 */
gp_status gp_plan_choose_remat(const gp_model *m, const gp_pipeline_spec *ps, gp_plan *p);
/* The micro-batches of stage s that recompute under p's re-materialization. */
int gp_plan_recomputed(const gp_plan *p, int s);
/* Those that recompute their cheap layers alone (remat auto's selective slots). */
int gp_plan_selective(const gp_plan *p, int s);
/* The same, the automatic split balancing c (gp_split_costs: measured times, say); c NULL: the
 * analytic FLOPs, as gp_plan_make. */
struct gp_unit_costs;
gp_status gp_plan_make_from(const gp_model *m, const gp_pipeline_spec *ps,
                            const struct gp_unit_costs *c, gp_plan *out);
/* The partitioner's request (core/plan/solve.h) behind gp_plan_make's automatic split: ps's
 * stages, micro-batches, schedule (GP_SCHED_AUTO as it is: set one before solving) and
 * re-materialization, and m's optimizer state slots; no speeds, memory limits or transfer
 * costs. */
struct gp_partition_req;
void gp_plan_partition_req(const gp_model *m, const gp_pipeline_spec *ps,
                           struct gp_partition_req *r);
/* V (1 unless interleaved), and K: the devices (pipeline stages) that hold the chunks. */
static inline int gp_plan_chunks(const gp_plan *p) {
  return p->virtual_stages > 1 ? p->virtual_stages : 1;
}
static inline int gp_plan_devices(const gp_plan *p) {
  return p->stages / gp_plan_chunks(p);
}
/* GP_ERR_USAGE unless dev names a device: "cpu", "cuda" or "cuda:N". Whether the device
 * exists is checked when a pipeline is made on it. */
gp_status gp_device_check(const char *dev);
/* "cuda" becomes "cuda:0" in place (dev has room: devices are held in 16 bytes); others stay.
 * Names are stored in this form, so the rest of the code knows "cpu" and "cuda:N" alone. */
void gp_device_canonical(char *dev);
/* gp_device_check on n names (the first at first, the next stride bytes on), and that they
 * do not mix the CPU with CUDA devices. */
gp_status gp_devices_check(int n, const char *first, size_t stride);
/* NULL-terminated names as files and flags spell them, indexed by the enums. */
/* "gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved" */
const char *const *gp_schedule_names(void);
const char *const *gp_remat_names(void); /* "always", "except_last", "never" */
/* The micro-batches to suggest for `stages` stages: 4K (the GPipe paper's M >= 4K, from
 * which the bubble is small), at most the batch. */
int64_t gp_plan_micro_hint(int stages, int64_t batch);
/* Room for the balance of any plan: GP_MAX_DEVICES entries of at most 11 characters (an int)
 * and a comma or the NUL each. */
#define GP_PLAN_BALANCE_LEN (GP_MAX_DEVICES * 12)
/* "3,5,4": units per stage, in buf of n bytes (GP_PLAN_BALANCE_LEN always has room). Returns
 * the length of the whole text, as snprintf; when that is n or more, buf holds as much as fits
 * ending in "..." (n >= 4), so a cut balance is never mistaken for a whole one. */
size_t gp_plan_balance_str(const gp_plan *p, char *buf, size_t n);

#endif
