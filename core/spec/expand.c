/* layers:, blocks: and loss: -> the node list. Blocks are instantiated with their parameters,
 * `repeat` makes copies, `from:` names tensors in the entry's scope (the model inputs and
 * top-level names, or a block's inputs and its entries' names), every layer is configured
 * and its shape inferred here, so a loaded model is a checked graph. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/internal.h"

typedef struct def {
  const char *name;
  int tensor;
} def;

/* One list of entries being expanded: the top level or one block instance. */
typedef struct scope {
  def *defs; /* visible names in definition order (for suggestions) */
  int n_defs, cap;
  gp_sp_map latest;   /* name -> tensor of its latest definition */
  const char **names; /* each entry's own name (or NULL) and its line, for "defined later" */
  int *name_line;
  int n_entries;
  int prev;                 /* tensor the next entry takes by default */
  int index;                /* expanded entries so far (path components of unnamed entries) */
  const gp_sp_block *block; /* NULL at the top level */
  const char *prefix;       /* path of the block instance, NULL at the top */
  int unit;                 /* inside a block: the unit of the instance */
} scope;

static const char *const entry_keys[] = {"name", "from", "repeat", "type", NULL};
static const char *const loss_keys[] = {"type", "from", NULL};

static gp_status expand_scope(gp_sp_ctx *c, const gp_ynode *entries, const gp_sp_env *env,
                              scope *sc);

static gp_status define(scope *sc, const char *name, int tensor) {
  if (sc->n_defs == sc->cap) {
    int cap = sc->cap ? sc->cap * 2 : 16;
    def *nd = realloc(sc->defs, (size_t)cap * sizeof *nd);
    if (!nd) return gp_sp_nomem();
    sc->defs = nd;
    sc->cap = cap;
  }
  sc->defs[sc->n_defs].name = name;
  sc->defs[sc->n_defs].tensor = tensor;
  sc->n_defs++;
  return gp_sp_map_set(&sc->latest, name, tensor) < 0 ? gp_sp_nomem() : GP_OK;
}

static const char *where_of(const scope *sc, char *buf, size_t n) {
  if (sc->block)
    snprintf(buf, n, "block '%s' (its inputs and named layers)", sc->block->name);
  else
    snprintf(buf, n, "the top level (model inputs and named layers)");
  return buf;
}

/* Tensor named by ref for entry k of the scope (own: that entry's name). */
static gp_status resolve(gp_sp_ctx *c, const scope *sc, const char *what, const gp_ynode *ref,
                         int k, const char *own, int *out) {
  GP_TRY(gp_sp_want(c, ref, GP_Y_SCALAR, what));
  const char *name = ref->s;
  if (gp_sp_map_get(&sc->latest, name, out)) return GP_OK;
  if (own && !strcmp(own, name))
    return gp_sp_err(c, ref->line, ref->col,
                     "%s: '%s' is this entry's own output; an entry cannot take its own output "
                     "(a cycle)",
                     what, name);
  for (int i = k + 1; i < sc->n_entries; i++)
    if (sc->names[i] && !strcmp(sc->names[i], name))
      return gp_sp_err(c, ref->line, ref->col,
                       "%s: '%s' is defined later (line %d); an entry can only take outputs of "
                       "entries before it",
                       what, name, sc->name_line[i]);
  char where[128];
  const char **cands = malloc(((size_t)sc->n_defs + 1) * sizeof *cands);
  if (!cands) return gp_sp_nomem();
  for (int i = 0; i < sc->n_defs; i++)
    cands[i] = sc->defs[i].name;
  const char *near = gp_nearest(name, cands, sc->n_defs);
  gp_status s =
      near ? gp_sp_err(c, ref->line, ref->col, "%s: no tensor named '%s' in %s; did you mean '%s'?",
                       what, name, where_of(sc, where, sizeof where), near)
           : gp_sp_err(c, ref->line, ref->col, "%s: no tensor named '%s' in %s", what, name,
                       where_of(sc, where, sizeof where));
  free(cands);
  return s;
}

static const gp_shape *tensor_shape(const gp_model *m, int t, gp_dtype *dt) {
  if (t < m->n_inputs) {
    *dt = m->inputs[t].dtype;
    return &m->inputs[t].shape;
  }
  const gp_layer *l = &m->nodes[t - m->n_inputs].layer;
  *dt = l->out_dtype;
  return &l->out_shape;
}

