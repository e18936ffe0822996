/* Incremental decoding (see kvdec.h). The step's layers are copies of the model's with the
 * step inputs' first axis set to 1 and every shape inferred again, so each layer runs as it
 * was written, on one position; only attention needs to know (gp_exec.cache). */
#include "core/eval/kvdec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fused.h"

struct gp_kvdec {
  gp_trainer *t;
  const gp_model *m;
  unsigned char step_in[GP_MAX_MODEL_INPUTS];
  int64_t rows, cap, n;
  int64_t steps;        /* positions decoded since the batch began */
  int64_t max_pos;      /* positions the step's position tables hold (cap when none is smaller) */
  int pos_node;         /* the node of the smallest table, or -1 */
  unsigned char *dyn;   /* per tensor: changes each step */
  gp_shape *shape;      /* per tensor: its per-sample shape in a step */
  gp_tensor *val;       /* per tensor */
  gp_layer *layer;      /* per node: the step's copy (dynamic nodes) */
  gp_kv_cache *cache;   /* per node: attention's (dynamic attention nodes) */
  unsigned char *attn;  /* per node: a dynamic attention */
  gp_backend **be;      /* per node: its stage's backend */
  gp_layer_bind **bind; /* per node: its stage's bindings */
  gp_arena batch, step; /* once-a-batch outputs and caches; a step's outputs */
  int arenas;
};

static int is_type(const gp_layer *l, const char *name) {
  return !strcmp(l->type->name, name);
}

/* Layers that compute each position from that position alone, so one position a step gives
 * what the whole row gives there. */
static int position_wise(const gp_layer *l) {
  if (gp_fused_part(l, 0))
    return position_wise(gp_fused_part(l, 0)) && position_wise(gp_fused_part(l, 1));
  static const char *const ok[] = {"embedding", "dropout", "add",     "mul",  "linear",
                                   "layernorm", "rmsnorm", "relu",    "gelu", "tanh",
                                   "sigmoid",   "silu",    "identity"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (is_type(l, ok[i])) return 1;
  return is_type(l, "positional") && l->n_in == 2; /* positions given, not implied by T */
}

/* Marks the tensors that change each step: the step inputs and what reads them. */
static void mark_dynamic(const gp_model *m, const unsigned char *step_in, unsigned char *dyn) {
  for (int i = 0; i < m->n_inputs; i++)
    dyn[i] = step_in[i];
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_node *nd = &m->nodes[i];
    dyn[m->n_inputs + i] = 0;
    for (int j = 0; j < nd->n_in; j++)
      if (dyn[nd->in[j]]) dyn[m->n_inputs + i] = 1;
  }
}

/* The node's stage in this process, or -1. */
static int stage_of(gp_trainer *t, int node) {
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++) {
    gp_params *p = gp_pipeline_local(t->pl, s) ? gp_pipeline_params(t->pl, s) : NULL;
    if (p && node >= p->first_node && node < p->end_node) return s;
  }
  return -1;
}

const char *gp_kvdec_unsupported(gp_trainer *t, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                                 char *buf, size_t n) {
  const gp_model *m = t->m;
  int64_t cap = -1;
  for (int i = 0; i < m->n_inputs; i++) {
    if (!step_in[i]) continue;
    const gp_shape *s = &m->inputs[i].shape;
    if (s->ndim < 1 || (cap >= 0 && s->d[0] != cap)) {
      snprintf(buf, n, "the step inputs do not share one length (input '%s')", m->inputs[i].name);
      return buf;
    }
    cap = s->d[0];
  }
  if (cap < 1) return "no input changes from step to step";
  unsigned char *dyn = calloc((size_t)(m->n_inputs + m->n_nodes), 1);
  if (!dyn) return "out of memory";
  mark_dynamic(m, step_in, dyn);
  const char *why = NULL;
  for (int i = 0; i < m->n_nodes && !why; i++) {
    const gp_node *nd = &m->nodes[i];
    const gp_layer *l = &nd->layer;
    int s = stage_of(t, i);
    if (s < 0) {
      why = "a stage runs in another process (decoding with a cache needs every stage here)";
    } else if (strcmp(gp_pipeline_backend(t->pl, s)->name, "cpu")) {
      why = "a stage is not on the CPU (the cache is the CPU backend's for now)";
    } else if (dyn[m->n_inputs + i] && !l->type->is_loss && !position_wise(l)) {
      if (!is_type(l, "attention") || !dyn[nd->in[0]]) {
        snprintf(buf, n, "layer %s (%s) mixes positions and has no cached form", l->path,
                 l->type->name);
        why = buf;
      }
      for (int j = 1; j < nd->n_in && !why; j++)
        if (dyn[nd->in[j]] && l->in_dtype[j] == GP_F32 && l->in_shape[j].ndim == 2) {
          snprintf(buf, n, "attention %s reads keys/values that change each step", l->path);
          why = buf;
        }
    }
  }
  if (!why && !dyn[m->n_inputs + m->output_node]) why = "the output does not read the step inputs";
  free(dyn);
  return why;
}

