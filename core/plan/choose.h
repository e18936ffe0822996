/* The schedule `auto` stands for (pipeline.schedule: auto, --schedule auto, the default): of
 * the schedules gp_schedule_names lists that can run the request (interleaved once for each V
 * of 2 .. GP_CHOOSE_V chunks a stage), the one whose simulated step is shortest on the split
 * the partitioner makes for it (or on a given split) within the memory limits; on a tie
 * (within 0.5%), the one whose fullest stage (device) needs the least memory. */
#ifndef GP_CHOOSE_H
#define GP_CHOOSE_H

#include "core/plan/solve.h"

#define GP_CHOOSE_MAX 8 /* candidates */
#define GP_CHOOSE_V 4   /* the most chunks a stage auto weighs interleaved at */

typedef struct gp_schedule_choice {
  int n; /* candidates considered, in gp_schedule_names order */
  gp_schedule_kind kind[GP_CHOOSE_MAX];
  int chunks[GP_CHOOSE_MAX];     /* V: 2 .. GP_CHOOSE_V for interleaved, else 1 */
  gp_remat remat[GP_CHOOSE_MAX]; /* the request's, never for the zero-bubble schedules */
  int runs[GP_CHOOSE_MAX];       /* 0: refused (why[i] says why) */
  double step[GP_CHOOSE_MAX];    /* simulated step, in the costs' unit */
  double bubble[GP_CHOOSE_MAX];  /* of that simulation */
  double memory[GP_CHOOSE_MAX];  /* the fullest stage's (device's chunks') estimate, bytes */
  char why[GP_CHOOSE_MAX][160];  /* a refused candidate's reason */
  int chosen;                    /* index of the choice */
} gp_schedule_choice;

/* r: K stages (r->chunks and r->schedule are ignored); the schedules that re-materialize
 * nothing (gp_schedule_keeps_all) run never under r->remat auto or never, and are left out
 * under always or except_last (what the request asked); first: a given split (K + 1 entries),
 * or NULL for the partitioner's split of each candidate. Interleaved runs only on its own
 * split (gp_partition_solve_devices: K V chunks, chunk c at speed r->speed[c % K], a device's
 * chunks within r->mem_limit[d] together), with M a multiple of K; across processes
 * (r->procs > 1) only where the hand-offs are charged (gp_partition_charges_handoffs), every
 * candidate's then costing its boundaries between processes. *out: the chosen candidate's partition
 * (K V stages for interleaved). When no candidate runs, the first candidate's error. */
gp_status gp_schedule_choose(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                             gp_schedule_choice *ch, gp_partition *out);

/* "1f1b (simulated step 1.00; gpipe 1.22, memory 1.10x; zb-h2 cannot run; interleaved V=2
 * 0.98, memory 1.30x)": the choice, then the others' steps and fullest stages relative to it,
 * in buf of n bytes ("interleaved cannot run" once where it runs at no V). */
void gp_schedule_choice_str(const gp_schedule_choice *ch, char *buf, size_t n);
/* Candidate i's name in buf: "zb-h1", "interleaved V=2". Returns buf. */
const char *gp_schedule_choice_name(const gp_schedule_choice *ch, int i, char *buf, size_t n);

/* Interleaved's split of r's K V chunks (r->chunks = V, r->stages = K V, a speed a chunk;
 * r->mem_limit ignored): the partitioner's fastest where each device's chunks (d, d + K, ..)
 * fit dev_limit[d] together (K entries; NULL or 0: none), else the fastest with each chunk
 * held to a V-th of its device's limit; GP_ERR_USAGE when that does not fit either. */
gp_status gp_partition_solve_devices(const gp_unit_costs *c, const gp_partition_req *r,
                                     const double *dev_limit, gp_partition *out);
/* Device d of K's estimate: its chunks' (d, d + K, .. of p) together; stage d's for K = p's. */
double gp_partition_device_memory(const gp_partition *p, int K, int d);

#endif
