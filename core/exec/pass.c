/* Forward and backward over a range of nodes, with gradient summation for tensors that
 * several layers read (skip connections). */
#include "core/exec/pass.h"

#include "core/exec/graphs.h"
#include "core/exec/bfstore.h"

#include <stdlib.h>
#include <string.h>

gp_status gp_pass_init(gp_pass *p, const gp_model *m, int first, int end, int64_t batch) {
  memset(p, 0, sizeof *p);
  p->m = m;
  p->first = first;
  p->end = end;
  p->batch = batch;
  size_t nt = (size_t)(m->n_inputs + m->n_nodes);
  p->val = calloc(nt, sizeof *p->val);
  p->grad = calloc(nt, sizeof *p->grad);
  p->saved = calloc((size_t)m->n_nodes, sizeof *p->saved);
  p->reader = malloc(nt * sizeof *p->reader);
  p->both = calloc((size_t)m->n_nodes, sizeof *p->both);
  if (!p->val || !p->grad || !p->saved || !p->reader || !p->both) {
    gp_pass_free(p);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for a pass");
  }
  gp_model_readers(m, p->reader);
  for (int i = first; i < end; i++)
    p->both[i] = (unsigned char)gp_node_hands_both(m, i, first);
  return GP_OK;
}

void gp_model_readers(const gp_model *m, int *reader) {
  int nt = m->n_inputs + m->n_nodes;
  for (int t = 0; t < nt; t++)
    reader[t] = -1;
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++) {
      int t = m->nodes[i].in[j];
      reader[t] = reader[t] == -1 ? i : -2; /* -2: several, until the end */
    }
  for (int t = 0; t < nt; t++)
    if (reader[t] < 0) reader[t] = -1;
}

void gp_pass_free(gp_pass *p) {
  if (!p) return;
  free(p->val);
  free(p->grad);
  free(p->saved);
  free(p->reader);
  free(p->both);
  p->val = p->grad = NULL;
  p->saved = NULL;
  p->reader = NULL;
  p->both = NULL;
}

/* Keeps the layer's status (a bad token id stays GP_ERR_DATA) and says where it happened. */
static gp_status node_error(const gp_model *m, int i, const char *what, gp_status st) {
  const gp_node *n = &m->nodes[i];
  return gp_error_prefix(st, "%s of layer '%s' (%s, %s:%d:%d): ", what, n->layer.path,
                         n->layer.type->name, m->file ? m->file : "model", n->line, n->col);
}

int gp_node_in_place(const gp_model *m, const int *reader, int i, int first) {
  const gp_node *n = &m->nodes[i];
  if (!n->layer.type->forward_in_place) return 0;
  int src = n->in[0];
  if (src < m->n_inputs + first || reader[src] != i) return 0;
  const gp_layer *prod = &m->nodes[src - m->n_inputs].layer;
  return prod->type->backward_ignores_out && prod->out_dtype == n->layer.out_dtype &&
         gp_shape_numel(&prod->out_shape) == gp_shape_numel(&n->layer.out_shape);
}

int gp_node_over_input(const gp_model *m, const int *reader, int i, int first) {
  const gp_node *n = &m->nodes[i];
  if (!n->layer.type->saves_over_input) return 0;
  int src = n->in[0];
  if (src < m->n_inputs + first || reader[src] != i) return 0;
  const gp_layer *prod = &m->nodes[src - m->n_inputs].layer;
  return prod->type->backward_ignores_out && prod->out_dtype == GP_F32;
}

/* The highest index of a node other than `skip` that reads tensor t, or -1. */
static int last_other_reader(const gp_model *m, int t, int skip) {
  for (int i = m->n_nodes - 1; i >= 0; i--)
    for (int j = 0; i != skip && j < m->nodes[i].n_in; j++)
      if (m->nodes[i].in[j] == t) return i;
  return -1;
}

int gp_node_hands_both(const gp_model *m, int i, int first) {
  const gp_node *n = &m->nodes[i];
  if (!n->layer.type->grad_is_dout || n->n_in != 2 || n->in[0] == n->in[1]) return 0;
  int prod[2];
  for (int j = 0; j < 2; j++) {
    int t = n->in[j];
    if (t < m->n_inputs || !m->nodes[t - m->n_inputs].trains) return 0;
    prod[j] =
        t - m->n_inputs < first ? first - 1 : t - m->n_inputs; /* another stage's: read last */
  }
  if (prod[0] == prod[1]) return 0;
  int hi = prod[1] > prod[0], lo = 1 - hi;
  if (m->nodes[prod[hi]].layer.type->grad_is_dout) return 0;
  return last_other_reader(m, n->in[hi], i) < 0 && last_other_reader(m, n->in[lo], i) <= prod[hi];
}

