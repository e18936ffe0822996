/* YAML text -> the loader's tree, through libyaml's document API (every node has a start
 * mark). Aliases stay shared (so "billion laughs" costs no memory), merge keys are applied,
 * and the expanded size of every node (aliases counted each time they are used) is checked
 * against GP_SPEC_MAX_YAML_NODES while converting, so a bomb is refused early.
 *
 * The document API keeps no mark for an alias (it is the node it names), so the event pass
 * that comes first records each alias's position and its anchor's. Converting visits the
 * nodes in the text's order, so the k-th time a node is met again is the k-th alias: it
 * becomes a shallow copy that carries the alias's position (its children keep theirs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "core/spec/internal.h"

enum { UNSEEN = 0, BUSY, DONE };

/* An alias as the event pass saw it: where it is written, where its anchored node starts. */
typedef struct alias_at {
  int line, col, aline, acol;
} alias_at;

typedef struct aliases {
  alias_at *a;
  int n, cap, next; /* next: the one converting meets next */
  int lost;         /* the order did not match: aliases keep their anchor's position */
} aliases;

typedef struct conv {
  gp_sp_ctx *c;
  yaml_document_t *doc;
  gp_ynode **memo; /* by libyaml node index - 1 */
  unsigned char *state;
  unsigned char *met; /* by node index - 1: met before (as a key or a value) */
  aliases *al;
  int64_t work; /* nodes and pairs created, for merge chains */
} conv;

static gp_status too_big(conv *v, const yaml_node_t *at) {
  return gp_sp_err(v->c, (int)at->start_mark.line + 1, (int)at->start_mark.column + 1,
                   "the file expands to more than %d YAML nodes (an alias counts each time it is "
                   "used); refusing it",
                   GP_SPEC_MAX_YAML_NODES);
}

static int64_t add_size(int64_t a, int64_t b) {
  int64_t s = a + b;
  return s > GP_SPEC_MAX_YAML_NODES ? GP_SPEC_MAX_YAML_NODES + 1 : s;
}

static gp_status convert(conv *v, int id, int depth, gp_ynode **out);

static int mark_line(const yaml_node_t *n) {
  return (int)n->start_mark.line + 1;
}
static int mark_col(const yaml_node_t *n) {
  return (int)n->start_mark.column + 1;
}

/* Node id is met in the text's order: 1 with the alias's position when this is an alias. */
static int alias_use(conv *v, int id, int *line, int *col) {
  int ix = id - 1;
  if (!v->met[ix]) {
    v->met[ix] = 1;
    return 0;
  }
  aliases *al = v->al;
  if (al->lost || al->next >= al->n) {
    al->lost = 1;
    return 0;
  }
  const yaml_node_t *yn = yaml_document_get_node(v->doc, id);
  const alias_at *a = &al->a[al->next++];
  if (a->aline != mark_line(yn) || a->acol != mark_col(yn)) { /* never expected */
    al->lost = 1;
    return 0;
  }
  *line = a->line;
  *col = a->col;
  return 1;
}

static gp_status scalar_text(conv *v, const yaml_node_t *n, const char **out) {
  const char *s = (const char *)n->data.scalar.value;
  if (strlen(s) != n->data.scalar.length)
    return gp_sp_err(v->c, mark_line(n), mark_col(n), "a NUL character inside a value");
  *out = s;
  return GP_OK;
}

