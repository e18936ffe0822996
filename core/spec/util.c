/* Small pieces the spec loader's files share: a marked bump arena, a string hash map, located
 * errors and the checks every section does (mapping or not, known keys, names). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/internal.h"

struct gp_sp_chunk {
  gp_sp_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

#define CHUNK_BYTES ((size_t)64 << 10)

void *gp_sp_alloc(gp_sp_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  gp_sp_chunk *h = a->head;
  if (!h || h->size - h->used < n) {
    size_t size = n > CHUNK_BYTES ? n : CHUNK_BYTES;
    h = malloc(sizeof *h + size);
    if (!h) return NULL;
    h->next = a->head;
    h->size = size;
    h->used = 0;
    a->head = h;
  }
  void *p = h->data + h->used;
  h->used += n;
  memset(p, 0, n);
  return p;
}

char *gp_sp_strdup(gp_sp_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = gp_sp_alloc(a, n);
  if (d) memcpy(d, s, n);
  return d;
}

gp_sp_mark gp_sp_get_mark(const gp_sp_arena *a) {
  gp_sp_mark m = {a->head, a->head ? a->head->used : 0};
  return m;
}

void gp_sp_release(gp_sp_arena *a, gp_sp_mark m) {
  while (a->head && a->head != m.chunk) {
    gp_sp_chunk *next = a->head->next;
    free(a->head);
    a->head = next;
  }
  if (a->head) a->head->used = m.used;
}

void gp_sp_arena_free(gp_sp_arena *a) {
  gp_sp_mark none = {NULL, 0};
  gp_sp_release(a, none);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Grows to keep the load under one half. */
static int map_grow(gp_sp_map *m) {
  if ((m->n + 1) * 2 <= m->cap) return 0;
  size_t cap = m->cap ? m->cap * 2 : 64;
  const char **nk = calloc(cap, sizeof *nk);
  int *nv = calloc(cap, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->key[i]) continue;
    size_t j = hash_str(m->key[i]) & (cap - 1);
    while (nk[j])
      j = (j + 1) & (cap - 1);
    nk[j] = m->key[i];
    nv[j] = m->val[i];
  }
  free(m->key);
  free(m->val);
  m->key = nk;
  m->val = nv;
  m->cap = cap;
  return 0;
}

/* The slot holding key, or the empty slot where it would go (the map is never full). */
static size_t map_slot(const gp_sp_map *m, const char *key) {
  size_t j = hash_str(key) & (m->cap - 1);
  while (m->key[j] && strcmp(m->key[j], key) != 0)
    j = (j + 1) & (m->cap - 1);
  return j;
}

int gp_sp_map_put(gp_sp_map *m, const char *key, int val, int *val_out) {
  if (map_grow(m) < 0) return -1;
  size_t j = map_slot(m, key);
  if (m->key[j]) {
    if (val_out) *val_out = m->val[j];
    return 1;
  }
  m->key[j] = key;
  m->val[j] = val;
  m->n++;
  return 0;
}

int gp_sp_map_set(gp_sp_map *m, const char *key, int val) {
  if (map_grow(m) < 0) return -1;
  size_t j = map_slot(m, key);
  if (!m->key[j]) m->n++;
  m->key[j] = key;
  m->val[j] = val;
  return 0;
}

int gp_sp_map_get(const gp_sp_map *m, const char *key, int *val) {
  if (!m->cap) return 0;
  size_t j = map_slot(m, key);
  if (!m->key[j]) return 0;
  *val = m->val[j];
  return 1;
}

void gp_sp_map_free(gp_sp_map *m) {
  free(m->key);
  free(m->val);
  memset(m, 0, sizeof *m);
}

gp_status gp_sp_err(const gp_sp_ctx *c, int line, int col, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return GP_ERR(GP_ERR_SPEC, "%s:%d:%d: %s", c->file, line, col, msg);
}

gp_status gp_sp_nomem(void) {
  return GP_ERR(GP_ERR_NOMEM, "out of memory while loading the model file");
}

/* Replaces the current message, keeping the origin of the first error. */
static gp_status replace_message(gp_status code, const char *msg) {
  char origin[128];
  snprintf(origin, sizeof origin, "%s", gp_error_origin());
  char *colon = strrchr(origin, ':');
  int line = colon ? atoi(colon + 1) : 0;
  if (colon) *colon = 0;
  return gp_error_set(code, origin, line, "%s", msg);
}

