/* The partitioner: the exact split of N units into K contiguous stages that minimizes the slowest
 * stage (compute + recompute + boundary transfer, devices of different speeds allowed) under
 * a per-device memory limit, ties broken toward the smaller spread. */
#ifndef GP_SOLVE_H
#define GP_SOLVE_H

#include "core/plan/cost.h"

typedef struct gp_partition_req {
  int stages, micro;
  gp_schedule_kind schedule;
  gp_remat remat;
  const double *speed;     /* per stage, relative (NULL: all 1) */
  const double *mem_limit; /* per stage, bytes (NULL or 0 entries: no limit) */
  double bytes_per_s;      /* boundary transfer bandwidth (0: transfers are free) */
  double optim_slots;      /* optimizer state per parameter: gp_optimizer_slots */
  /* interleaved: V >= 2 chunks a device, `stages` being the K V chunks (chunk v on device
   * v mod K, its speed and limit speed[v], mem_limit[v]); 0 or 1: a stage a device */
  int chunks;
  /* Across processes: the K devices (a stage each, or interleaved chunk c's device c mod K)
   * sit in `procs` processes of a replica, device d in proc_of[d] (NULL: contiguous runs as
   * even as can be, the first K mod P taking one more, as gp_layout_make puts them). Every
   * schedule's simulation charges each boundary between two processes link_latency_s + its
   * bytes / link_bytes_per_s (each way), in the costs' unit at seconds_per_cost seconds a
   * unit (1 for measured times). procs <= 1: one process, no hand-offs; seconds_per_cost 0:
   * not known, so not charged (schedule auto then leaves interleaved out: gp_schedule_choose). */
  int procs;
  const int *proc_of;
  double link_latency_s, link_bytes_per_s, seconds_per_cost;
} gp_partition_req;

/* Whether the boundary after stage s of r (interleaved: chunk s) joins two processes. */
int gp_partition_crosses(const gp_partition_req *r, int s);
/* Whether r's hand-offs between processes are charged: procs > 1 with the link and the costs'
 * seconds known. */
int gp_partition_charges_handoffs(const gp_partition_req *r);

typedef struct gp_partition {
  int stages;
  int first[GP_MAX_DEVICES + 1]; /* stage s = units [first[s], first[s+1]) */
  double time[GP_MAX_DEVICES];   /* per micro-batch: (fwd + bwd + recompute) / speed + transfer */
  double memory[GP_MAX_DEVICES]; /* estimated peak bytes: weights, grads, optimizer state,
                                    activations of the micro-batches in flight, working set */
  /* re-materialization per stage: activation slots (of gp_partition_in_flight) that drop,
   * remat auto's choice under the memory limit; and the micro-batches of M that recompute */
  int drop[GP_MAX_DEVICES], recomputed[GP_MAX_DEVICES];
  /* remat auto: the other slots that drop their cheap layers' activations alone (selective
   * re-materialization, gp_stage_remat_set), and the bytes those layers keep a micro-batch */
  int sel[GP_MAX_DEVICES], sel_micro[GP_MAX_DEVICES]; /* (and the micro-batches they hold) */
  double cheap_bytes[GP_MAX_DEVICES];
  double max_time, spread; /* slowest stage, slowest - fastest */
  double imbalance;        /* max / mean stage time */
  double bubble;           /* simulated with core/schedule/schedule.h */
  double makespan;         /* that simulation's step: M micro-batches through the stages */
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
/* Micro-batches whose activations stage s of K holds at once: all M under GPipe (fill-drain),
 * min(M, K - s) under 1F1B (stage s runs K - s - 1 forwards ahead), at most min(M, K) under
 * ZB-H1 and min(M, 2K - 1) under ZB-H2 (until each one's W), and as 1F1B over the K V chunks
 * under interleaved (about: a device's warm-up forwards spread over its chunks). */
int gp_partition_in_flight(const gp_partition_req *r, int K, int s);
/* Whether stage s of K re-materializes, as gp_schedule_build lists it: except_last does not
 * where at most one micro-batch is in flight (1F1B's last stage; every stage at M = 1).
 * 0 under auto, whose choice depends on the split (gp_partition's drop). */
int gp_partition_remats(const gp_partition_req *r, int K, int s);
/* Of micro-batches 0..micro-1, those that `drop` of `slots` activation slots hold (m with
 * m % slots < drop, as gp_schedule_build_drops marks them). */
int gp_partition_dropped_micro(int micro, int slots, int drop);
/* Remat auto's choice for stage s = units [a, b) of r->stages under r's memory limit: of its
 * in-flight micro-batches, those that drop all their activations for its estimate to fit
 * (0 without a limit or with one in flight at most, or where dropping the cheap layers' alone
 * fits: gp_partition's sel; all when none fits); the fixed modes' count otherwise. */
int gp_partition_choose_drops(const gp_unit_costs *c, const gp_partition_req *r, int s, int a,
                              int b);

#endif