int64_t gp_stage_remat_set(const gp_model *m, const int *reader, int first, int end,
                           unsigned char *flag, double *flops) {
  int64_t bytes = 0;
  double f = 0;
  for (int i = first; i < end; i++) {
    const gp_node *n = &m->nodes[i];
    gp_cost c;
    memset(&c, 0, sizeof c);
    n->layer.type->cost(&n->layer, &c);
    int place = gp_node_in_place(m, reader, i, first);
    int64_t keeps = (place ? 0 : c.out_bytes) + c.saved_bytes;
    flag[i] = !n->layer.type->is_loss && i != m->n_nodes - 1 && c.out_bytes > 0 &&
              c.fwd_flops < GP_REMAT_CHEAP_FLOPS_PER_BYTE * (double)(c.out_bytes + c.saved_bytes);
    /* in place, the producer is in [first, i) (gp_node_in_place): flagged alike, as one */
    if (place) flag[i] = flag[n->in[0] - m->n_inputs];
    /* a dropped input: the loss keeps its state apart, as without over_input */
    if (gp_node_over_input(m, reader, i, first) && flag[n->in[0] - m->n_inputs])
      bytes -= c.over_input_bytes;
    if (!flag[i]) continue;
    bytes += keeps;
    f += c.fwd_flops;
  }
  if (flops) *flops = f;
  return bytes;
}

/* BF16_MIXED (core/backend.h): t rounded to bf16 in place when it is an f32 activation or an
 * activation gradient. Called on the outputs of the nodes that depend on a trainable
 * parameter, losses excepted (their values are the f32 loss), and on every input gradient a
 * layer writes; what a layer keeps for its backward (norms' statistics, softmax probabilities)
 * and integer tensors stay as they are. Per element, so K, M and the schedule change nothing. */
static gp_status round_mixed(gp_exec *e, const gp_tensor *t) {
  if (e->be->precision != GP_PREC_BF16_MIXED || t->dtype != GP_F32 || !t->data) return GP_OK;
  int64_t n = gp_shape_numel(&t->shape);
  return n > 0 ? e->be->round_bf16(e->be, n, GP_F32P(t)) : GP_OK;
}

/* Each loop below runs from node `from` and, with run (CUDA graphs), lets gp_graph_node run
 * a recorded stretch of nodes at an iteration's start, or record or observe it. */
static gp_status forward_from(gp_pass *p, gp_exec *e, int part, int from, gp_graph_run *run) {
  (void)part;
  const gp_model *m = p->m;
  gp_tensor in[GP_MAX_INPUTS];
  gp_arena *own = e->arena;
  for (int i = from; i < p->end; i++) {
    int skip = 0;
    if (run) GP_TRY(gp_graph_node(run, i, &skip));
    if (skip) {
      i += skip - 1;
      continue;
    }
    const gp_node *n = &m->nodes[i];
    const gp_layer *l = &n->layer;
    int flagged = p->remat && p->remat[i];
    if (p->remat_only && !flagged) continue;
    gp_arena *ar = flagged && p->remat_arena ? p->remat_arena : own;
    for (int j = 0; j < n->n_in; j++) {
      in[j] = p->val[n->in[j]];
      if (!in[j].data)
        return GP_ERR(GP_ERR_RUNTIME, "layer '%s': input %d is not available in this stage",
                      l->path, j + 1);
    }
    GP_TRY(gp_bfstore_widen(p, e, i, in, NULL)); /* (what the slot keeps packed) */
    int t = m->n_inputs + i;
    gp_shape s = gp_shape_batch(p->batch, &l->out_shape);
    if (gp_node_in_place(m, p->reader, i, p->first)) {
      p->val[t] = in[0];
      p->val[t].shape = s;
    } else {
      GP_TRY(gp_arena_tensor(gp_bfstore_out_arena(p, i, ar), l->out_dtype, &s, &p->val[t]));
    }
    p->saved[i] = NULL;
    e->bind = e->binds ? &e->binds[i - e->bind_first] : NULL;
    if (e->on_layer) e->on_layer(e, i, 0, 0);
    e->arena = ar; /* (its saved state too) */
    /* training only: an evaluation's predictions read the logits after the loss */
    e->over_input = e->training && gp_node_over_input(m, p->reader, i, p->first) &&
                    !(p->remat && p->remat[n->in[0] - m->n_inputs]);
    gp_status st = l->type->forward(l, e, in, &p->val[t], &p->saved[i]);
    e->arena = own;
    e->over_input = 0;
    if (st == GP_OK && n->trains && !l->type->is_loss) st = round_mixed(e, &p->val[t]);
    if (st == GP_OK) st = gp_bfstore_pack_node(p, e, i);
    if (st != GP_OK) return node_error(m, i, "forward", st);
    GP_TRY(gp_bfstore_release(p));
    if (e->on_layer) e->on_layer(e, i, 0, 1);
  }
  return GP_OK;
}

