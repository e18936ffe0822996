/* Where a run's stages live: W processes, R data-parallel replicas of the pipeline, each over
 * P = W / R processes, each process holding a contiguous run of its replica's K devices (a
 * device: a stage, or under interleaved schedules V chunks, chunk c on device c mod K, so that
 * a process holds a strided set of the K x V chunks). Pure
 * arithmetic on the launch (no MPI here): the runtime (core/dist/dist.h), gpipe-partition's
 * predictions and the checkpoint writer all read the same map. Ranks are numbered replica by
 * replica: rank = replica * P + position. */
#ifndef GP_LAYOUT_H
#define GP_LAYOUT_H

#include "core/status.h"

#define GP_MAX_PROCESSES 4096 /* W: at least 1,024 devices, several processes per host */

typedef struct gp_layout {
  int world, rank;       /* W, this process */
  int replicas, replica; /* R, this process's replica */
  int procs, pos;        /* P = W / R processes per replica; this process's position */
  int stages;            /* K x V: every stage (chunk) of the pipeline */
  int chunks;            /* V: chunks a device (0 or 1: a stage a device) */
  /* devices [first[p], first[p + 1]) are held by position p (P + 1 entries) */
  int first[GP_MAX_PROCESSES + 1];
} gp_layout;

/* The layout of W processes as R replicas of a K-stage pipeline, this process being `rank`:
 * contiguous runs of stages, as even in count as can be (the first K % P positions take one
 * more), or as `procs_of` says (K entries: the position of each stage, non-decreasing, every
 * position used; NULL: even). GP_ERR_USAGE, one line saying what would work, when R does not
 * divide W, or a replica has more processes than stages. */
gp_status gp_layout_make(int world, int rank, int replicas, int stages, const int *procs_of,
                         gp_layout *out);
/* The planner's assignment of K stages (each costing cost[s] a step) to P positions as
 * contiguous runs, each position at least one stage, the costliest position as cheap as can be
 * (the earlier positions taking the stages a tie leaves); procs_of[s]: stage s's position, for
 * gp_layout_make. P <= K. */
void gp_layout_balance(const double *cost, int stages, int procs, int *procs_of);
/* Interleaved schedules: l, made over the K devices, becomes the layout of their K x `chunks`
 * stages, stage c on device c mod K (each position keeping its devices). No-op for chunks <= 1. */
void gp_layout_interleave(gp_layout *l, int chunks);
/* The device of stage s (s itself with a stage a device). */
static inline int gp_layout_device(const gp_layout *l, int s) {
  return l->chunks > 1 ? s % (l->stages / l->chunks) : s;
}
/* The position holding stage s. */
int gp_layout_owner(const gp_layout *l, int s);
/* Whether this process holds stage s. */
static inline int gp_layout_local(const gp_layout *l, int s) {
  const int d = gp_layout_device(l, s);
  return d >= l->first[l->pos] && d < l->first[l->pos + 1];
}
/* How many stages position p holds. */
static inline int gp_layout_held(const gp_layout *l, int p) {
  return (l->first[p + 1] - l->first[p]) * (l->chunks > 1 ? l->chunks : 1);
}
/* The rank of position p of replica r. */
static inline int gp_layout_rank(const gp_layout *l, int r, int p) {
  return r * l->procs + p;
}
/* The one-process layout: W = R = P = 1, every stage local. */
void gp_layout_single(int stages, gp_layout *out);

#endif
