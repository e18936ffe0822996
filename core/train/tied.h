/* Tied parameters at run time: where each copy of each enabled tied group (gp_model.tied)
 * lives (stage, offset in that stage's contiguous buffers), one sum buffer per group, and the
 * work the executor's optimizer step does between its barriers: the first copy's stage sums
 * every copy's gradient in member order, then every stage writes that sum over its copies, so
 * the copies get identical gradients, hence identical updates. */
#ifndef GP_TIED_H
#define GP_TIED_H

#include "core/train/params.h"

typedef struct gp_tied_copy {
  int stage;
  int place;   /* its stage's memory space (see gp_tied_init) */
  int device;  /* its stage's backend device */
  float *g;    /* the copy's gradient in its stage's buffer */
  int64_t off; /* its offset in the stage's train/grad buffers */
} gp_tied_copy;

typedef struct gp_tied_rt {
  int n;                /* copies (members) */
  int64_t numel;        /* elements of each */
  gp_tied_copy *copy;   /* member order; copy 0's stage owns the sum */
  gp_backend *owner_be; /* the backend of copy 0's stage */
  float *sum;           /* numel floats on the owner's device */
  float *tmp;           /* numel floats on the owner's device, when a copy is elsewhere */
} gp_tied_rt;

/* Ranges of a stage's gradient buffer left out of the clipping norm: the copies that are not
 * their group's first, so a group counts once. Sorted, disjoint. */
typedef struct gp_tied_stage {
  int n_skip;
  int64_t *skip_begin, *skip_end;
} gp_tied_stage;

typedef struct gp_tied {
  int n_groups;
  gp_tied_rt *g;
  int k;
  gp_tied_stage *st; /* k */
} gp_tied;

/* Locates the copies of m's enabled tied groups among the k stages' parameters (params[s]
 * covers nodes [first_node, end_node)) and allocates the sums with the owners' backends.
 * place[s] says where stage s's memory is: stages with equal places read each other's
 * buffers directly; others go through copy_peer.
 * A model without tied groups gives n_groups = 0 and nothing to do. */
gp_status gp_tied_init(gp_tied *t, const gp_model *m, int k, gp_params *const *params,
                       gp_backend *const *be, const int *place);
void gp_tied_free(gp_tied *t);

/* Stage s, once every stage's gradients are final: for each group whose first copy s holds,
 * sum = g_0 + g_1 + ... in member order (reading the other stages' buffers). */
gp_status gp_tied_sum(gp_tied *t, int s, gp_backend *be);
/* Stage s, once every sum is done: each copy s holds gets its group's sum. */
gp_status gp_tied_scatter(gp_tied *t, int s, gp_backend *be);
/* The sum of squares of stage s's gradients, each tied group counted once (at its first
 * copy). */
gp_status gp_tied_grad_sumsq(const gp_tied *t, int s, const gp_params *p, gp_backend *be,
                             double *out);

#endif
