/* --set key.path=value: replaces or adds one scalar in the tree before it is interpreted (or
 * replaces a typed section, "--set train.optimizer=adamw", by its type alone). Nodes may be
 * shared by aliases, so the path to the changed value is copied, never changed in place.
 * Problems are usage errors ("--set train.optimzer.lr=0.1: no key ..."). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/internal.h"

/* Mappings --set may create when the file leaves them out: "--set pipeline.stages=2" on a file
 * without a pipeline section should just work. */
static const struct {
  const char *parent, *key;
} creatable[] = {
    {"", "data"},           {"", "train"},         {"", "pipeline"},
    {"train", "optimizer"}, {"train", "schedule"}, {"data", "normalize"},
};

/* Mappings the file may write as just their type ("optimizer: adamw"): "--set
 * train.optimizer.lr=0.01" turns the type into {type: adamw} first, and "--set
 * train.optimizer=adamw" replaces the whole mapping by its type (the old type's keys, such as
 * sgd's momentum, would not fit the new one). */
static const struct {
  const char *parent, *key;
} typed[] = {{"train", "optimizer"}, {"train", "schedule"}, {"", "loss"}};

typedef struct ovctx {
  gp_sp_ctx *c;
  const gp_override *ov;
  char **comp;
  int n;
} ovctx;

static gp_status usage(const ovctx *o, const char *fmt, ...) GP_PRINTF(2, 3);
static gp_status usage(const ovctx *o, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (o->ov->by) return GP_ERR(GP_ERR_USAGE, "%s: %s", o->ov->by, msg);
  return GP_ERR(GP_ERR_USAGE, "--set %s=%s: %s", o->ov->path, o->ov->value, msg);
}

/* "train.optimizer" for the first i components; "" at the top. */
static void prefix_of(const ovctx *o, int i, char *buf, size_t n) {
  buf[0] = 0;
  for (int j = 0; j < i; j++) {
    if (j) strncat(buf, ".", n - strlen(buf) - 1);
    strncat(buf, o->comp[j], n - strlen(buf) - 1);
  }
}

static int is_creatable(const char *parent, const char *key) {
  for (size_t i = 0; i < sizeof creatable / sizeof creatable[0]; i++)
    if (!strcmp(creatable[i].parent, parent) && !strcmp(creatable[i].key, key)) return 1;
  return 0;
}

static int is_typed(const char *parent, const char *key) {
  for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++)
    if (!strcmp(typed[i].parent, parent) && !strcmp(typed[i].key, key)) return 1;
  return 0;
}

static gp_status no_key(const ovctx *o, const gp_ynode *map, int i, const char *where) {
  const char **cands = malloc(((size_t)map->n + 8) * sizeof *cands);
  if (!cands) return gp_sp_nomem();
  int n = 0;
  for (int j = 0; j < map->n; j++)
    cands[n++] = map->pairs[j].key;
  for (size_t j = 0; j < sizeof creatable / sizeof creatable[0]; j++)
    if (!strcmp(creatable[j].parent, where)) cands[n++] = creatable[j].key;
  const char *near = gp_nearest(o->comp[i], cands, n);
  char in[320];
  if (*where)
    snprintf(in, sizeof in, "in '%s'", where);
  else
    snprintf(in, sizeof in, "at the top level");
  gp_status s = near ? usage(o, "no key '%s' %s; did you mean '%s'?", o->comp[i], in, near)
                     : usage(o, "no key '%s' %s", o->comp[i], in);
  free(cands);
  return s;
}

static gp_ynode *new_node(gp_sp_ctx *c, const gp_ynode *like) {
  gp_ynode *n = gp_sp_alloc(&c->perm, sizeof *n);
  if (n && like) *n = *like;
  return n;
}

static gp_status set_at(const ovctx *o, const gp_ynode *node, int i, gp_ynode **out);

/* The value to put at component i, replacing old (NULL: a new key at (line, col)). */
static gp_status leaf(const ovctx *o, const gp_ynode *old, int i, int line, int col,
                      gp_ynode **out) {
  char where[300];
  prefix_of(o, i, where, sizeof where);
  int whole = old && old->kind == GP_Y_MAP && is_typed(where, o->comp[i]);
  if (old && old->kind != GP_Y_SCALAR && !whole) {
    prefix_of(o, i + 1, where, sizeof where);
    return usage(o, "'%s' is %s; --set changes single values only (set one of its %s)", where,
                 gp_sp_kind_name(old), old->kind == GP_Y_MAP ? "keys" : "entries by index");
  }
  gp_ynode *n = new_node(o->c, NULL);
  if (!n || !(n->s = gp_sp_strdup(&o->c->perm, o->ov->value))) return gp_sp_nomem();
  n->kind = GP_Y_SCALAR;
  /* "~" unsets, as in the file; an empty value (a shell's unset $VAR) stays text, refused
   * where a number is wanted */
  n->plain = o->ov->value[0] != 0;
  n->size = 1;
  n->line = old ? old->line : line;
  n->col = old ? old->col : col;
  if (o->c->sets)
    o->c->sets[o->c->n_sets++] = (gp_sp_set){n->line, n->col, o->ov, old ? NULL : o->comp[i]};
  *out = n;
  return GP_OK;
}