/* An error a layer raised without a position gets the entry's. */
static gp_status locate(gp_sp_ctx *c, gp_status s, const gp_ynode *e, const char *type) {
  size_t n = strlen(c->file);
  const char *msg = gp_error_message();
  if (!strncmp(msg, c->file, n) && msg[n] == ':') return s;
  size_t tn = strlen(type);
  if (!strncmp(msg, type, tn) && (msg[tn] == ':' || msg[tn] == ' ')) /* it names itself */
    return gp_error_prefix(s, "%s:%d:%d: ", c->file, e->line, e->col);
  return gp_error_prefix(s, "%s:%d:%d: %s: ", c->file, e->line, e->col, type);
}

static gp_status check_numel(gp_sp_ctx *c, const gp_shape *sh, const gp_ynode *e, const char *type,
                             const char *what, int64_t *numel) {
  if (gp_shape_numel_checked(sh, GP_SPEC_MAX_ELEMENTS, numel) == GP_OK) return GP_OK;
  return gp_error_prefix(GP_ERR_SPEC, "%s:%d:%d: %s: %s ", c->file, e->line, e->col, type, what);
}

static gp_status new_node(gp_sp_ctx *c, const gp_ynode *e, gp_node **out) {
  gp_model *m = c->m;
  if (m->n_nodes >= GP_SPEC_MAX_NODES)
    return gp_sp_err(c, e->line, e->col,
                     "the model has more than %d layers after expanding blocks and repeats",
                     GP_SPEC_MAX_NODES);
  if (m->n_nodes == c->node_cap) {
    int nc = c->node_cap ? c->node_cap * 2 : 64;
    gp_node *nn = realloc(m->nodes, (size_t)nc * sizeof *nn);
    if (!nn) return gp_sp_nomem();
    m->nodes = nn;
    c->node_cap = nc;
  }
  gp_node *nd = &m->nodes[m->n_nodes];
  memset(nd, 0, sizeof *nd);
  nd->line = e->line;
  nd->col = e->col;
  *out = nd;
  return GP_OK;
}

static gp_status find_type(gp_sp_ctx *c, const gp_ynode *tn, const gp_layer_type **out) {
  GP_TRY(gp_sp_want(c, tn, GP_Y_SCALAR, "type"));
  if (gp_sp_is_null(tn))
    return gp_sp_err(c, tn->line, tn->col, "type: needs a value, got nothing (null)");
  if ((*out = gp_layer_type_find(tn->s))) return GP_OK;
  const char *const *names = gp_layer_type_names();
  int n = 0;
  while (names && names[n])
    n++;
  const char *near = gp_nearest(tn->s, names, n);
  if (near)
    return gp_sp_err(c, tn->line, tn->col, "unknown layer type '%s'; did you mean '%s'?", tn->s,
                     near);
  return gp_sp_err(c, tn->line, tn->col, "unknown layer type '%s'", tn->s);
}

/* A loss type under loss:, any other type under layers: (or in a block). */
static gp_status check_role(gp_sp_ctx *c, const gp_ynode *tn, const gp_layer_type *t, int as_loss) {
  if (t->is_loss && !as_loss)
    return gp_sp_err(c, tn->line, tn->col,
                     "%s is a loss: it goes under loss:, not among the layers", t->name);
  if (t->is_loss || !as_loss) return GP_OK;
  char losses[256] = "";
  for (const char *const *n = gp_layer_type_names(); n && *n; n++) {
    const gp_layer_type *lt = gp_layer_type_find(*n);
    if (!lt || !lt->is_loss) continue;
    size_t at = strlen(losses);
    snprintf(losses + at, sizeof losses - at, "%s%s", at ? ", " : "", *n);
  }
  return gp_sp_err(c, tn->line, tn->col, "loss: '%s' is not a loss (the losses: %s)", t->name,
                   losses);
}