gp_status gp_pass_forward(gp_pass *p, gp_exec *e) {
  return gp_graphs_pass(p, e, 0, GP_GRAD_BOTH, forward_from);
}

/* Whether tensor t's gradient may go to e->temp: B of a split backward, t made in the pass by
 * a node without parameters (its W reads no gradient; the stage's inputs' gradients are
 * handed on after B, from the slot). */
static int transient(const gp_pass *p, const gp_exec *e, int t) {
  int i = t - p->m->n_inputs;
  return e->temp && i >= p->first && i < p->end && p->m->nodes[i].layer.n_params == 0;
}

/* BOTH or B: the nodes in reverse order, handing gradients on. */
static gp_status backward_from(gp_pass *p, gp_exec *e, int part_, int from, gp_graph_run *run) {
  const gp_grad_part part = (gp_grad_part)part_;
  const gp_model *m = p->m;
  gp_backend *be = e->be;
  gp_tensor in[GP_MAX_INPUTS], din[GP_MAX_INPUTS];
  int fresh[GP_MAX_INPUTS];
  for (int i = from; i >= p->first; i--) {
    int skip = 0;
    if (run) GP_TRY(gp_graph_node(run, i, &skip));
    if (skip) {
      i -= skip - 1;
      continue;
    }
    const gp_node *n = &m->nodes[i];
    const gp_layer *l = &n->layer;
    int t = m->n_inputs + i;
    int is_loss = (i == m->n_nodes - 1);
    if (!is_loss && !p->grad[t].data) continue; /* nothing downstream needs it */
    /* several readers' gradients, each rounded, summed: rounded once more (bf16 storage; once,
     * in B: W reads the same sum) */
    if (!is_loss && p->reader[t] < 0 && part != GP_GRAD_WEIGHT) GP_TRY(round_mixed(e, &p->grad[t]));
    /* B then W: no handing dout to both inputs of an add, where the later producer's W would
     * read its dout after the other input's readers had added into it (a copy instead: the
     * same bytes). */
    int any = 0, shared = 0, both = p->both[i] && part == GP_GRAD_BOTH;
    for (int j = 0; j < n->n_in; j++) {
      int src = n->in[j];
      in[j] = p->val[src];
      memset(&din[j], 0, sizeof din[j]);
      fresh[j] = 0;
      /* model inputs, integer tensors (labels, ids) and what depends on no trainable
       * parameter take no gradient */
      if (src < m->n_inputs || !m->nodes[src - m->n_inputs].trains) continue;
      int repeated = 0;
      for (int k = 0; k < j; k++)
        repeated |= (n->in[k] == src);
      din[j].shape = in[j].shape;
      din[j].dtype = GP_F32;
      din[j].device = in[j].device;
      any = 1;
      if (j == 0 && l->type->saves_over_input && p->saved[i] && p->saved[i] == in[0].data &&
          !p->grad[src].data) { /* its state is over the input: the gradient goes there too */
        p->grad[src] = din[0];
        p->grad[src].data = in[0].data;
        din[0] = p->grad[src];
        fresh[0] = 1;
        continue;
      }
      /* (not a transient dout to a gradient W reads: it would be freed before W) */
      if (!p->grad[src].data && !repeated && l->type->grad_is_dout && (!shared || both) &&
          !is_loss && (!transient(p, e, t) || transient(p, e, src))) {
        /* Safe to share: dout is read by this backward alone, and whatever later adds into
         * the input's gradient (its other consumers, earlier in the model) runs after it.
         * Both inputs' when gp_node_hands_both says nothing writes into one before the
         * other's producer has read it. */
        p->grad[src] = p->grad[t];
        p->grad[src].shape = in[j].shape;
        shared = 1;
        memset(&din[j], 0, sizeof din[j]);
        continue;
      }
      if (!p->grad[src].data && !repeated) {
        gp_arena *a = transient(p, e, src) ? e->temp : e->arena;
        GP_TRY(gp_arena_tensor(a, GP_F32, &in[j].shape, &p->grad[src]));
        din[j] = p->grad[src];
        fresh[j] = 1;
      } else {
        GP_TRY(gp_arena_tensor(e->temp ? e->temp : e->arena, GP_F32, &in[j].shape, &din[j]));
      }
    }
    if (!any && (l->n_params == 0 || part == GP_GRAD_INPUT)) continue;
    e->bind = e->binds ? &e->binds[i - e->bind_first] : NULL;
    if (e->on_layer) e->on_layer(e, i, 1, 0);
    gp_tensor out = p->val[t];
    GP_TRY(gp_bfstore_widen(p, e, i, in, &out));
    gp_status st = gp_layer_backward_part(l, e, part, in, &out, &p->grad[t], din, p->saved[i]);
    if (st != GP_OK) return node_error(m, i, "backward", st);
    for (int j = 0; j < n->n_in; j++) {
      GP_TRY(round_mixed(e, &din[j])); /* (fresh: the slot holds this contribution alone) */
      if (!din[j].data || fresh[j]) continue;
      GP_TRY(be->axpby(be, gp_shape_numel(&din[j].shape), 1.0f, GP_F32P(&din[j]), 1.0f,
                       GP_F32P(&p->grad[n->in[j]])));
    }
    GP_TRY(gp_bfstore_release(p));
    if (e->on_layer) e->on_layer(e, i, 1, 1);
  }
  return GP_OK;
}