static gp_status set_in_map(const ovctx *o, const gp_ynode *map, int i, gp_ynode **out) {
  char where[300];
  prefix_of(o, i, where, sizeof where);
  int at = -1;
  for (int j = 0; j < map->n && at < 0; j++)
    if (!strcmp(map->pairs[j].key, o->comp[i])) at = j;
  int last = i == o->n - 1;
  gp_ynode *val = NULL;
  /* a section written empty ("train:" or "train: ~") is absent to the loader: create it */
  const gp_ynode *absent = at >= 0 ? map->pairs[at].val : NULL;
  if (!absent || last || !gp_sp_is_null(absent) || !is_creatable(where, o->comp[i])) absent = NULL;
  const gp_ynode *old = at >= 0 ? map->pairs[at].val : NULL;
  if (at >= 0 && !absent && !last && old->kind == GP_Y_SCALAR && is_typed(where, o->comp[i])) {
    gp_ypair type = {"type", old->line, old->col, (gp_ynode *)old};
    gp_ynode as_map = {.kind = GP_Y_MAP, .line = old->line, .col = old->col, .n = 1};
    as_map.pairs = &type;
    as_map.size = 2;
    GP_TRY(set_at(o, &as_map, i + 1, &val)); /* copies the pair */
  } else if (at >= 0 && !absent) {
    if (last)
      GP_TRY(leaf(o, old, i, 0, 0, &val));
    else
      GP_TRY(set_at(o, old, i + 1, &val));
  } else if (last) {
    GP_TRY(leaf(o, NULL, i, map->line, map->col, &val));
  } else if (is_creatable(where, o->comp[i])) {
    gp_ynode empty = {0};
    empty.kind = GP_Y_MAP;
    empty.line = absent ? absent->line : map->line;
    empty.col = absent ? absent->col : map->col;
    empty.size = 1;
    GP_TRY(set_at(o, &empty, i + 1, &val));
  } else {
    return no_key(o, map, i, where);
  }
  gp_ynode *n = new_node(o->c, map);
  int np = map->n + (at < 0);
  if (!n || !(n->pairs = gp_sp_alloc(&o->c->perm, (size_t)np * sizeof *n->pairs)))
    return gp_sp_nomem();
  if (map->n) memcpy(n->pairs, map->pairs, (size_t)map->n * sizeof *n->pairs);
  if (at >= 0) {
    n->pairs[at].val = val;
  } else {
    gp_ypair p = {o->comp[i], map->line, map->col, val};
    n->pairs[map->n] = p;
  }
  n->n = np;
  *out = n;
  return GP_OK;
}

static gp_status set_at(const ovctx *o, const gp_ynode *node, int i, gp_ynode **out) {
  char where[300];
  prefix_of(o, i, where, sizeof where);
  if (node->kind == GP_Y_MAP) return set_in_map(o, node, i, out);
  if (node->kind == GP_Y_SCALAR)
    return usage(o, "'%s' is a single value; it has no '%s'", where, o->comp[i]);
  char *end;
  long ix = strtol(o->comp[i], &end, 10);
  if (end == o->comp[i] || *end || o->comp[i][0] == '-' || o->comp[i][0] == '+')
    return usage(o, "'%s' is a list: expected an index 0 to %d, got '%s'", where, node->n - 1,
                 o->comp[i]);
  if (ix >= node->n)
    return usage(o, "'%s' has %d entr%s (0 to %d); there is no entry %s", where, node->n,
                 node->n == 1 ? "y" : "ies", node->n - 1, o->comp[i]); /* ix may have saturated */
  gp_ynode *val;
  if (i == o->n - 1)
    GP_TRY(leaf(o, node->items[ix], i, 0, 0, &val));
  else
    GP_TRY(set_at(o, node->items[ix], i + 1, &val));
  gp_ynode *n = new_node(o->c, node);
  if (!n || !(n->items = gp_sp_alloc(&o->c->perm, (size_t)node->n * sizeof *n->items)))
    return gp_sp_nomem();
  memcpy(n->items, node->items, (size_t)node->n * sizeof *n->items);
  n->items[ix] = val;
  *out = n;
  return GP_OK;
}

gp_status gp_sp_override(gp_sp_ctx *c, gp_ynode **root, const gp_override *ov) {
  ovctx o = {c, ov, NULL, 0};
  if (!ov->path || !ov->value) return GP_ERR(GP_ERR_USAGE, "--set: expected KEY.PATH=VALUE");
  char *path = gp_sp_strdup(&c->perm, ov->path);
  if (!path) return gp_sp_nomem();
  int n = 1;
  for (const char *p = path; *p; p++)
    n += *p == '.';
  if (n > GP_SP_MAX_DEPTH) return usage(&o, "the key path has more than %d parts", GP_SP_MAX_DEPTH);
  o.comp = gp_sp_alloc(&c->perm, (size_t)n * sizeof *o.comp);
  if (!o.comp) return gp_sp_nomem();
  for (char *p = path, *q; o.n < n; p = q + 1) {
    q = strchr(p, '.');
    if (q) *q = 0;
    if (!*p) return usage(&o, "expected KEY.PATH=VALUE with no empty part in the key path");
    o.comp[o.n++] = p;
    if (!q) break;
  }
  gp_ynode *nr;
  GP_TRY(set_at(&o, *root, 0, &nr));
  *root = nr;
  return GP_OK;
}
