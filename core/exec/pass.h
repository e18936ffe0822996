/* Runs forward and backward over a range of nodes for one (micro-)batch. This is what a
 * stage worker interprets its actions with; with one stage it is the whole model. */
#ifndef GP_PASS_H
#define GP_PASS_H

#include "core/spec/spec.h"

/* The per-(micro-)batch state of a pass: every tensor id's value and gradient, and what
 * each node saved for its backward. Memory comes from e->arena. */
typedef struct gp_pass {
  const gp_model *m;
  int first, end; /* nodes [first, end) */
  int64_t batch;
  gp_tensor *val;  /* n_inputs + n_nodes entries; data NULL if not present */
  gp_tensor *grad; /* same; data NULL until some consumer wrote it */
  int *reader;     /* same: the one node reading the tensor in the model, or -1 (none, several) */
  unsigned char *both; /* n_nodes entries: gp_node_hands_both for the pass's nodes */
  void **saved;        /* n_nodes entries */
  /* Selective re-materialization (gp_stage_remat_set): where remat is set, the forward puts
   * the outputs and saved state of the nodes flagged in it (n_nodes entries) in remat_arena,
   * not e->arena, so they go when that arena is reset; remat_only: the forward runs the
   * flagged nodes alone (the re-materializing forward before the backward). */
  const unsigned char *remat;
  gp_arena *remat_arena;
  int remat_only;
  /* The stage's CUDA graphs (core/exec/graphs.h), or NULL: every op launched as it comes. */
  struct gp_graphs *graphs;
  /* BF16_MIXED's 16-bit storage (core/exec/bfstore.h): while pack is set (n_nodes entries), the
   * forward keeps the flagged nodes' outputs packed in e->arena; widen (NULL: never packed)
   * holds one node's f32 copies (its widened inputs, its output before packing) at a time. */
  const unsigned char *pack;
  gp_arena *widen;
} gp_pass;

gp_status gp_pass_init(gp_pass *p, const gp_model *m, int first, int end, int64_t batch);
/* reader[t] (n_inputs + n_nodes entries): the one node that reads tensor t, or -1 (none or
 * several). */
void gp_model_readers(const gp_model *m, int *reader);
/* Whether node i writes its output over its first input when it runs in a pass that starts at
 * node `first`: its type allows it (forward_in_place), the input was made in the pass (not a
 * model input, not another stage's), node i is its only reader in the whole model (no later
 * layer, no other stage, not the loss sees it) and its producer's backward does not read it. */
int gp_node_in_place(const gp_model *m, const int *reader, int i, int first);
/* Whether node i, in a pass that starts at node `first`, may keep its saved state over its
 * first input and take that memory back as the input's gradient (saves_over_input, the loss):
 * as gp_node_in_place, but for the output, which is the node's own (the loss per target). Not
 * where selective re-materialization drops the input's producer (gp_stage_remat_set): the
 * input is then recomputed into fresh memory before the backward reads it. */
int gp_node_over_input(const gp_model *m, const int *reader, int i, int first);
/* Whether node i (add of two tensors, in a pass that starts at node `first`) hands dout's
 * memory to both inputs' gradients, not only the first's. The two gradients then share a
 * buffer until both producers' backwards have read it, so nothing may write into it before:
 * node i is the last reader of both; the later-made input (producer H) has no other reader;
 * the other input's other readers come no later than H (their backwards, which add into its
 * gradient, run after H's); and H does not hand its dout on (no grad_is_dout). An input from
 * another stage counts as made before the pass (its gradient is read when the pass ends). */
int gp_node_hands_both(const gp_model *m, int i, int first);
void gp_pass_free(gp_pass *p);
/* Recompute FLOPs per byte saved below which a node counts as cheap to re-materialize
 * (element-wise activations and dropout, norms, adds, small pools: about 0.1 to 2.5 against
 * convolutions' and attention's hundreds). */
#define GP_REMAT_CHEAP_FLOPS_PER_BYTE 4.0
/* Selective re-materialization's layers among nodes [first, end) (flag[i] for those i, the
 * others left alone): the cheap ones (their forward FLOPs per byte they keep under
 * GP_REMAT_CHEAP_FLOPS_PER_BYTE; never the loss), except that a node writing over its input
 * in place (gp_node_in_place) is flagged as its producer is (dropping it alone would save
 * nothing): an in-place pair is always flagged alike, so the forward's aliasing never changes
 * and a recompute never writes over a kept tensor nor a kept one lives in the scratch.
 * Returns the bytes per sample they keep (outputs, less in-place ones, and saved state), less
 * what a loss over its flagged input then keeps apart (gp_node_over_input); *flops, when given,
 * their forward FLOPs per sample. */
int64_t gp_stage_remat_set(const gp_model *m, const int *reader, int first, int end,
                           unsigned char *flag, double *flops);
/* Forward of nodes [first, end). Inputs of the range (model inputs, tensors of earlier
 * nodes) must be set in p->val first. */
gp_status gp_pass_forward(gp_pass *p, gp_exec *e);
/* Backward in reverse order. Gradients of the range's outputs that later stages consumed
 * must be set in p->grad first (the loss node needs none). Tensors read by several
 * consumers get their gradients summed. */
gp_status gp_pass_backward(gp_pass *p, gp_exec *e);
/* The same in two halves (zero-bubble schedules; gp_grad_part in core/layer.h): _input (B)
 * runs the nodes in reverse order for the input gradients only, handing them on as
 * gp_pass_backward does (but never dout's memory to both inputs of an add: a copy instead);
 * _weight (W), any time after it and before the arena is reset, adds every node's parameter
 * gradients, reading the inputs, outputs' gradients and saved state B left. B then W gives
 * gp_pass_backward's bytes, parameter gradients and the gradients handed out of the range. */
gp_status gp_pass_backward_input(gp_pass *p, gp_exec *e);
gp_status gp_pass_backward_weight(gp_pass *p, gp_exec *e);

#endif