/* One layer from entry e (parameters already substituted); its output tensor in *out. */
static gp_status make_layer(gp_sp_ctx *c, const gp_ynode *e, const gp_ynode *tn,
                            const char *const *structural, const int *in, int n_in,
                            const char *path, int unit, int *out) {
  gp_model *m = c->m;
  const gp_layer_type *t;
  GP_TRY(find_type(c, tn, &t));
  GP_TRY(check_role(c, tn, t, structural == loss_keys));
  gp_node *nd = NULL;
  GP_TRY(new_node(c, e, &nd));
  gp_layer *l = &nd->layer;
  l->type = t;
  l->path = malloc(strlen(path) + 1);
  l->conf = calloc(1, t->conf_size ? t->conf_size : 1);
  if (!l->path || !l->conf) {
    free(l->path);
    free(l->conf);
    return gp_sp_nomem();
  }
  strcpy(l->path, path);
  nd->unit = unit;
  m->n_nodes++; /* from here gp_model_free owns it */
  gp_cfg *cfg;
  GP_TRY(gp_sp_cfg_of(c, e, structural, &cfg));
  gp_cfg_set_what(cfg, t->name);
  gp_status s = t->configure ? t->configure(l, cfg) : GP_OK;
  if (s != GP_OK) s = locate(c, s, e, t->name);
  for (int i = 0; s == GP_OK && structural[i]; i++)
    gp_cfg_has(cfg, structural[i]);
  if (s == GP_OK) s = gp_cfg_check_unknown(cfg, NULL, structural);
  gp_cfg_free(cfg);
  GP_TRY(s);
  if (n_in < t->min_inputs || n_in > t->max_inputs) {
    char want[48];
    if (t->min_inputs == t->max_inputs)
      snprintf(want, sizeof want, "%d input%s", t->min_inputs, t->min_inputs == 1 ? "" : "s");
    else
      snprintf(want, sizeof want, "%d to %d inputs", t->min_inputs, t->max_inputs);
    return gp_sp_err(c, e->line, e->col, "%s takes %s, got %d%s", t->name, want, n_in,
                     n_in < t->min_inputs ? "; name them with from: [a, b]" : "");
  }
  nd->n_in = l->n_in = n_in;
  for (int i = 0; i < n_in; i++) {
    nd->in[i] = in[i];
    l->in_shape[i] = *tensor_shape(m, in[i], &l->in_dtype[i]);
  }
  l->out_dtype = GP_F32;
  if (t->shape && (s = t->shape(l)) != GP_OK) return locate(c, s, e, t->name);
  int64_t numel;
  GP_TRY(check_numel(c, &l->out_shape, e, t->name, "output", &numel));
  if (l->n_params < 0 || l->n_params > GP_MAX_PARAMS)
    return gp_sp_err(c, e->line, e->col, "%s: bad parameter count %d", t->name, l->n_params);
  for (int i = 0; i < l->n_params; i++) {
    GP_TRY(check_numel(c, &l->pdesc[i].shape, e, t->name, "parameter", &numel));
    if (l->pdesc[i].trainable) m->n_params += numel;
  }
  *out = m->n_inputs + (m->n_nodes - 1);
  return GP_OK;
}

static gp_sp_block *find_block(gp_sp_ctx *c, const gp_ynode *bn) {
  int i;
  return gp_sp_map_get(&c->block_ix, bn->s, &i) ? &c->blocks[i] : NULL;
}

static gp_status unknown_block(gp_sp_ctx *c, const gp_ynode *bn) {
  const char **names = malloc(((size_t)c->n_blocks + 1) * sizeof *names);
  if (!names) return gp_sp_nomem();
  for (int i = 0; i < c->n_blocks; i++)
    names[i] = c->blocks[i].name;
  const char *near = gp_nearest(bn->s, names, c->n_blocks);
  gp_status s =
      near ? gp_sp_err(c, bn->line, bn->col, "unknown block '%s'; did you mean '%s'?", bn->s, near)
           : gp_sp_err(c, bn->line, bn->col, "unknown block '%s'%s", bn->s,
                       c->n_blocks ? "" : " (the file has no blocks: section)");
  free(names);
  return s;
}

/* The chain "a -> b -> a" of the blocks stack[from..n) and b, for a block that uses itself. */
static void chain_str(const gp_sp_block *const *stack, int from, int n, const gp_sp_block *b,
                      char *out, size_t size) {
  *out = 0;
  for (int j = from; j < n; j++) {
    strncat(out, stack[j]->name, size - strlen(out) - 1);
    strncat(out, " -> ", size - strlen(out) - 1);
  }
  strncat(out, b->name, size - strlen(out) - 1);
}

/* The parameters of one instance: the call's values, else the defaults (which may use the
 * parameters before them). */
