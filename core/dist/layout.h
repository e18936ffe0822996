/* Where a run's stages live: W processes, R data-parallel replicas of the pipeline, each over
 * P = W / R processes, each process holding a contiguous run of its replica's K stages. Pure
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
  int stages;            /* K */
  /* stages [first[p], first[p + 1]) are held by position p (P + 1 entries) */
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
/* The position holding stage s. */
int gp_layout_owner(const gp_layout *l, int s);
/* Whether this process holds stage s. */
static inline int gp_layout_local(const gp_layout *l, int s) {
  return s >= l->first[l->pos] && s < l->first[l->pos + 1];
}
/* The rank of position p of replica r. */
static inline int gp_layout_rank(const gp_layout *l, int r, int p) {
  return r * l->procs + p;
}
/* The one-process layout: W = R = P = 1, every stage local. */
void gp_layout_single(int stages, gp_layout *out);

#endif