gp_status gp_sp_err_append(gp_status code, const char *fmt, ...) {
  char msg[1024], more[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(more, sizeof more, fmt, ap);
  va_end(ap);
  snprintf(msg, sizeof msg, "%s%s", gp_error_message(), more);
  return replace_message(code, msg);
}

const gp_ypair *gp_sp_get(const gp_ynode *map, const char *key) {
  if (!map || map->kind != GP_Y_MAP) return NULL;
  for (int i = 0; i < map->n; i++)
    if (strcmp(map->pairs[i].key, key) == 0) return &map->pairs[i];
  return NULL;
}

int gp_sp_is_null(const gp_ynode *n) {
  if (n->kind != GP_Y_SCALAR || !n->plain) return 0;
  const char *s = n->s;
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

const char *gp_sp_kind_name(const gp_ynode *n) {
  switch (n->kind) {
  case GP_Y_MAP:
    return "a mapping";
  case GP_Y_SEQ:
    return "a list";
  default:
    return gp_sp_is_null(n) ? "nothing (null)" : "a single value";
  }
}

gp_status gp_sp_check_keys(const gp_sp_ctx *c, const gp_ynode *map, const char *const *allowed,
                           const char *what) {
  int n = 0;
  while (allowed[n])
    n++;
  for (int i = 0; i < map->n; i++) {
    const gp_ypair *p = &map->pairs[i];
    int ok = 0;
    for (int j = 0; j < n && !ok; j++)
      ok = strcmp(allowed[j], p->key) == 0;
    if (ok) continue;
    const char *near = gp_nearest(p->key, allowed, n);
    if (near)
      return gp_sp_err(c, p->line, p->col, "unknown key '%s' %s; did you mean '%s'?", p->key, what,
                       near);
    return gp_sp_err(c, p->line, p->col, "unknown key '%s' %s", p->key, what);
  }
  return GP_OK;
}

gp_status gp_sp_want(const gp_sp_ctx *c, const gp_ynode *n, gp_ykind kind, const char *what) {
  static const char *const names[] = {"a single value", "a list", "a mapping"};
  if (n->kind == kind) return GP_OK;
  return gp_sp_err(c, n->line, n->col, "%s must be %s, got %s", what, names[kind],
                   gp_sp_kind_name(n));
}

gp_status gp_sp_cfg_of(gp_sp_ctx *c, const gp_ynode *map, const char *const *skip, gp_cfg **out) {
  if (map->n > GP_SP_MAX_KEYS)
    return gp_sp_err(c, map->line, map->col, "%d settings in one mapping; at most %d are read",
                     map->n, GP_SP_MAX_KEYS);
  gp_cfg *cfg = gp_cfg_new(c->file, map->line, map->col);
  if (!cfg) return gp_sp_nomem();
  gp_status s = GP_OK;
  const char **items = NULL;
  int *il = NULL, *ic = NULL;
  for (int i = 0; i < map->n && s == GP_OK; i++) {
    const gp_ypair *p = &map->pairs[i];
    int skipped = 0;
    for (int j = 0; skip && skip[j] && !skipped; j++)
      skipped = strcmp(skip[j], p->key) == 0;
    if (skipped) continue;
    const gp_ynode *v = p->val;
    if ((s = gp_sp_count_read(c, v)) != GP_OK) break;
    if (gp_sp_is_null(v)) { /* as a section written ~: not set */
      s = gp_cfg_add_null(cfg, p->key, v->line, v->col);
      continue;
    }
    if (v->kind == GP_Y_SCALAR) {
      s = gp_cfg_add_scalar(cfg, p->key, v->s, v->line, v->col);
      continue;
    }
    if (v->kind == GP_Y_MAP) { /* one level, as key.sub (attention's rope: {theta: ...}) */
      for (int j = 0; j < v->n && s == GP_OK; j++) {
        const gp_ynode *sv = v->pairs[j].val;
        char sub[160];
        snprintf(sub, sizeof sub, "%s.%s", p->key, v->pairs[j].key);
        if ((s = gp_sp_count_read(c, sv)) != GP_OK) break;
        if (sv->kind != GP_Y_SCALAR)
          s = gp_sp_err(c, sv->line, sv->col, "%s: expected a value, got %s", sub,
                        gp_sp_kind_name(sv));
        else
          s = gp_cfg_add_scalar(cfg, sub, sv->s, sv->line, sv->col);
      }
      continue;
    }
    free(items);
    free(il);
    free(ic);
    size_t k = v->n ? (size_t)v->n : 1;
    items = malloc(k * sizeof *items);
    il = malloc(k * sizeof *il);
    ic = malloc(k * sizeof *ic);
    if (!items || !il || !ic) {
      s = gp_sp_nomem();
      break;
    }
    for (int j = 0; j < v->n && s == GP_OK; j++) {
      const gp_ynode *it = v->items[j];
      if ((s = gp_sp_count_read(c, it)) != GP_OK) break;
      if (it->kind != GP_Y_SCALAR)
        s = gp_sp_err(c, it->line, it->col, "%s: expected a list of values, got %s inside it",
                      p->key, gp_sp_kind_name(it));
      items[j] = it->s;
      il[j] = it->line;
      ic[j] = it->col;
    }
    if (s == GP_OK) s = gp_cfg_add_list(cfg, p->key, v->n, items, il, ic, v->line, v->col);
  }
  free(items);
  free(il);
  free(ic);
  if (s != GP_OK) {
    gp_cfg_free(cfg);
    return s;
  }
  *out = cfg;
  return GP_OK;
}

gp_status gp_sp_check_name(const gp_sp_ctx *c, const gp_ynode *n, const char *what) {
  GP_TRY(gp_sp_want(c, n, GP_Y_SCALAR, what));
  size_t len = strlen(n->s);
  if (len == 0 || len >= GP_SPEC_NAME)
    return gp_sp_err(c, n->line, n->col, "%s: a name has 1 to %d characters, got %zu", what,
                     GP_SPEC_NAME - 1, len);
  for (const char *p = n->s; *p; p++) {
    char ch = *p;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '-';
    if (!ok)
      return gp_sp_err(c, n->line, n->col,
                       "%s: '%s' is not a valid name (letters, digits, '_' and '-' only)", what,
                       n->s);
  }
  return GP_OK;
}
