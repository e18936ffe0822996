/* The fusion pass: run once on the loaded graph (gp_model_load, before any plan), it makes one
 * node of two adjacent ones where a fused form pays on a GPU and changes nothing on the CPU
 * (core/fused.c runs the parts' own ops there). Patterns, in this order:
 *   linear (+bias), then relu, gelu or gelu tanh: a cuBLASLt GEMM with the bias and the
 *     activation in its epilogue (silu has no epilogue: left alone);
 *   an add of two tensors, then layernorm or rmsnorm: one kernel for the sum and the norm.
 * A pair is fused only when the second is the one reader of the first's output (a pre-norm
 * block's sum, which a later add reads too, stays: a node has one output), both are in one unit
 * (a stage boundary never falls inside a fused node) and the first is not the model's output.
 * GP_FUSE=0 turns the pass off. */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/fused.h"
#include "core/spec/spec.h"

/* Which pattern nodes i and i + 1 make, or -1; readers[t]: how many nodes read tensor t. */
static int pattern(const gp_model *m, const int *readers, int i) {
  const gp_node *a = &m->nodes[i], *b = &m->nodes[i + 1];
  int t = m->n_inputs + i;
  if (a->unit != b->unit || b->n_in != 1 || b->in[0] != t || readers[t] != 1 ||
      i == m->output_node || a->layer.out_dtype != GP_F32 || a->layer.type->is_loss ||
      b->layer.type->is_loss)
    return -1;
  const gp_layer_type *ta = a->layer.type, *tb = b->layer.type;
  if (ta->forward_act && tb->activation && !b->layer.n_params) {
    gp_activation act = tb->activation(&b->layer);
    if (act == GP_ACTIVATION_RELU || act == GP_ACTIVATION_GELU || act == GP_ACTIVATION_GELU_TANH)
      return GP_FUSE_LINEAR_ACT;
  }
  if (!strcmp(ta->name, "add") && a->n_in == 2 && tb->forward_sum && !a->layer.n_params)
    return GP_FUSE_ADD_NORM;
  return -1;
}

gp_status gp_model_fuse(gp_model *m) {
  m->n_fused = 0;
  if (!gp_env_get(GP_ENV_FUSE, 1) || m->n_nodes < 2) return GP_OK;
  int nt = m->n_inputs + m->n_nodes;
  int *readers = calloc((size_t)nt, sizeof *readers);
  int *kind = malloc(sizeof(int) * (size_t)m->n_nodes);
  int *to = malloc(sizeof(int) * (size_t)m->n_nodes); /* old node -> new node */
  if (!readers || !kind || !to) {
    free(readers);
    free(kind);
    free(to);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory fusing layers");
  }
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++)
      readers[m->nodes[i].in[j]]++;
  int n = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    kind[i] = i + 1 < m->n_nodes ? pattern(m, readers, i) : -1;
    to[i] = n;
    if (kind[i] >= 0) to[++i] = n, m->n_fused++;
    n++;
  }
  gp_status s = GP_OK;
  for (int i = 0, k = 0; i < m->n_nodes && s == GP_OK; i++, k++) {
    gp_node nd = m->nodes[i];
    if (kind[i] >= 0) {
      gp_node *b = &m->nodes[i + 1];
      s = gp_fused_make((gp_fuse_kind)kind[i], &m->nodes[i].layer, &b->layer, nd.trains, &nd.layer);
      if (s !=
          GP_OK) { /* (before it touched the pair: what is left leaks, nothing is freed twice) */
        m->n_nodes = k;
        break;
      }
      nd.trains = b->trains;
      i++;
    }
    for (int j = 0; j < nd.n_in; j++)
      if (nd.in[j] >= m->n_inputs) nd.in[j] = m->n_inputs + to[nd.in[j] - m->n_inputs];
    m->nodes[k] = nd;
  }
  if (s == GP_OK) {
    for (int u = 0; u < m->n_units; u++)
      m->unit_first[u] = to[m->unit_first[u]];
    m->unit_first[m->n_units] = n;
    if (m->output_node >= 0) m->output_node = to[m->output_node];
    for (int g = 0; g < m->n_tied; g++)
      for (int j = 0; j < m->tied[g].n; j++)
        m->tied[g].members[j].node = to[m->tied[g].members[j].node];
    m->n_nodes = n;
  }
  free(readers);
  free(kind);
  free(to);
  return s;
}