static gp_status bind_params(gp_sp_ctx *c, const gp_sp_block *b, const gp_ynode *e,
                             gp_sp_env *env) {
  const gp_ynode *ps = b->params;
  int n = ps ? ps->n : 0;
  env->block = b->name;
  env->params = ps;
  if (e->n > GP_SP_MAX_KEYS)
    return gp_sp_err(c, e->line, e->col, "%d keys in one block entry; at most %d are read", e->n,
                     GP_SP_MAX_KEYS);
  env->names = gp_sp_alloc(&c->tmp, (size_t)(n ? n : 1) * sizeof *env->names);
  env->vals = gp_sp_alloc(&c->tmp, (size_t)(n ? n : 1) * sizeof *env->vals);
  if (!env->names || !env->vals) return gp_sp_nomem();
  for (int i = 0; i < e->n; i++) {
    const gp_ypair *p = &e->pairs[i];
    int known = 0;
    for (int j = 0; gp_sp_block_entry_keys[j] && !known; j++)
      known = !strcmp(gp_sp_block_entry_keys[j], p->key);
    for (int j = 0; j < n && !known; j++)
      known = !strcmp(ps->pairs[j].key, p->key);
    if (known) continue;
    const char **cands = gp_sp_alloc(&c->tmp, (size_t)(n + 4) * sizeof *cands);
    if (!cands) return gp_sp_nomem();
    int nc = 0;
    for (int j = 0; j < n; j++)
      cands[nc++] = ps->pairs[j].key;
    for (int j = 0; gp_sp_block_entry_keys[j]; j++)
      cands[nc++] = gp_sp_block_entry_keys[j];
    const char *near = gp_nearest(p->key, cands, nc);
    if (near)
      return gp_sp_err(c, p->line, p->col, "block '%s' has no parameter '%s'; did you mean '%s'?",
                       b->name, p->key, near);
    return gp_sp_err(c, p->line, p->col, "block '%s' has no parameter '%s'%s", b->name, p->key,
                     n ? "" : " (it takes none)");
  }
  for (int i = 0; i < n; i++) {
    const gp_ypair *def = &ps->pairs[i], *given = gp_sp_get(e, def->key);
    const gp_ynode *v = given ? given->val : NULL;
    if (!v) {
      if (gp_sp_is_null(def->val))
        return gp_sp_err(c, e->line, e->col,
                         "block '%s' needs parameter '%s' (it has no default; line %d)", b->name,
                         def->key, def->line);
      GP_TRY(gp_sp_subst(c, def->val, env, &v));
    } else if (gp_sp_is_null(v)) {
      return gp_sp_err(c, v->line, v->col, "parameter '%s' of block '%s' cannot be null", def->key,
                       b->name);
    }
    env->names[i] = def->key;
    env->vals[i] = v;
    env->n = i + 1;
  }
  return GP_OK;
}

/* One instance of a block; its output tensor in *out. */
static gp_status make_block(gp_sp_ctx *c, const gp_ynode *e, const gp_ynode *bn, const int *in,
                            int n_in, const char *path, int unit, int *out) {
  GP_TRY(gp_sp_want(c, bn, GP_Y_SCALAR, "block"));
  gp_sp_block *b = find_block(c, bn);
  if (!b) return unknown_block(c, bn);
  b->used = 1;
  for (int i = 0; i < c->depth; i++)
    if (c->stack[i] == b) {
      char chain[512];
      chain_str(c->stack, i, c->depth, b, chain, sizeof chain);
      return gp_sp_err(c, bn->line, bn->col, "block '%s' uses itself (%s); blocks cannot recurse",
                       b->name, chain);
    }
  if (c->depth >= GP_SP_MAX_DEPTH)
    return gp_sp_err(c, bn->line, bn->col, "blocks nested more than %d deep", GP_SP_MAX_DEPTH);
  if (n_in != b->n_inputs) {
    char list[256] = "";
    for (int i = 0; i < b->n_inputs; i++) {
      strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, b->inputs[i], sizeof list - strlen(list) - 1);
    }
    return gp_sp_err(c, e->line, e->col, "block '%s' takes %d input%s (%s), got %d%s", b->name,
                     b->n_inputs, b->n_inputs == 1 ? "" : "s", list, n_in,
                     n_in < b->n_inputs ? "; give them in order with from: [...]" : "");
  }
  gp_sp_env env = {0};
  GP_TRY(bind_params(c, b, e, &env));
  scope sc = {0};
  sc.block = b;
  sc.prefix = path;
  sc.unit = unit;
  sc.prev = in[0];
  gp_status s = GP_OK;
  for (int i = 0; i < n_in && s == GP_OK; i++)
    s = define(&sc, b->inputs[i], in[i]);
  gp_sp_mark mark = gp_sp_get_mark(&c->tmp);
  c->stack[c->depth++] = b;
  if (s == GP_OK) s = expand_scope(c, b->layers, &env, &sc);
  c->depth--;
  *out = sc.prev;
  if (s == GP_OK && b->output) s = resolve(c, &sc, "output", b->output, sc.n_entries, NULL, out);
  gp_sp_release(&c->tmp, mark); /* the scope's names */
  free(sc.defs);
  gp_sp_map_free(&sc.latest);
  /* the chain of instances, innermost first; a deep chain is cut */
  int shown = 0;
  for (const char *p = gp_error_message(); (p = strstr(p, " (in block ")); p++)
    shown++;
  if (s == GP_ERR_SPEC && shown < 4)
    s = gp_sp_err_append(s, " (in block '%s' used at line %d)", b->name, e->line);
  else if (s == GP_ERR_SPEC && shown == 4 && !strstr(gp_error_message(), "(...)"))
    s = gp_sp_err_append(s, " (...)");
  return s;
}

