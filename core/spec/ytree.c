/* YAML text -> the loader's tree, through libyaml's document API (every node has a start
 * mark). Aliases stay shared (so "billion laughs" costs no memory), merge keys are applied,
 * and the expanded size of every node (aliases counted each time they are used) is checked
 * against GP_SPEC_MAX_YAML_NODES while converting, so a bomb is refused early. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "core/spec/internal.h"

enum { UNSEEN = 0, BUSY, DONE };

typedef struct conv {
  gp_sp_ctx *c;
  yaml_document_t *doc;
  gp_ynode **memo; /* by libyaml node index - 1 */
  unsigned char *state;
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
  int64_t total = 0; /* pairs the result will have, at most */
  int merge_at = -1;
  if (!vals || !keys) s = gp_sp_nomem();
  /* explicit keys first: they win over merged ones wherever they are written */
  for (int i = 0; s == GP_OK && i < np; i++) {
    yaml_node_t *k = yaml_document_get_node(v->doc, ps[i].key);
    if (k->type != YAML_SCALAR_NODE) {
      s = gp_sp_err(v->c, mark_line(k), mark_col(k), "a key must be a plain name, not %s",
                    k->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
      break;
    }
    if ((s = scalar_text(v, k, &keys[i])) != GP_OK) break;
    int is_merge = k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !strcmp(keys[i], "<<");
    if (!is_merge && !*keys[i]) {
      s = gp_sp_err(v->c, mark_line(k), mark_col(k), "a key cannot be empty");
      break;
    }
    if (is_merge) {
      if (merge_at >= 0) {
        s = gp_sp_err(v->c, mark_line(k), mark_col(k),
                      "duplicate merge key '<<'; merge several mappings with '<<: [*a, *b]'");
        break;
      }
      merge_at = i;
      keys[i] = NULL;
    } else {
      int first = 0, r = gp_sp_map_put(&explicit, keys[i], mark_line(k), &first);
      if (r < 0)
        s = gp_sp_nomem();
      else if (r > 0)
        s = gp_sp_err(v->c, mark_line(k), mark_col(k), "duplicate key '%s' (first at line %d)",
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
      yaml_node_t *k = yaml_document_get_node(v->doc, ps[i].key);
      gp_ypair p = {keys[i], mark_line(k), mark_col(k), vals[i]};
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
  return s;
}

static gp_status convert(conv *v, int id, int depth, gp_ynode **out) {
  yaml_node_t *yn = yaml_document_get_node(v->doc, id);
  int ix = id - 1;
  if (v->state[ix] == DONE) {
    *out = v->memo[ix];
    return GP_OK;
  }
  if (v->state[ix] == BUSY)
    return gp_sp_err(v->c, mark_line(yn), mark_col(yn),
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
static gp_status prescan(gp_sp_ctx *c, const char *text, size_t len) {
  yaml_parser_t p;
  yaml_event_t ev;
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
    yaml_event_delete(&ev);
    if (depth > GP_SP_MAX_DEPTH)
      s = gp_sp_err(c, line, col, "nested more than %d levels deep", GP_SP_MAX_DEPTH);
    else if (nodes > GP_SPEC_MAX_YAML_NODES)
      s = gp_sp_err(c, line, col, "the file has more than %d YAML nodes; refusing it",
                    GP_SPEC_MAX_YAML_NODES);
    if (s != GP_OK || t == YAML_STREAM_END_EVENT) break;
  }
  yaml_parser_delete(&p);
  return s;
}

gp_status gp_sp_tree_load(gp_sp_ctx *c, const char *text, size_t len, gp_ynode **root) {
  if (len > GP_SP_MAX_FILE_BYTES) /* the file's reader stops here: len is not its size */
    return gp_sp_err(c, 1, 1, "the file has more than %zu bytes, the most a model file may have",
                     GP_SP_MAX_FILE_BYTES);
  if (memchr(text, 0, len)) {
    int line, col;
    offset_pos(text, len, (size_t)((const char *)memchr(text, 0, len) - text), &line, &col);
    return gp_sp_err(c, line, col, "a NUL byte in the file (is it a text file?)");
  }
  GP_TRY(prescan(c, text, len));
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
  conv v = {c, &doc[0], calloc(nn, sizeof(gp_ynode *)), calloc(nn, 1), 0};
  if (!v.memo || !v.state)
    s = gp_sp_nomem();
  else
    s = convert(&v, (int)(yroot - doc[0].nodes.start) + 1, 0, root);
  free(v.memo);
  free(v.state);
  return s;
}

void gp_sp_tree_free(gp_sp_ctx *c) {
  yaml_document_t *doc = c->yaml_doc;
  if (!doc) return;
  yaml_document_delete(&doc[0]);
  free(doc);
  c->yaml_doc = NULL;
}