static gp_status convert_map(conv *v, const yaml_node_t *yn, int depth, gp_ynode *node) {
  yaml_node_pair_t *ps = yn->data.mapping.pairs.start;
  int np = (int)(yn->data.mapping.pairs.top - ps);
  gp_sp_map explicit = {0}; /* explicit keys, then merged ones as they are added */
  gp_status s = GP_OK;
  gp_ynode **vals = calloc((size_t)(np ? np : 1), sizeof *vals);
  const char **keys = calloc((size_t)(np ? np : 1), sizeof *keys);
  int *klc = calloc((size_t)(np ? np : 1) * 2, sizeof *klc); /* keys' positions */
  int64_t total = 0; /* pairs the result will have, at most */
  int merge_at = -1;
  if (!vals || !keys || !klc) s = gp_sp_nomem();
  /* explicit keys first: they win over merged ones wherever they are written */
  for (int i = 0; s == GP_OK && i < np; i++) {
    yaml_node_t *k = yaml_document_get_node(v->doc, ps[i].key);
    if (!alias_use(v, ps[i].key, &klc[2 * i], &klc[2 * i + 1])) {
      klc[2 * i] = mark_line(k);
      klc[2 * i + 1] = mark_col(k);
    }
    if (k->type != YAML_SCALAR_NODE) {
      s = gp_sp_err(v->c, klc[2 * i], klc[2 * i + 1], "a key must be a plain name, not %s",
                    k->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
      break;
    }
    if ((s = scalar_text(v, k, &keys[i])) != GP_OK) break;
    int is_merge = k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !strcmp(keys[i], "<<");
    if (!is_merge && !*keys[i]) {
      s = gp_sp_err(v->c, klc[2 * i], klc[2 * i + 1], "a key cannot be empty");
      break;
    }
    if (is_merge) {
      if (merge_at >= 0) {
        s = gp_sp_err(v->c, klc[2 * i], klc[2 * i + 1],
                      "duplicate merge key '<<'; merge several mappings with '<<: [*a, *b]'");
        break;
      }
      merge_at = i;
      keys[i] = NULL;
    } else {
      int first = 0, r = gp_sp_map_put(&explicit, keys[i], klc[2 * i], &first);
      if (r < 0)
        s = gp_sp_nomem();
      else if (r > 0)
        s = gp_sp_err(v->c, klc[2 * i], klc[2 * i + 1], "duplicate key '%s' (first at line %d)",
                      keys[i], first);
    }
    if (s == GP_OK) s = convert(v, ps[i].value, depth + 1, &vals[i]);
    if (s != GP_OK) break;
    if (is_merge) {
      gp_ynode *src = vals[i];
      if (src->kind == GP_Y_MAP) {
        total += src->n;
      } else if (src->kind == GP_Y_SEQ && src->n > 0) {
        for (int j = 0; j < src->n && s == GP_OK; j++) {
          if (src->items[j]->kind != GP_Y_MAP)
            s = gp_sp_err(v->c, src->items[j]->line, src->items[j]->col,
                          "the merge key '<<' takes mappings, got %s in its list",
                          gp_sp_kind_name(src->items[j]));
          else
            total += src->items[j]->n;
        }
      } else {
        s = gp_sp_err(v->c, src->line, src->col,
                      "the merge key '<<' takes a mapping or a list of mappings, got %s",
                      gp_sp_kind_name(src));
      }
    } else {
      total++;
    }
  }
  v->work += total + 1;
  if (s == GP_OK && v->work > GP_SPEC_MAX_YAML_NODES) s = too_big(v, yn);
  gp_ypair *res = NULL;
  int n = 0;
  if (s == GP_OK && !(res = gp_sp_alloc(&v->c->perm, (size_t)(total ? total : 1) * sizeof *res)))
    s = gp_sp_nomem();
  for (int i = 0; s == GP_OK && i < np; i++) {
    if (i != merge_at) {
      gp_ypair p = {keys[i], klc[2 * i], klc[2 * i + 1], vals[i]};
      res[n++] = p;
      continue;
    }
    /* merged pairs go where the merge key was written; earlier mappings of a list win */
    gp_ynode *src = vals[i];
    int ns = src->kind == GP_Y_MAP ? 1 : src->n;
    for (int j = 0; j < ns && s == GP_OK; j++) {
      gp_ynode *m = src->kind == GP_Y_MAP ? src : src->items[j];
      for (int q = 0; q < m->n && s == GP_OK; q++) {
        int r = gp_sp_map_put(&explicit, m->pairs[q].key, 0, NULL);
        if (r < 0)
          s = gp_sp_nomem();
        else if (r == 0)
          res[n++] = m->pairs[q]; /* now also counts as present */
      }
    }
  }
  node->kind = GP_Y_MAP;
  node->pairs = res;
  node->n = n;
  int64_t size = 1;
  for (int i = 0; s == GP_OK && i < n; i++)
    size = add_size(size, 1 + res[i].val->size);
  node->size = size;
  gp_sp_map_free(&explicit);
  free(vals);
  free(keys);
  free(klc);
  return s;
}

static gp_status convert(conv *v, int id, int depth, gp_ynode **out) {
  yaml_node_t *yn = yaml_document_get_node(v->doc, id);
  int ix = id - 1, aline, acol;
  int is_alias = alias_use(v, id, &aline, &acol);
  if (v->state[ix] == DONE && is_alias) {
    gp_ynode *use = gp_sp_alloc(&v->c->perm, sizeof *use);
    if (!use) return gp_sp_nomem();
    *use = *v->memo[ix];
    use->line = aline;
    use->col = acol;
    use->alias = 1;
    if (++v->work > GP_SPEC_MAX_YAML_NODES) return too_big(v, yn);
    *out = use;
    return GP_OK;
  }
  if (v->state[ix] == DONE) {
    *out = v->memo[ix];
    return GP_OK;
  }
  if (v->state[ix] == BUSY)
    return gp_sp_err(v->c, is_alias ? aline : mark_line(yn), is_alias ? acol : mark_col(yn),
                     "an alias refers to a node that contains it (a recursive structure)");
  if (depth > GP_SP_MAX_DEPTH)
    return gp_sp_err(v->c, mark_line(yn), mark_col(yn), "nested more than %d levels deep",
                     GP_SP_MAX_DEPTH);
  v->state[ix] = BUSY;
  gp_ynode *node = gp_sp_alloc(&v->c->perm, sizeof *node);
  if (!node) return gp_sp_nomem();
  node->line = mark_line(yn);
  node->col = mark_col(yn);
  gp_status s = GP_OK;
  v->work++;
  if (yn->type == YAML_SCALAR_NODE) {
    node->kind = GP_Y_SCALAR;
    node->plain = yn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    node->size = 1;
    s = scalar_text(v, yn, &node->s);
  } else if (yn->type == YAML_SEQUENCE_NODE) {
    yaml_node_item_t *it = yn->data.sequence.items.start;
    int n = (int)(yn->data.sequence.items.top - it);
    node->kind = GP_Y_SEQ;
    node->size = 1;
    v->work += n;
    if (v->work > GP_SPEC_MAX_YAML_NODES) return too_big(v, yn);
    node->items = gp_sp_alloc(&v->c->perm, (size_t)(n ? n : 1) * sizeof *node->items);
    if (!node->items) return gp_sp_nomem();
    for (int i = 0; i < n && s == GP_OK; i++) {
      s = convert(v, it[i], depth + 1, &node->items[i]);
      if (s == GP_OK) node->size = add_size(node->size, node->items[i]->size);
      node->n = i + 1;
    }
  } else if (yn->type == YAML_MAPPING_NODE) {
    s = convert_map(v, yn, depth, node);
  } else {
    s = gp_sp_err(v->c, node->line, node->col, "an empty YAML node");
  }
  if (s != GP_OK) return s;
  if (node->size > GP_SPEC_MAX_YAML_NODES || v->work > GP_SPEC_MAX_YAML_NODES)
    return too_big(v, yn);
  v->state[ix] = DONE;
  v->memo[ix] = node;
  *out = node;
  return GP_OK;
}

/* libyaml's reader errors have a byte offset, not a mark. */
static void offset_pos(const char *text, size_t len, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off && i < len; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static gp_status syntax_error(gp_sp_ctx *c, yaml_parser_t *p, const char *text, size_t len) {
  if (p->error == YAML_MEMORY_ERROR) return gp_sp_nomem();
  int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
  if (p->error == YAML_READER_ERROR) offset_pos(text, len, p->problem_offset, &line, &col);
  const char *what = p->problem ? p->problem : "malformed YAML";
  if (p->context)
    return gp_sp_err(c, line, col, "YAML syntax error: %s (%s at line %d)", what, p->context,
                     (int)p->context_mark.line + 1);
  return gp_sp_err(c, line, col, "YAML syntax error: %s", what);
}

/* The document API builds every node before returning, so first the stream is walked with
 * the event parser, in constant memory: a file of a million tiny nodes or one nested
 * thousands deep is refused before libyaml builds (and we convert) it. */
static gp_status note_anchor(gp_sp_ctx *c, gp_sp_map *anchors, int **at, int *cap,
                             const unsigned char *name, int line, int col) {
  int n = (int)anchors->n;
  if (n == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    int *na = realloc(*at, (size_t)nc * 2 * sizeof *na);
    if (!na) return gp_sp_nomem();
    *at = na;
    *cap = nc;
  }
  char *key = gp_sp_strdup(&c->perm, (const char *)name);
  if (!key || gp_sp_map_set(anchors, key, n) < 0) return gp_sp_nomem();
  (*at)[2 * n] = line;
  (*at)[2 * n + 1] = col;
  return GP_OK;
}

static gp_status note_alias(aliases *al, int line, int col, const int *anchor) {
  if (al->n == al->cap) {
    int nc = al->cap ? 2 * al->cap : 16;
    alias_at *na = realloc(al->a, (size_t)nc * sizeof *na);
    if (!na) return gp_sp_nomem();
    al->a = na;
    al->cap = nc;
  }
  al->a[al->n++] = (alias_at){line, col, anchor ? anchor[0] : 0, anchor ? anchor[1] : 0};
  return GP_OK;
}

/* ... and records where aliases and their anchors are (for converting, above). */
static gp_status prescan(gp_sp_ctx *c, const char *text, size_t len, aliases *al) {
  yaml_parser_t p;
  yaml_event_t ev;
  gp_sp_map anchors = {0}; /* name -> index in anchor_at */
  int *anchor_at = NULL, anchor_cap = 0;
  if (!yaml_parser_initialize(&p)) return gp_sp_nomem();
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int64_t nodes = 0;
  int depth = 0;
  gp_status s = GP_OK;
  for (;;) {
    if (!yaml_parser_parse(&p, &ev)) {
      s = syntax_error(c, &p, text, len);
      break;
    }
    yaml_event_type_t t = ev.type;
    int line = (int)ev.start_mark.line + 1, col = (int)ev.start_mark.column + 1;
    if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) depth++;
    if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) depth--;
    nodes += t == YAML_SCALAR_EVENT || t == YAML_ALIAS_EVENT || t == YAML_SEQUENCE_START_EVENT ||
             t == YAML_MAPPING_START_EVENT;
    const unsigned char *anchor = t == YAML_SCALAR_EVENT           ? ev.data.scalar.anchor
                                  : t == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor
                                  : t == YAML_MAPPING_START_EVENT  ? ev.data.mapping_start.anchor
                                                                   : NULL;
    if (anchor) s = note_anchor(c, &anchors, &anchor_at, &anchor_cap, anchor, line, col);
    if (t == YAML_ALIAS_EVENT) {
      int k = -1;
      gp_sp_map_get(&anchors, (const char *)ev.data.alias.anchor, &k);
      s = note_alias(al, line, col, k >= 0 ? &anchor_at[2 * k] : NULL);
    }
    yaml_event_delete(&ev);
    if (s != GP_OK) break;
    if (depth > GP_SP_MAX_DEPTH)
      s = gp_sp_err(c, line, col, "nested more than %d levels deep", GP_SP_MAX_DEPTH);
    else if (nodes > GP_SPEC_MAX_YAML_NODES)
      s = gp_sp_err(c, line, col, "the file has more than %d YAML nodes; refusing it",
                    GP_SPEC_MAX_YAML_NODES);
    if (s != GP_OK || t == YAML_STREAM_END_EVENT) break;
  }
  yaml_parser_delete(&p);
  gp_sp_map_free(&anchors);
  free(anchor_at);
  return s;
}

