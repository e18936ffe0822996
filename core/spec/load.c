/* gp_model_load: reads a model file, applies --set overrides to its tree, then builds and
 * checks the graph (expand.c) and the sections (sections.c). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/internal.h"
#include "core/utf8.h"

static const char *const top_keys[] = {"name", "inputs", "blocks",   "layers", "loss",
                                       "data", "train",  "pipeline", "tied",   NULL};

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* A character no name may hold: a control character or line separator (C0, DEL, C1 with
 * U+0085, a line break to YAML, U+2028/U+2029: a name heads plans, tables, logs and the
 * terminal's lines) or U+FFFE/U+FFFF (which neither YAML, the plan, nor XML, gpipe-bench's
 * plot, may hold). */
static int bad_in_name(unsigned cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFFFE ||
         cp == 0xFFFF;
}

/* "models/fashion-cnn.yaml" -> "fashion-cnn": the file's name without .yaml, cut to n - 1 bytes,
 * with each byte that is a control character or not part of valid UTF-8 (a Latin-1 name, a
 * character the cut split) as '_', so that the JSON, tables and plans that carry it stay valid
 * text. */
static void name_from_file(const char *file, char *out, size_t n) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  snprintf(out, n, "%s", base);
  char *dot = strrchr(out, '.');
  if (dot && dot != out && (!strcmp(dot, ".yaml") || !strcmp(dot, ".yml"))) *dot = 0;
  if (!*out) snprintf(out, n, "model");
  for (unsigned char *p = (unsigned char *)out; *p;) {
    unsigned cp;
    int len = gp_utf8_seq(p, 4, &cp);
    /* what name: refuses becomes '_' (a line break would split a plan's lines) */
    if (len == 0 || bad_in_name(cp))
      for (int i = 0; i < (len ? len : 1); i++)
        *p++ = '_';
    else
      p += len;
  }
}

/* A layer whose output no later layer reads (a block's output: naming an inner layer, a from:
 * passing it by) is a slip: it would be computed, and its parameters trained, for nothing.
 * The loss is the one output the trainer reads. */
static gp_status unread_outputs(const gp_sp_ctx *c, const gp_model *m) {
  char *read = calloc((size_t)m->n_nodes + 1, 1);
  if (!read) return gp_sp_nomem();
  for (int j = 0; j < m->n_nodes; j++)
    for (int k = 0; k < m->nodes[j].n_in; k++) {
      int t = m->nodes[j].in[k] - m->n_inputs;
      if (t >= 0 && t < m->n_nodes) read[t] = 1;
    }
  int unread = -1;
  for (int i = 0; i < m->n_nodes && unread < 0; i++)
    if (!read[i] && !m->nodes[i].layer.type->is_loss) unread = i;
  free(read);
  if (unread < 0) return GP_OK;
  const gp_node *n = &m->nodes[unread];
  return gp_sp_err(c, n->line, n->col,
                   "the output of '%s' (%s) is never used: no layer after it reads it (a "
                   "block's output: or a from: that passes it by?)",
                   n->layer.path, n->layer.type->name);
}

static gp_status interpret(gp_sp_ctx *c, const gp_ynode *root, gp_model *m) {
  GP_TRY(gp_sp_check_keys(c, root, top_keys, "at the top level"));
  const gp_ypair *np = gp_sp_get(root, "name");
  if (np) {
    GP_TRY(gp_sp_want(c, np->val, GP_Y_SCALAR, "name"));
    if (!*np->val->s || strlen(np->val->s) >= sizeof m->name)
      return gp_sp_err(c, np->val->line, np->val->col, "name: expected 1 to %zu characters",
                       sizeof m->name - 1);
    for (const unsigned char *p = (const unsigned char *)np->val->s; *p;) {
      unsigned cp;
      int len = gp_utf8_seq(p, 4, &cp);
      /* a --set value is bytes, not the file's UTF-8: a Latin-1 name made a safetensors
       * header and a plan that gpipe read back as corrupt */
      if (len == 0)
        return gp_sp_err(c, np->val->line, np->val->col,
                         "name: byte 0x%02x at %d is not UTF-8 text", *p,
                         (int)(p - (const unsigned char *)np->val->s));
      if (cp == 0xFFFE || cp == 0xFFFF)
        return gp_sp_err(c, np->val->line, np->val->col,
                         "name: U+%04X is not a character (plans and plots cannot hold it)", cp);
      if (bad_in_name(cp))
        return gp_sp_err(c, np->val->line, np->val->col,
                         "name: control character U+%04X in the model's name", cp);
      p += len;
    }
    snprintf(m->name, sizeof m->name, "%s", np->val->s);
  } else {
    name_from_file(c->file, m->name, sizeof m->name);
  }
  const gp_ypair *ip = gp_sp_get(root, "inputs");
  if (!ip)
    return gp_sp_err(c, root->line, root->col,
                     "missing required key 'inputs' (e.g. inputs: {image: [1, 28, 28], label: "
                     "{shape: [], dtype: i32}})");
  GP_TRY(gp_sp_inputs(c, ip->val, m));
  GP_TRY(gp_sp_expand(c, root, m));
  GP_TRY(gp_sp_tied(c, root, m));
  GP_TRY(gp_sp_sections(c, root, m));
  return unread_outputs(c, m);
}

