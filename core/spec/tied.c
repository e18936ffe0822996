/* The tied: section: named groups of parameters (named as in weight files, "<layer path>.<name>")
 * that are one logical parameter. Read after the graph is built, since the names exist only
 * then: each name is a trainable parameter, listed once in its group and in one enabled group
 * only, a group has two members or more, and an enabled group's members have one shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/internal.h"

/* Every parameter name of the model: name -> node * GP_MAX_PARAMS + param. */
typedef struct pnames {
  gp_sp_map ix;
  const char **trainable; /* candidates for "did you mean" */
  int n_trainable;
} pnames;

typedef struct seen_ref {
  int group;     /* enabled group that holds it, or -1 */
  int line, col; /* where it was listed there */
} seen_ref;

static gp_status index_params(gp_sp_ctx *c, const gp_model *m, pnames *pn) {
  int total = 0;
  for (int i = 0; i < m->n_nodes; i++)
    total += m->nodes[i].layer.n_params;
  pn->trainable = gp_sp_alloc(&c->tmp, (size_t)(total ? total : 1) * sizeof *pn->trainable);
  if (!pn->trainable) return gp_sp_nomem();
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params; j++) {
      size_t len = strlen(l->path) + strlen(l->pdesc[j].name) + 2;
      char *name = gp_sp_alloc(&c->tmp, len);
      if (!name) return gp_sp_nomem();
      snprintf(name, len, "%s.%s", l->path, l->pdesc[j].name);
      if (gp_sp_map_set(&pn->ix, name, i * GP_MAX_PARAMS + j) < 0) return gp_sp_nomem();
      if (l->pdesc[j].trainable) pn->trainable[pn->n_trainable++] = name;
    }
  }
  return GP_OK;
}

static gp_status unknown_param(gp_sp_ctx *c, const pnames *pn, const char *group,
                               const gp_ynode *it) {
  const char *near = gp_nearest(it->s, pn->trainable, pn->n_trainable);
  if (near)
    return gp_sp_err(c, it->line, it->col,
                     "tied group '%s': no parameter named '%s'; did you mean '%s'?", group, it->s,
                     near);
  return gp_sp_err(c, it->line, it->col,
                   "tied group '%s': no parameter named '%s' (names are '<layer path>.<parameter>' "
                   "as in weight files, e.g. 'logits.weight')",
                   group, it->s);
}

