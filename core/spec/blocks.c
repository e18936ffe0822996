/* The model file's blocks: section, each definition read and checked (its params' names, its
 * inputs, its layers and output) before any instance is expanded (core/spec/expand.c). */
#include <stdio.h>
#include <string.h>

#include "core/spec/internal.h"

const char *const gp_sp_block_entry_keys[] = {"block", "name", "from", "repeat", NULL};

static gp_status parse_block(gp_sp_ctx *c, const gp_ypair *p, gp_sp_block *b) {
  static const char *const keys[] = {"params", "inputs", "layers", "output", NULL};
  gp_ynode key = {.kind = GP_Y_SCALAR, .line = p->line, .col = p->col, .plain = 1, .s = p->key};
  GP_TRY(gp_sp_check_name(c, &key, "blocks"));
  b->name = p->key;
  b->line = p->line;
  b->col = p->col;
  const gp_ynode *v = p->val;
  char what[GP_SPEC_NAME + 32];
  snprintf(what, sizeof what, "block '%s'", p->key);
  GP_TRY(gp_sp_want(c, v, GP_Y_MAP, what));
  snprintf(what, sizeof what, "in block '%s'", p->key);
  GP_TRY(gp_sp_check_keys(c, v, keys, what));
  const gp_ypair *pp = gp_sp_get(v, "params"), *ip = gp_sp_get(v, "inputs"),
                 *lp = gp_sp_get(v, "layers"), *op = gp_sp_get(v, "output");
  if (pp && !gp_sp_is_null(pp->val)) {
    GP_TRY(gp_sp_want(c, pp->val, GP_Y_MAP, "params"));
    b->params = pp->val;
    if (b->params->n > GP_SP_MAX_KEYS)
      return gp_sp_err(c, pp->val->line, pp->val->col, "params: more than %d parameters",
                       GP_SP_MAX_KEYS);
    for (int i = 0; i < b->params->n; i++) {
      const gp_ypair *q = &b->params->pairs[i];
      const char *s = q->key;
      int ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_';
      for (; *s && ok; s++)
        ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
             *s == '_';
      if (!ok)
        return gp_sp_err(c, q->line, q->col,
                         "params: '%s' is not a valid parameter name (a letter or '_', then "
                         "letters, digits or '_')",
                         q->key);
      for (int j = 0; gp_sp_block_entry_keys[j]; j++)
        if (!strcmp(gp_sp_block_entry_keys[j], q->key))
          return gp_sp_err(c, q->line, q->col,
                           "params: '%s' is a key of every block entry; pick another name", q->key);
    }
  }
  b->inputs[0] = "in";
  b->n_inputs = 1;
  if (ip) {
    const gp_ynode *iv = ip->val;
    int n = iv->kind == GP_Y_SEQ ? iv->n : 1;
    if (iv->kind == GP_Y_MAP || n < 1 || n > GP_MAX_INPUTS)
      return gp_sp_err(c, iv->line, iv->col, "inputs: expected a list of 1 to %d names",
                       GP_MAX_INPUTS);
    for (int i = 0; i < n; i++) {
      const gp_ynode *in = iv->kind == GP_Y_SEQ ? iv->items[i] : iv;
      GP_TRY(gp_sp_check_name(c, in, "inputs"));
      for (int j = 0; j < i; j++)
        if (!strcmp(b->inputs[j], in->s))
          return gp_sp_err(c, in->line, in->col, "inputs: '%s' is listed twice", in->s);
      b->inputs[i] = in->s;
    }
    b->n_inputs = n;
  }
  if (!lp)
    return gp_sp_err(c, v->line, v->col, "block '%s': missing required key 'layers'", p->key);
  GP_TRY(gp_sp_want(c, lp->val, GP_Y_SEQ, "layers"));
  if (lp->val->n == 0)
    return gp_sp_err(c, lp->val->line, lp->val->col, "block '%s' has no layers", p->key);
  b->layers = lp->val;
  if (op) {
    GP_TRY(gp_sp_check_name(c, op->val, "output"));
    b->output = op->val;
  }
  return GP_OK;
}

gp_status gp_sp_parse_blocks(gp_sp_ctx *c, const gp_ynode *root) {
  const gp_ypair *bp = gp_sp_get(root, "blocks");
  if (!bp || gp_sp_is_null(bp->val)) return GP_OK;
  GP_TRY(gp_sp_want(c, bp->val, GP_Y_MAP, "blocks"));
  int n = bp->val->n;
  c->blocks = gp_sp_alloc(&c->perm, (size_t)(n ? n : 1) * sizeof *c->blocks);
  if (!c->blocks) return gp_sp_nomem();
  for (int i = 0; i < n; i++) {
    GP_TRY(parse_block(c, &bp->val->pairs[i], &c->blocks[i]));
    if (gp_sp_map_set(&c->block_ix, c->blocks[i].name, i) < 0) return gp_sp_nomem();
  }
  c->n_blocks = n;
  return GP_OK;
}