gp_status gp_pass_backward(gp_pass *p, gp_exec *e) {
  return gp_graphs_pass(p, e, 1, GP_GRAD_BOTH, backward_from);
}

gp_status gp_pass_backward_input(gp_pass *p, gp_exec *e) {
  return gp_graphs_pass(p, e, 1, GP_GRAD_INPUT, backward_from);
}

static gp_status weight_from(gp_pass *p, gp_exec *e, int part, int from, gp_graph_run *run) {
  (void)part;
  const gp_model *m = p->m;
  gp_tensor in[GP_MAX_INPUTS];
  for (int i = from; i >= p->first; i--) {
    int skip = 0;
    if (run) GP_TRY(gp_graph_node(run, i, &skip));
    if (skip) {
      i -= skip - 1;
      continue;
    }
    const gp_node *n = &m->nodes[i];
    const gp_layer *l = &n->layer;
    int t = m->n_inputs + i;
    /* the nodes whose B ran, or would have run but for no input taking a gradient; in
     * reverse order as BOTH, though each node's gradients are its own buffers */
    if (l->n_params == 0 || (i != m->n_nodes - 1 && !p->grad[t].data)) continue;
    for (int j = 0; j < n->n_in; j++)
      in[j] = p->val[n->in[j]];
    gp_tensor out = p->val[t];
    GP_TRY(gp_bfstore_widen(p, e, i, in, &out));
    e->bind = e->binds ? &e->binds[i - e->bind_first] : NULL;
    if (e->on_layer) e->on_layer(e, i, 1, 0);
    gp_status st =
        gp_layer_backward_part(l, e, GP_GRAD_WEIGHT, in, &out, &p->grad[t], NULL, p->saved[i]);
    if (st != GP_OK) return node_error(m, i, "weight gradients", st);
    GP_TRY(gp_bfstore_release(p));
    if (e->on_layer) e->on_layer(e, i, 1, 1);
  }
  return GP_OK;
}

gp_status gp_pass_backward_weight(gp_pass *p, gp_exec *e) {
  return gp_graphs_pass(p, e, 2, GP_GRAD_WEIGHT, weight_from);
}