/* Key/value width of an attention layer: in_proj_weight is [d + 2 dkv, d]. Cross-attention's
 * memory (its f32 [Tk, d] input other than the query) sets its positions; *tk 0: self. */
static void attn_dims(const gp_layer *l, const unsigned char *dyn, const gp_node *nd, int64_t *dkv,
                      int64_t *tk) {
  const gp_shape *w = &l->pdesc[0].shape;
  *dkv = (w->d[0] - w->d[1]) / 2;
  *tk = 0;
  for (int j = 1; j < l->n_in; j++)
    if (!dyn[nd->in[j]] && l->in_dtype[j] == GP_F32 && l->in_shape[j].ndim == 2)
      *tk = l->in_shape[j].d[0];
}

int64_t gp_kvdec_cache_bytes(const gp_model *m, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                             int64_t rows, int first, int end) {
  int64_t cap = 0, bytes = 0;
  for (int i = 0; i < m->n_inputs; i++)
    if (step_in[i] && m->inputs[i].shape.ndim >= 1) cap = m->inputs[i].shape.d[0];
  unsigned char *dyn = calloc((size_t)(m->n_inputs + m->n_nodes), 1);
  if (!dyn) return 0;
  mark_dynamic(m, step_in, dyn);
  for (int i = first; i < end && i < m->n_nodes; i++) {
    const gp_node *nd = &m->nodes[i];
    if (!dyn[m->n_inputs + i] || !is_type(&nd->layer, "attention")) continue;
    int64_t dkv, tk;
    attn_dims(&nd->layer, dyn, nd, &dkv, &tk);
    bytes += rows * (tk ? tk : cap) * (2 * dkv * 4 + 4);
  }
  free(dyn);
  return bytes;
}

void gp_kvdec_free(gp_kvdec *d) {
  if (!d) return;
  if (d->arenas) {
    gp_arena_free(&d->batch);
    gp_arena_free(&d->step);
  }
  free(d->dyn);
  free(d->shape);
  free(d->val);
  free(d->layer);
  free(d->cache);
  free(d->attn);
  free(d->be);
  free(d->bind);
  free(d);
}

