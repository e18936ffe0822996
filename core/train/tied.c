/* Tied parameters at run time: the copies' places, the gradient sum and the clipping norm with
 * each group counted once. Pointers are device pointers used through backend operations; on
 * the CPU backend every stage's memory is one address space. */
#include "core/train/tied.h"

#include <stdlib.h>
#include <string.h>

gp_status gp_tied_init(gp_tied *t, const gp_model *m, int k, gp_params *const *params,
                       gp_backend *const *be, const int *place) {
  memset(t, 0, sizeof *t);
  if (m->n_tied == 0) return GP_OK;
  t->k = k;
  t->g = calloc((size_t)m->n_tied, sizeof *t->g);
  t->st = calloc((size_t)k, sizeof *t->st);
  if (!t->g || !t->st) return GP_ERR(GP_ERR_NOMEM, "out of memory for tied parameters");
  t->n_groups = m->n_tied;
  int n_copies = 0;
  for (int i = 0; i < m->n_tied; i++)
    n_copies += m->tied[i].n;
  for (int s = 0; s < k; s++) {
    t->st[s].skip_begin = malloc((size_t)n_copies * sizeof *t->st[s].skip_begin);
    t->st[s].skip_end = malloc((size_t)n_copies * sizeof *t->st[s].skip_end);
    if (!t->st[s].skip_begin || !t->st[s].skip_end)
      return GP_ERR(GP_ERR_NOMEM, "out of memory for tied parameters");
  }
  for (int i = 0; i < m->n_tied; i++) {
    const gp_tied_group *tg = &m->tied[i];
    gp_tied_rt *g = &t->g[i];
    g->numel = tg->numel;
    if (!(g->copy = calloc((size_t)tg->n, sizeof *g->copy)))
      return GP_ERR(GP_ERR_NOMEM, "out of memory for tied parameters");
    g->n = tg->n;
    for (int j = 0; j < tg->n; j++) {
      const gp_param_ref *r = &tg->members[j];
      int s = 0;
      while (s < k && !(r->node >= params[s]->first_node && r->node < params[s]->end_node))
        s++;
      if (s == k)
        return GP_ERR(GP_ERR_RUNTIME, "tied group '%s': member %d is on no stage", tg->name, j);
      gp_tied_copy *c = &g->copy[j];
      c->stage = s;
      c->place = place[s];
      if (!be[s]) { /* held by another process: summed across the processes (gp_coll) */
        c->device = -1;
        c->off = -1;
        continue;
      }
      c->device = be[s]->device;
      c->g = gp_params_bind(params[s], r->node)->grad[r->param];
      c->off = c->g - params[s]->grad;
      if (j == 0) continue;
      gp_tied_stage *ts = &t->st[s];
      int at = ts->n_skip++; /* insertion sort: a handful of copies per stage */
      while (at > 0 && ts->skip_begin[at - 1] > c->off) {
        ts->skip_begin[at] = ts->skip_begin[at - 1];
        ts->skip_end[at] = ts->skip_end[at - 1];
        at--;
      }
      ts->skip_begin[at] = c->off;
      ts->skip_end[at] = c->off + g->numel;
    }
    g->owner_be = be[g->copy[0].stage];
    int all_here = 1;
    for (int j = 0; j < g->n; j++)
      all_here &= be[g->copy[j].stage] != NULL;
    if (!all_here) { /* across processes: no single owner sums them */
      g->owner_be = NULL;
      continue;
    }
    size_t bytes = (size_t)g->numel * sizeof(float);
    GP_TRY(g->owner_be->alloc(g->owner_be, bytes, (void **)&g->sum));
    for (int j = 1; j < g->n && !g->tmp; j++)
      if (g->copy[j].place != g->copy[0].place)
        GP_TRY(g->owner_be->alloc(g->owner_be, bytes, (void **)&g->tmp));
  }
  return GP_OK;
}

void gp_tied_free(gp_tied *t) {
  if (!t) return;
  for (int i = 0; t->g && i < t->n_groups; i++) {
    if (t->g[i].owner_be) {
      t->g[i].owner_be->free(t->g[i].owner_be, t->g[i].sum);
      t->g[i].owner_be->free(t->g[i].owner_be, t->g[i].tmp);
    }
    free(t->g[i].copy);
  }
  for (int s = 0; t->st && s < t->k; s++) {
    free(t->st[s].skip_begin);
    free(t->st[s].skip_end);
  }
  free(t->g);
  free(t->st);
  memset(t, 0, sizeof *t);
}

gp_status gp_tied_sum(gp_tied *t, int s, gp_backend *be) {
  for (int i = 0; i < t->n_groups; i++) {
    gp_tied_rt *g = &t->g[i];
    if (g->copy[0].stage != s) continue;
    size_t bytes = (size_t)g->numel * sizeof(float);
    GP_TRY(be->copy(be, g->sum, g->copy[0].g, bytes));
    for (int j = 1; j < g->n; j++) {
      const gp_tied_copy *c = &g->copy[j];
      const float *x = c->g;
      if (c->place != g->copy[0].place) { /* another device's memory: copy it here first */
        GP_TRY(be->copy_peer(be, GP_Q_COMPUTE, g->tmp, be->device, c->g, c->device, bytes));
        x = g->tmp;
      }
      GP_TRY(be->axpby(be, g->numel, 1.0f, x, 1.0f, g->sum));
    }
  }
  return GP_OK;
}

gp_status gp_tied_scatter(gp_tied *t, int s, gp_backend *be) {
  for (int i = 0; i < t->n_groups; i++) {
    gp_tied_rt *g = &t->g[i];
    size_t bytes = (size_t)g->numel * sizeof(float);
    for (int j = 0; j < g->n; j++) {
      const gp_tied_copy *c = &g->copy[j];
      if (c->stage != s) continue;
      if (c->place == g->copy[0].place)
        GP_TRY(be->copy(be, c->g, g->sum, bytes));
      else
        GP_TRY(be->copy_peer(be, GP_Q_COMPUTE, c->g, be->device, g->sum, g->copy[0].device, bytes));
    }
  }
  return GP_OK;
}

gp_status gp_tied_grad_sumsq(const gp_tied *t, int s, const gp_params *p, gp_backend *be,
                             double *out) {
  const gp_tied_stage *ts = &t->st[s];
  double total = 0, part;
  int64_t at = 0;
  for (int i = 0; i <= ts->n_skip; i++) {
    int64_t end = i < ts->n_skip ? ts->skip_begin[i] : p->n_train;
    if (end > at) {
      GP_TRY(be->sumsq(be, end - at, p->grad + at, &part));
      total += part;
    }
    if (i < ts->n_skip) at = ts->skip_end[i];
  }
  *out = total;
  return GP_OK;
}