static gp_status parse_repeat(gp_sp_ctx *c, const gp_ynode *e, int64_t *out) {
  const gp_ypair *rp = gp_sp_get(e, "repeat");
  *out = 1;
  if (!rp) return GP_OK;
  const gp_ynode *v = rp->val;
  GP_TRY(gp_sp_want(c, v, GP_Y_SCALAR, "repeat"));
  char *end;
  long long n = strtoll(v->s, &end, 10);
  if (end == v->s || *end || n < 1 || !isdigit((unsigned char)v->s[0]))
    return gp_sp_err(c, v->line, v->col, "repeat: expected a positive integer, got '%s'", v->s);
  if (n > GP_SPEC_MAX_REPEAT)
    return gp_sp_err(c, v->line, v->col, "repeat: %s is more than the limit of %d", v->s,
                     GP_SPEC_MAX_REPEAT);
  *out = n;
  return GP_OK;
}

/* A top-level unit named after entry e (name, or the unit's number; copy r of repeat). */
static gp_status new_unit(gp_sp_ctx *c, const gp_ynode *e, const char *name, int64_t repeat,
                          int64_t r) {
  gp_model *m = c->m;
  int u = m->n_units;
  if (u == c->unit_cap) {
    int cap = c->unit_cap ? c->unit_cap * 2 : 64;
    int *uf = realloc(m->unit_first, ((size_t)cap + 1) * sizeof *uf);
    if (uf) m->unit_first = uf;
    char **un = realloc(m->unit_names, (size_t)cap * sizeof *un);
    if (un) m->unit_names = un;
    int *ul = realloc(c->unit_loc, (size_t)cap * 2 * sizeof *ul);
    if (ul) c->unit_loc = ul;
    if (!uf || !un || !ul) return gp_sp_nomem();
    c->unit_cap = cap;
  }
  const gp_ypair *np = gp_sp_get(e, "name");
  const gp_ynode *at = np && !e->alias ? np->val : e; /* an alias's name is at its anchor */
  c->unit_loc[2 * u] = at->line;
  c->unit_loc[2 * u + 1] = at->col;
  char buf[GP_SPEC_NAME + 24];
  if (name && repeat > 1)
    snprintf(buf, sizeof buf, "%s.%lld", name, (long long)r);
  else if (name)
    snprintf(buf, sizeof buf, "%s", name);
  else
    snprintf(buf, sizeof buf, "%d", u);
  if (!(m->unit_names[u] = malloc(strlen(buf) + 1))) return gp_sp_nomem();
  strcpy(m->unit_names[u], buf);
  m->unit_first[u] = m->n_nodes;
  m->n_units = u + 1;
  return GP_OK;
}

