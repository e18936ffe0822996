/* BF16_MIXED's activations kept for the backward in 16 bits (core/exec/bfstore.h): a node's
 * f32 output lives only while the node runs (in the widen arena), the slot keeps its bf16
 * copy, and every later reader (forward, recompute, backward) gets an f32 copy widened just
 * before it runs. */
#include "core/exec/bfstore.h"

#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/exec/internal.h"

int gp_bfstore_on(const gp_backend *be) {
  return be->precision == GP_PREC_BF16_MIXED && be->pack_bf16 && be->unpack_bf16 &&
         gp_env_get(GP_ENV_BF16_STORE, 1);
}

int64_t gp_bfstore_set(const gp_model *m, const int *reader, int first, int end, const int *sent,
                       int n_sent, unsigned char *flag) {
  for (int i = first; i < end; i++) {
    const gp_node *n = &m->nodes[i];
    /* what the executor rounds (core/exec/pass.c round_mixed): those alone are on the grid */
    flag[i] =
        n->trains && !n->layer.type->is_loss && n->layer.out_dtype == GP_F32 && i != m->n_nodes - 1;
    for (int o = 0; o < n_sent; o++)
      if (sent[o] == m->n_inputs + i) flag[i] = 0;
    /* logits a loss keeps its probabilities over (gp_node_over_input) stay f32: they are its
     * state and then its input gradient, not a copy to widen */
    int r = reader[m->n_inputs + i];
    if (r >= 0 && r < end && gp_node_over_input(m, reader, r, first)) flag[i] = 0;
  }
  /* an in-place chain is one storage: packed when every member may be (back, then forth) */
  for (int i = end - 1; i >= first; i--)
    if (gp_node_in_place(m, reader, i, first)) flag[m->nodes[i].in[0] - m->n_inputs] &= flag[i];
  int64_t saved = 0;
  for (int i = first; i < end; i++) {
    int place = gp_node_in_place(m, reader, i, first);
    if (place) flag[i] = flag[m->nodes[i].in[0] - m->n_inputs];
    if (flag[i] && !place) saved += gp_shape_numel(&m->nodes[i].layer.out_shape) * 2;
  }
  return saved;
}

gp_status gp_bfstore_stage_init(stage *st, int micro) {
  if (!gp_bfstore_on(st->be)) return GP_OK;
  const gp_model *m = st->pl->m;
  int *sent = malloc(((size_t)st->n_out + 1) * sizeof *sent);
  if (!sent || !(st->pack = calloc((size_t)m->n_nodes, 1))) {
    free(sent);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
  }
  for (int o = 0; o < st->n_out; o++)
    sent[o] = st->out[o].t;
  gp_bfstore_set(m, st->pass[0].reader, st->first, st->end, sent, st->n_out, st->pack);
  free(sent);
  gp_arena_init(&st->widen, st->be, 0);
  st->widen.meter = &st->meter;
  for (int k = 0; k < micro; k++)
    st->pass[k].widen = &st->widen;
  return GP_OK;
}

static int packs(const gp_pass *p, int i) {
  return p->pack && p->pack[i] && !(p->remat && p->remat[i]) && !p->remat_only;
}

gp_arena *gp_bfstore_out_arena(const gp_pass *p, int i, gp_arena *ar) {
  return packs(p, i) ? p->widen : ar;
}

gp_status gp_bfstore_pack_node(gp_pass *p, gp_exec *e, int i) {
  if (!packs(p, i)) return GP_OK;
  const gp_model *m = p->m;
  gp_tensor *v = &p->val[m->n_inputs + i];
  int64_t n = gp_shape_numel(&v->shape);
  if (!v->data || v->dtype != GP_F32) return GP_OK;
  gp_tensor h;
  if (gp_node_in_place(m, p->reader, i, p->first)) {
    /* the producer's storage (packed: flagged alike), now holding this node's values under
     * both names, as the f32 storage it stands for would */
    h = p->val[m->nodes[i].in[0]];
    h.shape = v->shape;
  } else {
    GP_TRY(gp_arena_tensor(e->arena, GP_BF16, &v->shape, &h));
  }
  if (n > 0) GP_TRY(e->be->pack_bf16(e->be, n, GP_F32P(v), (uint16_t *)h.data));
  *v = h;
  return GP_OK;
}

/* Whether tensor t of the pass is held packed (a node's f32 output now GP_BF16). */
static int packed(const gp_pass *p, int t) {
  const gp_model *m = p->m;
  return t >= m->n_inputs && p->val[t].dtype == GP_BF16 && p->val[t].data &&
         m->nodes[t - m->n_inputs].layer.out_dtype == GP_F32;
}

/* x (tensor t, packed) replaced by an f32 copy in p->widen, or by the one made for an earlier
 * tensor of this node in the same storage (in place), so aliases stay aliases. */
static gp_status widen_one(gp_pass *p, gp_exec *e, int t, gp_tensor *x, const void **from,
                           void **to, int *n_done) {
  if (!packed(p, t)) return GP_OK;
  const void *h = p->val[t].data;
  gp_shape s = x->shape;
  for (int k = 0; k < *n_done; k++)
    if (from[k] == h) {
      x->data = to[k];
      x->dtype = GP_F32;
      x->shape = s;
      return GP_OK;
    }
  gp_tensor f;
  int64_t n = gp_shape_numel(&s);
  GP_TRY(gp_arena_tensor(p->widen, GP_F32, &s, &f));
  if (n > 0) GP_TRY(e->be->unpack_bf16(e->be, n, (const uint16_t *)h, GP_F32P(&f)));
  from[*n_done] = h;
  to[(*n_done)++] = f.data;
  *x = f;
  return GP_OK;
}

gp_status gp_bfstore_widen(gp_pass *p, gp_exec *e, int i, gp_tensor *in, gp_tensor *out) {
  if (!p->widen) return GP_OK;
  const gp_node *n = &p->m->nodes[i];
  const void *from[GP_MAX_INPUTS + 1];
  void *to[GP_MAX_INPUTS + 1];
  int done = 0;
  for (int j = 0; j < n->n_in; j++)
    GP_TRY(widen_one(p, e, n->in[j], &in[j], from, to, &done));
  if (out) GP_TRY(widen_one(p, e, p->m->n_inputs + i, out, from, to, &done));
  return GP_OK;
}

gp_status gp_bfstore_release(gp_pass *p) {
  return p->widen && p->widen->used ? gp_arena_reset(p->widen) : GP_OK;
}