gp_status gp_kvdec_create(gp_trainer *t, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                          int64_t rows, gp_kvdec **out) {
  char buf[200];
  const char *why = gp_kvdec_unsupported(t, step_in, buf, sizeof buf);
  if (why) return GP_ERR(GP_ERR_USAGE, "decoding with a cache: %s", why);
  const gp_model *m = t->m;
  const int nt = m->n_inputs + m->n_nodes, nn = m->n_nodes;
  gp_kvdec *d = calloc(1, sizeof *d);
  if (!d) return GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
  d->t = t;
  d->m = m;
  d->rows = rows;
  memcpy(d->step_in, step_in, GP_MAX_MODEL_INPUTS);
  d->dyn = calloc((size_t)nt, 1);
  d->shape = calloc((size_t)nt, sizeof *d->shape);
  d->val = calloc((size_t)nt, sizeof *d->val);
  d->layer = calloc((size_t)nn, sizeof *d->layer);
  d->cache = calloc((size_t)nn, sizeof *d->cache);
  d->attn = calloc((size_t)nn, 1);
  d->be = calloc((size_t)nn, sizeof *d->be);
  d->bind = calloc((size_t)nn, sizeof *d->bind);
  if (!d->dyn || !d->shape || !d->val || !d->layer || !d->cache || !d->attn || !d->be || !d->bind) {
    gp_kvdec_free(d);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
  }
  mark_dynamic(m, step_in, d->dyn);
  for (int i = 0; i < m->n_inputs; i++) {
    d->shape[i] = m->inputs[i].shape;
    if (step_in[i]) {
      d->cap = d->shape[i].d[0];
      d->shape[i].d[0] = 1;
    }
  }
  d->max_pos = d->cap;
  d->pos_node = -1;
  gp_status st = GP_OK;
  for (int i = 0; i < nn && st == GP_OK; i++) {
    const gp_node *nd = &m->nodes[i];
    int s = stage_of(t, i);
    d->be[i] = gp_pipeline_backend(t->pl, s);
    d->bind[i] = gp_params_bind(gp_pipeline_params(t->pl, s), i);
    d->layer[i] = nd->layer;
    d->shape[m->n_inputs + i] = nd->layer.out_shape;
    if (!d->dyn[m->n_inputs + i] || nd->layer.type->is_loss) continue;
    /* the step's copy: shapes inferred again from one position; its parameters must be the
     * model's, which the stage's bindings hold */
    gp_layer *c = &d->layer[i];
    for (int j = 0; j < nd->n_in; j++)
      c->in_shape[j] = d->shape[nd->in[j]];
    st = c->type->shape(c);
    if (st == GP_OK && c->n_params != nd->layer.n_params) st = GP_ERR(GP_ERR_RUNTIME, "x");
    for (int p = 0; st == GP_OK && p < c->n_params; p++)
      if (!gp_shape_equal(&c->pdesc[p].shape, &nd->layer.pdesc[p].shape))
        st = GP_ERR(GP_ERR_RUNTIME, "x");
    if (st != GP_OK)
      st = GP_ERR(GP_ERR_RUNTIME, "decoding with a cache: layer %s does not run on one position",
                  nd->layer.path);
    d->shape[m->n_inputs + i] = c->out_shape;
    d->attn[i] = is_type(c, "attention");
    /* a position table ([max_len, dim]: learned weight or sinusoidal buffer) bounds the
     * positions that can be decoded */
    if (is_type(c, "positional") && c->n_params && c->pdesc[0].shape.d[0] < d->max_pos) {
      d->max_pos = c->pdesc[0].shape.d[0];
      d->pos_node = i;
    }
  }
  if (st != GP_OK) {
    gp_kvdec_free(d);
    return st;
  }
  gp_arena_init(&d->batch, d->be[0], 0);
  gp_arena_init(&d->step, d->be[0], 0);
  d->arenas = 1;
  *out = d;
  return GP_OK;
}

int64_t gp_kvdec_capacity(const gp_kvdec *d) {
  return d->max_pos;
}

/* Runs node i on the values at hand into ar. */
static gp_status run_node(gp_kvdec *d, int i, gp_arena *ar, int cached) {
  const gp_model *m = d->m;
  const gp_node *nd = &m->nodes[i];
  const gp_layer *l = cached ? &d->layer[i] : &nd->layer;
  gp_tensor in[GP_MAX_INPUTS];
  for (int j = 0; j < nd->n_in; j++)
    in[j] = d->val[nd->in[j]];
  gp_tensor *o = &d->val[m->n_inputs + i];
  gp_shape s = gp_shape_batch(d->n, &l->out_shape);
  GP_TRY(gp_arena_tensor(ar, l->out_dtype, &s, o));
  gp_exec e;
  memset(&e, 0, sizeof e);
  e.be = d->be[i];
  e.arena = ar;
  e.seed = d->t->seed;
  e.step = d->t->step;
  e.loss_count = d->n;
  e.bind = d->bind[i];
  e.cache = cached && d->attn[i] ? &d->cache[i] : NULL;
  void *saved = NULL;
  gp_status st = l->type->forward(l, &e, in, o, &saved);
  if (st != GP_OK)
    return gp_error_prefix(st, "layer %s (%s:%d:%d): ", nd->layer.path, m->file ? m->file : "model",
                           nd->line, nd->col);
  return GP_OK;
}