static gp_status load(gp_sp_ctx *c, const char *text, size_t len, aliases *al, gp_ynode **root);

gp_status gp_sp_tree_load(gp_sp_ctx *c, const char *text, size_t len, gp_ynode **root) {
  if (len > GP_SP_MAX_FILE_BYTES) /* the file's reader stops here: len is not its size */
    return gp_sp_err(c, 1, 1, "the file has more than %zu bytes, the most a model file may have",
                     GP_SP_MAX_FILE_BYTES);
  if (memchr(text, 0, len)) {
    int line, col;
    offset_pos(text, len, (size_t)((const char *)memchr(text, 0, len) - text), &line, &col);
    return gp_sp_err(c, line, col, "a NUL byte in the file (is it a text file?)");
  }
  aliases al = {0};
  gp_status s = prescan(c, text, len, &al);
  if (s == GP_OK) s = load(c, text, len, &al, root);
  free(al.a);
  return s;
}

static gp_status load(gp_sp_ctx *c, const char *text, size_t len, aliases *al, gp_ynode **root) {
  yaml_document_t *doc = calloc(2, sizeof *doc);
  if (!doc) return gp_sp_nomem();
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    free(doc);
    return gp_sp_nomem();
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  gp_status s = GP_OK;
  if (!yaml_parser_load(&p, &doc[0])) {
    s = syntax_error(c, &p, text, len);
    yaml_parser_delete(&p);
    free(doc);
    return s;
  }
  c->yaml_doc = doc; /* freed by gp_sp_tree_free from here on */
  yaml_node_t *yroot = yaml_document_get_root_node(&doc[0]);
  if (!yroot) {
    s = gp_sp_err(c, 1, 1,
                  "the file is empty; a model file is a mapping with inputs:, layers: "
                  "and loss:");
  } else if (!yaml_parser_load(&p, &doc[1])) {
    s = syntax_error(c, &p, text, len);
  } else {
    if (yaml_document_get_root_node(&doc[1]))
      s = gp_sp_err(c, (int)doc[1].start_mark.line + 1, (int)doc[1].start_mark.column + 1,
                    "a second YAML document starts here; a model file holds exactly one document "
                    "(remove the extra '---' or split the file)");
    yaml_document_delete(&doc[1]);
  }
  yaml_parser_delete(&p);
  if (s != GP_OK) return s;
  if (yroot->type != YAML_MAPPING_NODE)
    return gp_sp_err(c, mark_line(yroot), mark_col(yroot),
                     "the top level must be a mapping (name:, inputs:, layers:, ...), got %s",
                     yroot->type == YAML_SEQUENCE_NODE ? "a list" : "a single value");
  size_t nn = (size_t)(doc[0].nodes.top - doc[0].nodes.start);
  conv v = {c, &doc[0], calloc(nn, sizeof(gp_ynode *)), calloc(nn, 1), calloc(nn, 1), al, 0};
  if (!v.memo || !v.state || !v.met)
    s = gp_sp_nomem();
  else
    s = convert(&v, (int)(yroot - doc[0].nodes.start) + 1, 0, root);
  free(v.memo);
  free(v.state);
  free(v.met);
  return s;
}

void gp_sp_tree_free(gp_sp_ctx *c) {
  yaml_document_t *doc = c->yaml_doc;
  if (!doc) return;
  yaml_document_delete(&doc[0]);
  free(doc);
  c->yaml_doc = NULL;
}