/* Whether text has word as a whole word ("steps", not "warmup_steps"). */
static int has_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = text; (p = strstr(p, word)); p++) {
    int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int after = isalnum((unsigned char)p[n]) || p[n] == '_';
    if (!before && !after) return 1;
  }
  return 0;
}

/* An error at the place where a --set (or a flag standing for a setting) put its value
 * ("file:line:col: ..." from the spec or from a layer's settings) says so: the file holds another
 * value there. */
static gp_status name_the_set(const gp_sp_ctx *c, gp_status s) {
  const char *m = gp_error_message();
  size_t nf = strlen(c->file);
  int line, col, used = 0;
  if (strncmp(m, c->file, nf) || sscanf(m + nf, ":%d:%d:%n", &line, &col, &used) != 2 || !used)
    return s;
  for (int i = c->n_sets - 1; i >= 0; i--) { /* the last --set there is the one in the tree */
    const gp_sp_set *set = &c->sets[i];
    if (set->line != line || set->col != col) continue;
    if (set->added_key && !has_word(m + nf + used, set->added_key)) continue;
    if (set->ov->by) return gp_sp_err_append(s, " (set by %s)", set->ov->by);
    return gp_sp_err_append(s, " (set by --set %s=%s)", set->ov->path, set->ov->value);
  }
  return s;
}

static gp_status load(const char *text, size_t len, const char *file, const gp_override *ov,
                      int n_ov, gp_model **out) {
  *out = NULL;
  gp_model *m = calloc(1, sizeof *m);
  if (!m || !(m->file = dup_str(file))) {
    free(m);
    return gp_sp_nomem();
  }
  m->label_input = -1;
  m->output_node = -1;
  gp_sp_ctx c = {0};
  c.file = m->file;
  c.m = m;
  gp_ynode *root = NULL;
  gp_status s = gp_sp_tree_load(&c, text, len, &root);
  if (s == GP_OK && n_ov > 0 && !(c.sets = gp_sp_alloc(&c.perm, (size_t)n_ov * sizeof *c.sets)))
    s = gp_sp_nomem();
  for (int i = 0; i < n_ov && s == GP_OK; i++)
    s = gp_sp_override(&c, &root, &ov[i]);
  if (s == GP_OK) s = interpret(&c, root, m);
  if (s == GP_OK) s = gp_model_fuse(m);
  if (s == GP_ERR_SPEC) s = name_the_set(&c, s);
  gp_sp_tree_free(&c);
  gp_sp_map_free(&c.block_ix);
  free(c.unit_loc);
  gp_sp_arena_free(&c.tmp);
  gp_sp_arena_free(&c.perm);
  if (s != GP_OK) {
    gp_model_free(m);
    return s;
  }
  *out = m;
  return GP_OK;
}

gp_status gp_model_load_string(const char *text, const char *file_name, const gp_override *ov,
                               int n_ov, gp_model **out) {
  return load(text, strlen(text), file_name ? file_name : "<string>", ov, n_ov, out);
}

gp_status gp_model_load(const char *file, const gp_override *ov, int n_ov, gp_model **out) {
  *out = NULL;
  FILE *f = fopen(file, "rb");
  if (!f) return GP_ERR(GP_ERR_IO, "cannot open model file '%s': %s", file, strerror(errno));
  size_t cap = 0, len = 0;
  char *buf = NULL;
  gp_status s = GP_OK;
  for (;;) {
    if (len == cap) {
      if (cap > GP_SP_MAX_FILE_BYTES) break; /* tree_load refuses it with its size */
      size_t nc = cap ? cap * 2 : (size_t)1 << 16;
      char *nb = realloc(buf, nc);
      if (!nb) {
        s = gp_sp_nomem();
        break;
      }
      buf = nb;
      cap = nc;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (s == GP_OK && ferror(f))
    s = GP_ERR(GP_ERR_IO, "cannot read model file '%s': %s", file, strerror(errno));
  fclose(f);
  if (s == GP_OK) s = load(buf, len, file, ov, n_ov, out);
  free(buf);
  return s;
}

void gp_model_free(gp_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_nodes; i++) {
    free(m->nodes[i].layer.path);
    free(m->nodes[i].layer.conf);
  }
  free(m->nodes);
  for (int i = 0; i < m->n_tied; i++)
    free(m->tied[i].members);
  free(m->tied);
  for (int i = 0; i < m->n_units; i++)
    free(m->unit_names[i]);
  free(m->unit_names);
  free(m->unit_first);
  free(m->file);
  free(m);
}

int gp_model_tensor_of_node(const gp_model *m, int node) {
  return m->n_inputs + node;
}