gp_status gp_kvdec_begin(gp_kvdec *d, const gp_batch *b) {
  const gp_model *m = d->m;
  if (b->n > d->rows || b->n < 1)
    return GP_ERR(GP_ERR_USAGE, "decoding: a batch of %lld rows (1 to %lld)", (long long)b->n,
                  (long long)d->rows);
  GP_TRY(gp_arena_reset(&d->batch));
  d->n = b->n;
  d->steps = 0;
  for (int i = 0; i < m->n_inputs; i++) {
    d->val[i].data = d->step_in[i] ? NULL : (void *)b->in[i];
    d->val[i].shape = gp_shape_batch(b->n, &m->inputs[i].shape);
    d->val[i].dtype = m->inputs[i].dtype;
    d->val[i].device = -1;
  }
  for (int i = 0; i < m->n_nodes; i++) {
    memset(&d->cache[i], 0, sizeof d->cache[i]);
    d->cache[i].arena = &d->batch;
    d->cache[i].cap = d->cap;
    if (!d->dyn[m->n_inputs + i] && !m->nodes[i].layer.type->is_loss)
      GP_TRY(run_node(d, i, &d->batch, 0));
  }
  return GP_OK;
}

gp_status gp_kvdec_step(gp_kvdec *d, const void *const in[GP_MAX_MODEL_INPUTS],
                        const float **logits, int64_t *width) {
  const gp_model *m = d->m;
  if (d->steps >= d->max_pos) {
    if (d->pos_node >= 0)
      return GP_ERR(GP_ERR_DATA,
                    "decoding position %lld is past the %lld positions that layer %s's position "
                    "embedding holds (its max_len)",
                    (long long)d->steps, (long long)d->max_pos, m->nodes[d->pos_node].layer.path);
    return GP_ERR(GP_ERR_DATA, "decoding position %lld is past the model's %lld positions",
                  (long long)d->steps, (long long)d->max_pos);
  }
  d->steps++;
  GP_TRY(gp_arena_reset(&d->step));
  for (int i = 0; i < m->n_inputs; i++)
    if (d->step_in[i]) {
      d->val[i].data = (void *)in[i];
      d->val[i].shape = gp_shape_batch(d->n, &d->shape[i]);
    }
  for (int i = 0; i <= m->output_node; i++)
    if (d->dyn[m->n_inputs + i] && !m->nodes[i].layer.type->is_loss)
      GP_TRY(run_node(d, i, &d->step, 1));
  const gp_tensor *o = &d->val[m->n_inputs + m->output_node];
  *logits = GP_F32P(o);
  *width = gp_shape_numel(&d->shape[m->n_inputs + m->output_node]);
  return GP_OK;
}

gp_status gp_kvdec_reorder(gp_kvdec *d, const int64_t *from) {
  for (int i = 0; i < d->m->n_nodes; i++) {
    gp_kv_cache *c = &d->cache[i];
    if (!d->attn[i] || !c->kv) continue;
    const int64_t rf = c->row_floats, ri = c->row_ids;
    float *tmp;
    int32_t *tid;
    GP_TRY(gp_arena_alloc(&d->step, (size_t)(d->n * rf) * sizeof(float), (void **)&tmp));
    GP_TRY(gp_arena_alloc(&d->step, (size_t)(d->n * ri) * sizeof(int32_t), (void **)&tid));
    memcpy(tmp, c->kv, (size_t)(d->n * rf) * sizeof(float));
    memcpy(tid, c->ids, (size_t)(d->n * ri) * sizeof(int32_t));
    for (int64_t r = 0; r < d->n; r++) {
      memcpy(c->kv + r * rf, tmp + from[r] * rf, (size_t)rf * sizeof(float));
      memcpy(c->ids + r * ri, tid + from[r] * ri, (size_t)ri * sizeof(int32_t));
    }
  }
  return GP_OK;
}