/* Entry k of the scope, `repeat` times. */
static gp_status expand_entry(gp_sp_ctx *c, const gp_ynode *raw, const gp_sp_env *env, scope *sc,
                              int k) {
  gp_model *m = c->m;
  const gp_ynode *e;
  GP_TRY(gp_sp_subst(c, raw, env, &e));
  const gp_ypair *tp = gp_sp_get(e, "type"), *bp = gp_sp_get(e, "block");
  if (!tp == !bp)
    return gp_sp_err(c, e->line, e->col, "%s",
                     tp ? "an entry has either type: (a layer) or block: (a block), not both"
                        : "an entry needs type: (a layer) or block: (a block)");
  int64_t repeat;
  GP_TRY(parse_repeat(c, e, &repeat));
  const char *name = sc->names[k];
  int from[GP_MAX_INPUTS], n_from = 0;
  const gp_ypair *fp = gp_sp_get(e, "from");
  if (fp) {
    const gp_ynode *f = fp->val;
    int n = f->kind == GP_Y_SEQ ? f->n : 1;
    if (f->kind == GP_Y_MAP || n < 1 || n > GP_MAX_INPUTS)
      return gp_sp_err(c, f->line, f->col, "from: expected a tensor name or a list of 1 to %d",
                       GP_MAX_INPUTS);
    for (int i = 0; i < n; i++)
      GP_TRY(resolve(c, sc, "from", f->kind == GP_Y_SEQ ? f->items[i] : f, k, name, &from[i]));
    n_from = n;
  }
  for (int64_t r = 0; r < repeat; r++) {
    int in[GP_MAX_INPUTS], n_in = n_from ? n_from : 1;
    /* copies after the first chain on the previous output and keep the other inputs */
    for (int i = 0; i < n_in; i++)
      in[i] = n_from ? from[i] : sc->prev;
    if (r > 0) in[0] = sc->prev;
    char *path;
    int unit = sc->unit;
    if (!sc->block) {
      GP_TRY(new_unit(c, e, name, repeat, r));
      unit = m->n_units - 1;
      path = m->unit_names[unit];
    } else {
      char comp[GP_SPEC_NAME + 24];
      if (name && repeat > 1)
        snprintf(comp, sizeof comp, "%s.%lld", name, (long long)r);
      else if (name)
        snprintf(comp, sizeof comp, "%s", name);
      else
        snprintf(comp, sizeof comp, "%d", sc->index);
      path = gp_sp_alloc(&c->tmp, strlen(sc->prefix) + strlen(comp) + 2);
      if (!path) return gp_sp_nomem();
      sprintf(path, "%s.%s", sc->prefix, comp);
    }
    sc->index++;
    int before = m->n_nodes, o;
    if (tp)
      GP_TRY(make_layer(c, e, tp->val, entry_keys, in, n_in, path, unit, &o));
    else
      GP_TRY(make_block(c, e, bp->val, in, n_in, path, unit, &o));
    sc->prev = o;
    int64_t per = m->n_nodes - before;
    if (r == 0 && repeat > 1 && m->n_nodes + per * (repeat - 1) > GP_SPEC_MAX_NODES) {
      const gp_ynode *rv = gp_sp_get(e, "repeat")->val;
      return gp_sp_err(c, rv->line, rv->col,
                       "repeat: %lld copies of %lld layers make more than %d layers in all",
                       (long long)repeat, (long long)per, GP_SPEC_MAX_NODES);
    }
  }
  if (name) GP_TRY(define(sc, name, sc->prev));
  return GP_OK;
}

/* The scope's names are allocated from c->tmp: the caller releases them when it is done with
 * the scope (after resolving the block's output or the loss's inputs). */
static gp_status expand_scope(gp_sp_ctx *c, const gp_ynode *entries, const gp_sp_env *env,
                              scope *sc) {
  gp_status s = GP_OK;
  int n = entries->n;
  sc->n_entries = n;
  sc->names = gp_sp_alloc(&c->tmp, (size_t)(n ? n : 1) * sizeof *sc->names);
  sc->name_line = gp_sp_alloc(&c->tmp, (size_t)(n ? n : 1) * sizeof *sc->name_line);
  if (!sc->names || !sc->name_line) s = gp_sp_nomem();
  /* every entry's name first, so a reference to a later one is told apart from a typo */
  for (int k = 0; k < n && s == GP_OK; k++) {
    const gp_ynode *e = entries->items[k], *nv;
    if ((s = gp_sp_want(c, e, GP_Y_MAP, "a layers: entry")) != GP_OK) break;
    const gp_ypair *np = gp_sp_get(e, "name");
    if (!np) continue;
    if ((s = gp_sp_subst(c, np->val, env, &nv)) != GP_OK) break;
    if ((s = gp_sp_check_name(c, nv, "name")) != GP_OK) break;
    sc->names[k] = nv->s;
    sc->name_line[k] = nv->line;
  }
  for (int k = 0; k < n && s == GP_OK; k++) {
    gp_sp_mark em = gp_sp_get_mark(&c->tmp);
    s = expand_entry(c, entries->items[k], env, sc, k);
    gp_sp_release(&c->tmp, em);
  }
  return s;
}