/* One group; an enabled one fills *out (members malloc'ed) and marks its names in seen. */
static gp_status parse_group(gp_sp_ctx *c, const gp_model *m, const gp_ypair *gp, const pnames *pn,
                             seen_ref *seen, int index, gp_tied_group *out, int *enabled) {
  static const char *const keys[] = {"params", "enabled", NULL};
  static const char *const skip[] = {"params", NULL};
  const char *g = gp->key;
  char what[GP_SPEC_NAME + 32];
  gp_ynode key = {.kind = GP_Y_SCALAR, .line = gp->line, .col = gp->col, .plain = 1, .s = g};
  GP_TRY(gp_sp_check_name(c, &key, "tied"));
  snprintf(what, sizeof what, "tied group '%s'", g);
  GP_TRY(gp_sp_want(c, gp->val, GP_Y_MAP, what));
  snprintf(what, sizeof what, "in tied group '%s'", g);
  GP_TRY(gp_sp_check_keys(c, gp->val, keys, what));
  gp_cfg *cfg;
  GP_TRY(gp_sp_cfg_of(c, gp->val, skip, &cfg));
  gp_status s = gp_cfg_bool(cfg, "enabled", 1, enabled);
  gp_cfg_free(cfg);
  GP_TRY(s);
  const gp_ypair *pp = gp_sp_get(gp->val, "params");
  if (!pp)
    return gp_sp_err(c, gp->val->line, gp->val->col,
                     "tied group '%s': missing required key 'params' (a list of parameter names)",
                     g);
  const gp_ynode *list = pp->val;
  snprintf(what, sizeof what, "tied group '%s': params", g);
  GP_TRY(gp_sp_want(c, list, GP_Y_SEQ, what));
  if (list->n < 2)
    return gp_sp_err(c, list->line, list->col,
                     "tied group '%s': needs at least 2 parameters to tie, got %d", g, list->n);
  snprintf(what, sizeof what, "tied group '%s': a params entry", g);
  gp_param_ref *mem = malloc((size_t)list->n * sizeof *mem);
  if (!mem) return gp_sp_nomem();
  s = GP_OK;
  char a[128], b[128];
  for (int i = 0; i < list->n && s == GP_OK; i++) {
    const gp_ynode *it = list->items[i];
    int v;
    if ((s = gp_sp_want(c, it, GP_Y_SCALAR, what)) != GP_OK) break;
    if (!gp_sp_map_get(&pn->ix, it->s, &v)) {
      s = unknown_param(c, pn, g, it);
      break;
    }
    gp_param_ref r = {v / GP_MAX_PARAMS, v % GP_MAX_PARAMS};
    const gp_param_desc *d = &m->nodes[r.node].layer.pdesc[r.param];
    if (!d->trainable) {
      s = gp_sp_err(c, it->line, it->col,
                    "tied group '%s': '%s' is a buffer (saved, never trained); only trainable "
                    "parameters can be tied",
                    g, it->s);
      break;
    }
    for (int j = 0; j < i && s == GP_OK; j++)
      if (mem[j].node == r.node && mem[j].param == r.param)
        s = gp_sp_err(c, it->line, it->col, "tied group '%s': '%s' is listed twice", g, it->s);
    if (s != GP_OK) break;
    mem[i] = r;
    if (!*enabled) continue;
    if (seen[v].group >= 0) {
      s = gp_sp_err(c, it->line, it->col,
                    "tied group '%s': '%s' is already in tied group '%s' (line %d); a parameter "
                    "can be in one enabled group only",
                    g, it->s, m->tied[seen[v].group].name, seen[v].line);
      break;
    }
    const gp_param_desc *d0 = &m->nodes[mem[0].node].layer.pdesc[mem[0].param];
    if (!gp_shape_equal(&d->shape, &d0->shape)) {
      s = gp_sp_err(c, it->line, it->col,
                    "tied group '%s': '%s' has shape %s but '%s' has %s; tied parameters need "
                    "the same shape",
                    g, it->s, gp_shape_str(&d->shape, a, sizeof a), list->items[0]->s,
                    gp_shape_str(&d0->shape, b, sizeof b));
      break;
    }
  }
  if (s != GP_OK || !*enabled) {
    free(mem);
    return s;
  }
  for (int i = 0; i < list->n; i++) {
    int v = mem[i].node * GP_MAX_PARAMS + mem[i].param;
    seen[v] = (seen_ref){index, list->items[i]->line, list->items[i]->col};
  }
  snprintf(out->name, sizeof out->name, "%s", g);
  out->n = list->n;
  out->members = mem;
  out->numel = gp_shape_numel(&m->nodes[mem[0].node].layer.pdesc[mem[0].param].shape);
  return GP_OK;
}

gp_status gp_sp_tied(gp_sp_ctx *c, const gp_ynode *root, gp_model *m) {
  const gp_ypair *tp = gp_sp_get(root, "tied");
  if (!tp || gp_sp_is_null(tp->val)) return GP_OK;
  GP_TRY(gp_sp_want(c, tp->val, GP_Y_MAP, "tied"));
  int n = tp->val->n;
  if (n == 0) return GP_OK;
  if (!(m->tied = calloc((size_t)n, sizeof *m->tied))) return gp_sp_nomem();
  gp_sp_mark mark = gp_sp_get_mark(&c->tmp);
  pnames pn = {0};
  seen_ref *seen = malloc((size_t)(m->n_nodes ? m->n_nodes : 1) * GP_MAX_PARAMS * sizeof *seen);
  gp_status s = seen ? index_params(c, m, &pn) : gp_sp_nomem();
  for (int i = 0; s == GP_OK && i < m->n_nodes * GP_MAX_PARAMS; i++)
    seen[i].group = -1;
  for (int i = 0; i < n && s == GP_OK; i++) {
    int enabled = 1;
    s = parse_group(c, m, &tp->val->pairs[i], &pn, seen, m->n_tied, &m->tied[m->n_tied], &enabled);
    if (s == GP_OK && enabled) {
      const gp_tied_group *t = &m->tied[m->n_tied++];
      m->n_params -= (int64_t)(t->n - 1) * t->numel; /* one logical parameter */
    }
  }
  free(seen);
  gp_sp_map_free(&pn.ix);
  gp_sp_release(&c->tmp, mark);
  return s;
}

int gp_model_tied_group(const gp_model *m, int node, int param, int *member) {
  for (int g = 0; g < m->n_tied; g++)
    for (int i = 0; i < m->tied[g].n; i++)
      if (m->tied[g].members[i].node == node && m->tied[g].members[i].param == param) {
        if (member) *member = i;
        return g;
      }
  return -1;
}
