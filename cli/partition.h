/* gpipe-partition's parts: the request (flags over the model file's pipeline section), the
 * report (table and JSON, partition_report.c) and the timeline (partition_timeline.c). */
#ifndef GP_CLI_PARTITION_H
#define GP_CLI_PARTITION_H

#include <stdint.h>

#include "core/plan/solve.h"
#include "core/schedule/schedule.h"
#include "core/spec/spec.h"

/* --by's names, and the table's words for them, indexed by gp_cost_by */
extern const char *const gp_part_by_names[];
extern const char *const gp_part_by_titles[];

/* Everything the request is made of, after flags and the model file's defaults. */
typedef struct gp_part_request {
  int stages, micro, n_devices, threads;
  int64_t batch, micro_batch;
  gp_schedule_kind schedule;
  gp_remat remat;
  gp_cost_by by;
  char devices[GP_MAX_DEVICES][16];
  double speed[GP_MAX_DEVICES], mem_limit[GP_MAX_DEVICES];
  int has_limit;
  char cache_dir[4096];
} gp_part_request;

/* The table: per stage units, parameters, GFLOPs, share, memory, traffic; then imbalance,
 * bubble, speed-ups and the hints (a unit too large to balance, the batch). */
void gp_part_print_table(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                         const gp_partition *p);
/* The same as one JSON object on stdout, with the timeline's events when ev is not NULL. */
void gp_part_print_json(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                        const gp_partition *p, const gp_sim_events *ev);

/* The costs predictions are made from (under --by params, the FLOPs). */
gp_unit_costs gp_part_time_costs(const gp_part_request *q, const gp_unit_costs *c);
/* The simulated schedule of this partition (tc: gp_part_time_costs). */
gp_status gp_part_simulate(const gp_part_request *q, const gp_unit_costs *tc, const gp_partition *p,
                           gp_sim_events *ev, double *makespan);
/* The timeline as text: a row per stage, forward and backward of each micro-batch. */
void gp_part_print_timeline(const gp_part_request *q, const gp_sim_events *ev, double makespan);

#endif