/* The loss: the last node, in the last unit, path "loss". */
static gp_status make_loss(gp_sp_ctx *c, const gp_ynode *root, scope *top) {
  gp_model *m = c->m;
  const gp_ypair *lp = gp_sp_get(root, "loss");
  if (!lp)
    return gp_sp_err(c, root->line, root->col,
                     "missing required key 'loss' (e.g. loss: {type: softmax_cross_entropy})");
  const gp_ynode *e = lp->val;
  if (e->kind == GP_Y_SCALAR && !gp_sp_is_null(e)) {
    gp_ynode *me = gp_sp_alloc(&c->perm, sizeof *me);
    gp_ypair *pr = gp_sp_alloc(&c->perm, sizeof *pr);
    if (!me || !pr) return gp_sp_nomem();
    pr->key = "type";
    pr->line = e->line;
    pr->col = e->col;
    pr->val = (gp_ynode *)e;
    me->kind = GP_Y_MAP;
    me->line = e->line;
    me->col = e->col;
    me->n = 1;
    me->pairs = pr;
    e = me;
  }
  GP_TRY(gp_sp_want(c, e, GP_Y_MAP, "loss"));
  GP_TRY(gp_sp_subst(c, e, NULL, &e));
  const gp_ypair *tp = gp_sp_get(e, "type"), *fp = gp_sp_get(e, "from");
  if (!tp) return gp_sp_err(c, e->line, e->col, "loss: missing required key 'type'");
  int in[GP_MAX_INPUTS], n_in = 0;
  if (fp) {
    const gp_ynode *f = fp->val;
    int n = f->kind == GP_Y_SEQ ? f->n : 1;
    if (f->kind == GP_Y_MAP || n < 1 || n > GP_MAX_INPUTS)
      return gp_sp_err(c, f->line, f->col, "from: expected a tensor name or a list of 1 to %d",
                       GP_MAX_INPUTS);
    for (int i = 0; i < n; i++)
      GP_TRY(resolve(c, top, "from", f->kind == GP_Y_SEQ ? f->items[i] : f, top->n_entries, NULL,
                     &in[i]));
    n_in = n;
  } else {
    int label = -1;
    for (int i = 0; i < m->n_inputs && label < 0; i++)
      if (!strcmp(m->inputs[i].name, "label") || !strcmp(m->inputs[i].name, "labels")) label = i;
    if (label < 0 && m->n_inputs >= 2) label = m->n_inputs - 1;
    in[n_in++] = top->prev;
    if (label >= 0) in[n_in++] = label;
  }
  if (in[0] < m->n_inputs)
    return gp_sp_err(c, e->line, e->col,
                     "loss: its first input must be a layer's output, not the model input '%s'",
                     m->inputs[in[0]].name);
  int o;
  GP_TRY(make_layer(c, e, tp->val, loss_keys, in, n_in, "loss", m->n_units - 1, &o));
  m->output_node = in[0] - m->n_inputs;
  m->label_input = n_in >= 2 && in[1] < m->n_inputs ? in[1] : -1;
  return GP_OK;
}

/* Not a parameter ($p) or an expression (${...}): the same in every instance. */
static int is_literal(const gp_ynode *v) {
  return v->kind == GP_Y_SCALAR && v->s[0] != '$' && !strstr(v->s, "${");
}

/* A block no entry uses is never expanded, so nothing that depends on its parameters is read
 * (settings, shapes, from:); what does not is checked all the same: its entries' layer types
 * and the blocks they name, and that it does not use itself. stack[0..depth) are the blocks
 * being walked, done[] the ones walked already. */
static gp_status check_unused(gp_sp_ctx *c, gp_sp_block *b, const gp_sp_block **stack, int depth,
                              unsigned char *done) {
  if (depth >= GP_SP_MAX_DEPTH)
    return gp_sp_err(c, b->line, b->col, "blocks nested more than %d deep", GP_SP_MAX_DEPTH);
  stack[depth] = b;
  const gp_ynode *ls = b->layers;
  for (int i = 0; ls && ls->kind == GP_Y_SEQ && i < ls->n; i++) {
    const gp_ynode *e = ls->items[i];
    if (e->kind != GP_Y_MAP) continue;
    const gp_ypair *tp = gp_sp_get(e, "type"), *bp = gp_sp_get(e, "block");
    if (tp && is_literal(tp->val)) {
      const gp_layer_type *t;
      GP_TRY(find_type(c, tp->val, &t));
      GP_TRY(check_role(c, tp->val, t, 0));
    }
    if (!bp || !is_literal(bp->val)) continue;
    gp_sp_block *u = find_block(c, bp->val);
    if (!u) return unknown_block(c, bp->val);
    for (int j = 0; j <= depth; j++)
      if (stack[j] == u) {
        char chain[512];
        chain_str(stack, j, depth + 1, u, chain, sizeof chain);
        return gp_sp_err(c, bp->val->line, bp->val->col,
                         "block '%s' uses itself (%s); blocks cannot recurse", u->name, chain);
      }
    if (!u->used && !done[u - c->blocks]) GP_TRY(check_unused(c, u, stack, depth + 1, done));
  }
  done[b - c->blocks] = 1;
  return GP_OK;
}

