/* gpipe-partition's parts: the request (flags over the model file's pipeline section), the
 * report (table and JSON, partition_report.c) and the timeline (partition_timeline.c). */
#ifndef GP_CLI_PARTITION_H
#define GP_CLI_PARTITION_H

#include <stdint.h>

#include "cli/args.h"
#include "core/dist/layout.h"
#include "core/plan/cluster.h"
#include "core/plan/predict.h"
#include "core/plan/solve.h"
#include "core/schedule/schedule.h"
#include "core/spec/spec.h"

/* --by's names, and the table's words for them, indexed by gp_cost_by */
extern const char *const gp_part_by_names[];
extern const char *const gp_part_by_titles[];

/* Everything the request is made of, after flags and the model file's defaults. */
typedef struct gp_part_request {
  /* stages: the split's parts, the K V chunks of an interleaved schedule (chunk c on stage
   * c mod K; chunks: V >= 2), else the K stages (chunks 1); devices, speeds and limits are the
   * parts' */
  int stages, micro, n_devices, threads;
  int chunks;
  int replicas;          /* R: data-parallel replicas sharing the batch (1 without --replicas) */
  int64_t batch;         /* the global mini-batch */
  int64_t replica_batch; /* the largest replica's share: ceil(batch / R) */
  int64_t micro_batch;   /* ceil(replica_batch / M) */
  gp_schedule_kind schedule; /* GP_SCHED_AUTO until chosen */
  int schedule_auto;         /* --schedule auto: `schedule` is the choice, `chosen` says why */
  char chosen[320];
  gp_remat remat;
  gp_cost_by by;
  char devices[GP_MAX_DEVICES][16];
  double speed[GP_MAX_DEVICES], mem_limit[GP_MAX_DEVICES];
  double dev_limit[GP_MAX_DEVICES]; /* a stage's (device's) limit, its chunks' together */
  int has_limit;
  char cache_dir[4096];
  int fixed;                     /* --balance: the split to predict, not to search for */
  int first[GP_MAX_DEVICES + 1]; /* its stages' first units (as gp_partition's) */
} gp_part_request;

/* The flags that describe a launch past one process. */
typedef struct gp_part_dist_flags {
  const gp_flag *processes, *replicas, *hosts, *pph, *local, *remote, *tflops, *cluster;
} gp_part_dist_flags;

/* A launch past one process and its predictions (partition_dist.c). */
typedef struct gp_part_dist {
  int on; /* a flag of the launch was given: predict and report it */
  int world, replicas;
  char src_world[64], src_replicas[64], src_compute[300];
  gp_cluster cl; /* flags over the cluster file over the defaults */
  double spc;    /* seconds per unit of the time costs */
  int cores;     /* CPU cores of each process (--threads, or this machine's a process) */
  char src_cores[96];
  gp_layout layout;
  gp_dist_pred pred;
} gp_part_dist;

/* Reads the launch's flags (and --cluster), checks the layout (gp_layout_make) and the batch's
 * share per replica, and sets q's replicas and micro-batch size. Nothing when no flag given. */
gp_status gp_part_dist_setup(const gp_part_dist_flags *f, gp_part_request *q, gp_part_dist *d);
/* d->spc, the seconds a unit of the time costs takes: 1 under --by time, else a device's FLOP
 * rate (--device-tflops, the cluster file's, or measured here at q->threads). */
gp_status gp_part_dist_rate(const gp_part_request *q, gp_part_dist *d);
/* The link a replica's hand-offs cross: the remote one where its processes span two hosts in
 * any replica, else the local one. */
const gp_link *gp_part_dist_link(const gp_part_dist *d);
/* The predictions for the split p (after gp_part_dist_rate) (tc: gp_part_time_costs; r: the
 * partitioner's request). */
gp_status gp_part_dist_predict(const gp_part_request *q, const gp_unit_costs *tc,
                               const gp_partition_req *r, const gp_partition *p, gp_part_dist *d);
/* The launch, its assumptions, a row per process of one replica and the step time, all-reduce,
 * traffic and memory lines; the same as the "distributed" member of the JSON object. */
void gp_part_dist_print_table(const gp_part_request *q, const gp_part_dist *d);
void gp_part_dist_print_json(const gp_part_request *q, const gp_part_dist *d);

/* The table: per stage units, parameters, GFLOPs, share, memory, traffic; then imbalance,
 * bubble, speed-ups and the hints (a unit too large to balance, the batch). */
void gp_part_print_table(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                         const gp_partition *p);
/* The same as one JSON object on stdout, with the timeline's events when ev is not NULL and
 * the launch's predictions when d is on. */
void gp_part_print_json(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                        const gp_partition *p, const gp_sim_events *ev, const gp_part_dist *d);

/* The costs predictions are made from (under --by params, the FLOPs). */
gp_unit_costs gp_part_time_costs(const gp_part_request *q, const gp_unit_costs *c);
/* The simulated schedule of this partition (tc: gp_part_time_costs). */
gp_status gp_part_simulate(const gp_part_request *q, const gp_unit_costs *tc, const gp_partition *p,
                           gp_sim_events *ev, double *makespan);
/* The timeline as text: a row per stage, forward and backward of each micro-batch. */
void gp_part_print_timeline(const gp_part_request *q, const gp_sim_events *ev, double makespan);

#endif
