/* CUDA graphs of a stage's actions (docs/cuda.md, "CUDA graphs"): the runs of a pass's layers
 * that wait for nothing on the host are recorded once per action shape and replayed, the pass's
 * host state (tensors, arenas, bindings) set to what the recorded run left. Used by
 * core/exec/pass.c where the stage gave its pass a gp_graphs; the backend's graph ops do the
 * recording (NULL on the CPU: nothing here runs). */
#ifndef GP_EXEC_GRAPHS_H
#define GP_EXEC_GRAPHS_H

#include <stdint.h>

#include "core/layer.h"
#include "core/spec/spec.h"

struct gp_pass;
typedef struct gp_graphs gp_graphs;
typedef struct gp_graph_run gp_graph_run;

/* A stage's graphs (over nodes [first, end) of m) on backend be; *out NULL (nothing to do)
 * where be has no graph ops or GP_CUDA_GRAPHS=0. */
gp_status gp_graphs_init(const gp_model *m, int first, int end, gp_backend *be, gp_graphs **out);
void gp_graphs_free(gp_graphs *g); /* NULL ok; waits for the backend's queue */

/* The loop of one pass function from iteration `from` (a node index; forward: up, backward and
 * weight: down), calling gp_graph_node at each iteration's start when run is not NULL. */
typedef gp_status (*gp_graph_loop)(struct gp_pass *p, gp_exec *e, int part, int from,
                                   gp_graph_run *run);
/* Runs loop over pass p for action `kind` (0 forward, 1 backward, 2 weight) of half `part`
 * with p->graphs: eagerly, recording or replaying as the action's entry says. */
gp_status gp_graphs_pass(struct gp_pass *p, gp_exec *e, int kind, int part, gp_graph_loop loop);
/* At the start of iteration i (node i): *skip 0, run it; n > 0: a graph did it and the n - 1
 * iterations after it (the loop moves on by n). */
gp_status gp_graph_node(gp_graph_run *run, int i, int *skip);

/* Process-wide counts, for tests and logs: segments recorded, graph launches (replays and the
 * launch right after a recording). */
int64_t gp_graphs_recorded(void);
int64_t gp_graphs_launched(void);
int64_t gp_graphs_dropped(void); /* entries whose graphs were dropped (to be recorded again) */

#endif