static gp_status check_unused_blocks(gp_sp_ctx *c) {
  const gp_sp_block *stack[GP_SP_MAX_DEPTH];
  unsigned char *done = calloc((size_t)c->n_blocks + 1, 1);
  if (!done) return gp_sp_nomem();
  gp_status s = GP_OK;
  for (int i = 0; i < c->n_blocks && s == GP_OK; i++)
    if (!c->blocks[i].used && !done[i]) s = check_unused(c, &c->blocks[i], stack, 0, done);
  free(done);
  return s;
}

/* Sets each node's `trains`: a trainable parameter of its own, or an input that trains. A
 * gradient is computed only for such tensors, so after a parameter-free layer on a model input
 * (flatten, pad) the next layer skips its input gradient, as it would on the input itself. */
static void mark_training(gp_model *m) {
  for (int i = 0; i < m->n_nodes; i++) {
    gp_node *n = &m->nodes[i];
    const gp_layer *l = &n->layer;
    int t = 0;
    for (int p = 0; p < l->n_params && !t; p++)
      t = l->pdesc[p].trainable;
    for (int j = 0; j < n->n_in && !t; j++)
      t = n->in[j] >= m->n_inputs && m->nodes[n->in[j] - m->n_inputs].trains;
    n->trains = t && l->out_dtype == GP_F32;
  }
}

/* Paths become parameter names, so they (and the parameter names) must be unique. */
static gp_status check_paths(gp_sp_ctx *c) {
  gp_model *m = c->m;
  gp_sp_map seen = {0};
  gp_status s = GP_OK;
  char **pn = NULL;
  int npn = 0;
  for (int i = 0; i < m->n_units && s == GP_OK; i++) {
    int first = 0, r = gp_sp_map_put(&seen, m->unit_names[i], i, &first);
    if (r < 0)
      s = gp_sp_nomem();
    else if (r > 0)
      s = gp_sp_err(c, c->unit_loc[2 * i], c->unit_loc[2 * i + 1],
                    "unit name '%s' is used twice (first at line %d); names at the top level "
                    "must be unique",
                    m->unit_names[i], c->unit_loc[2 * first]);
  }
  gp_sp_map_free(&seen);
  if (s == GP_OK && !(pn = calloc((size_t)m->n_nodes * (GP_MAX_PARAMS + 1), sizeof *pn)))
    s = gp_sp_nomem();
  for (int i = 0; i < m->n_nodes && s == GP_OK; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = -1; j < l->n_params && s == GP_OK; j++) {
      const char *key = l->path;
      if (j >= 0) {
        size_t len = strlen(l->path) + strlen(l->pdesc[j].name) + 2;
        if (!(pn[npn] = malloc(len))) {
          s = gp_sp_nomem();
          break;
        }
        snprintf(pn[npn], len, "%s.%s", l->path, l->pdesc[j].name);
        key = pn[npn++];
      }
      int first = 0, r = gp_sp_map_put(&seen, key, i, &first);
      if (r < 0)
        s = gp_sp_nomem();
      else if (r > 0)
        s = gp_sp_err(c, m->nodes[i].line, m->nodes[i].col,
                      "%s '%s' is used twice (first by the layer at line %d); layer names "
                      "become parameter names, so they must be unique",
                      j < 0 ? "layer path" : "parameter name", key, m->nodes[first].line);
    }
  }
  gp_sp_map_free(&seen);
  for (int i = 0; i < npn; i++)
    free(pn[i]);
  free(pn);
  return s;
}

gp_status gp_sp_expand(gp_sp_ctx *c, const gp_ynode *root, gp_model *m) {
  GP_TRY(gp_sp_parse_blocks(c, root));
  const gp_ypair *lp = gp_sp_get(root, "layers");
  if (!lp) return gp_sp_err(c, root->line, root->col, "missing required key 'layers'");
  GP_TRY(gp_sp_want(c, lp->val, GP_Y_SEQ, "layers"));
  if (lp->val->n == 0)
    return gp_sp_err(c, lp->val->line, lp->val->col, "layers: the model has no layers");
  scope top = {0};
  top.prev = 0;
  gp_status s = GP_OK;
  for (int i = 0; i < m->n_inputs && s == GP_OK; i++)
    s = define(&top, m->inputs[i].name, i);
  gp_sp_mark mark = gp_sp_get_mark(&c->tmp);
  if (s == GP_OK) s = expand_scope(c, lp->val, NULL, &top);
  if (s == GP_OK) s = make_loss(c, root, &top);
  if (s == GP_OK) s = check_unused_blocks(c);
  gp_sp_release(&c->tmp, mark);
  free(top.defs);
  gp_sp_map_free(&top.latest);
  if (s != GP_OK) return s;
  m->unit_first[m->n_units] = m->n_nodes;
  mark_training(m);
  return check_paths(c);
}
