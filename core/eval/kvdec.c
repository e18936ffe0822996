/* Incremental decoding (see kvdec.h). The step's layers are copies of the model's with the
 * step inputs' first axis set to 1 and every shape inferred again, so each layer runs as it
 * was written, on one position; only attention needs to know (gp_exec.cache). Each node's
 * output and caches live in its stage's memory (a GPU's on a CUDA stage); a value read by a
 * stage of another device is copied there once a step (once a batch when it does not change),
 * and the logits come back to the host once a step. */
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
  int *stage;           /* per node: its stage */
  gp_layer_bind **bind; /* per node: its stage's bindings */
  int n_stages;
  gp_backend **sbe;        /* per stage: its backend */
  gp_arena *batch;         /* per stage: once-a-batch outputs, caches and copies */
  gp_arena *step;          /* per stage: a step's outputs and copies */
  unsigned char *arena_on; /* per stage: its two arenas are initialized */
  gp_backend **holder;     /* per tensor: the backend whose memory holds it; NULL: the host's */
  gp_tensor *mir;          /* per tensor and stage: its copy in that stage's memory */
  unsigned char *mir_ok;   /* ... made (for this batch, or this step when it changes) */
  float *logits;           /* rows x width: the output read back from a device */
  int32_t *from32;         /* rows: a reorder's rows as int32 */
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

/* Host memory: the CPU backend's, and where the model inputs come from (NULL). */
static int on_host(const gp_backend *be) {
  return !be || be->device < 0;
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
    } else if (!gp_pipeline_backend(t->pl, s)->gemm_strided_batched ||
               !gp_pipeline_backend(t->pl, s)->gather_rows) {
      why = "a stage's backend has no cached attention";
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
  for (int s = 0; s < d->n_stages && d->arena_on; s++)
    if (d->arena_on[s]) {
      gp_arena_free(&d->batch[s]);
      gp_arena_free(&d->step[s]);
    }
  free(d->arena_on);
  free(d->batch);
  free(d->step);
  free(d->sbe);
  free(d->stage);
  free(d->holder);
  free(d->mir);
  free(d->mir_ok);
  free(d->logits);
  free(d->from32);
  free(d->dyn);
  free(d->shape);
  free(d->val);
  free(d->layer);
  free(d->cache);
  free(d->attn);
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
  const int S = d->n_stages = gp_pipeline_stages(t->pl);
  d->stage = calloc((size_t)nn, sizeof *d->stage);
  d->bind = calloc((size_t)nn, sizeof *d->bind);
  d->sbe = calloc((size_t)S, sizeof *d->sbe);
  d->batch = calloc((size_t)S, sizeof *d->batch);
  d->step = calloc((size_t)S, sizeof *d->step);
  d->arena_on = calloc((size_t)S, 1);
  d->holder = calloc((size_t)nt, sizeof *d->holder);
  d->mir = calloc((size_t)nt * (size_t)S, sizeof *d->mir);
  d->mir_ok = calloc((size_t)nt * (size_t)S, 1);
  d->from32 = calloc((size_t)rows, sizeof *d->from32);
  if (!d->dyn || !d->shape || !d->val || !d->layer || !d->cache || !d->attn || !d->stage ||
      !d->bind || !d->sbe || !d->batch || !d->step || !d->arena_on || !d->holder || !d->mir ||
      !d->mir_ok || !d->from32) {
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
    int s = d->stage[i] = stage_of(t, i);
    d->sbe[s] = gp_pipeline_backend(t->pl, s);
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
  const int64_t width = gp_shape_numel(&d->shape[m->n_inputs + m->output_node]);
  if (st == GP_OK && !on_host(d->sbe[d->stage[m->output_node]])) {
    d->logits = malloc((size_t)(rows * width) * sizeof *d->logits);
    if (!d->logits) st = GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
  }
  if (st != GP_OK) {
    gp_kvdec_free(d);
    return st;
  }
  for (int s = 0; s < S; s++)
    if (d->sbe[s]) {
      gp_arena_init(&d->batch[s], d->sbe[s], 0);
      gp_arena_init(&d->step[s], d->sbe[s], 0);
      d->arena_on[s] = 1;
    }
  *out = d;
  return GP_OK;
}

int64_t gp_kvdec_capacity(const gp_kvdec *d) {
  return d->max_pos;
}

/* Tensor x as stage s reads it: itself where it is in s's memory (all host memory is one),
 * else a copy there, made once a batch (once a step when x changes each step) after its
 * holder's queue has written it. */
static gp_status view_on(gp_kvdec *d, int x, int s, gp_tensor *out) {
  gp_backend *from = d->holder[x], *to = d->sbe[s];
  const gp_tensor *v = &d->val[x];
  *out = *v;
  if (from == to || (on_host(from) && on_host(to))) return GP_OK;
  gp_tensor *c = &d->mir[(size_t)x * (size_t)d->n_stages + (size_t)s];
  unsigned char *ok = &d->mir_ok[(size_t)x * (size_t)d->n_stages + (size_t)s];
  if (!*ok) {
    if (!on_host(from)) GP_TRY(from->sync(from));
    if (!on_host(from) && !on_host(to) && from->device == to->device) {
      *c = *v; /* the same device's memory, written by now */
    } else {
      GP_TRY(gp_arena_tensor(d->dyn[x] ? &d->step[s] : &d->batch[s], v->dtype, &v->shape, c));
      const size_t bytes = gp_tensor_bytes(v);
      if (on_host(from))
        GP_TRY(to->from_host(to, c->data, v->data, bytes));
      else if (on_host(to))
        GP_TRY(from->to_host(from, c->data, v->data, bytes));
      else
        GP_TRY(to->copy_peer(to, GP_Q_COMPUTE, c->data, to->device, v->data, from->device, bytes));
    }
    *ok = 1;
  }
  *out = *c;
  return GP_OK;
}

/* Runs node i on the values at hand into its stage's batch or step arena. */
static gp_status run_node(gp_kvdec *d, int i, int per_step, int cached) {
  const gp_model *m = d->m;
  const gp_node *nd = &m->nodes[i];
  const gp_layer *l = cached ? &d->layer[i] : &nd->layer;
  const int sg = d->stage[i];
  gp_arena *ar = per_step ? &d->step[sg] : &d->batch[sg];
  gp_exec e;
  memset(&e, 0, sizeof e);
  gp_tensor in[GP_MAX_INPUTS];
  for (int j = 0; j < nd->n_in; j++) {
    GP_TRY(view_on(d, nd->in[j], sg, &in[j]));
    /* a model input copied to a device: layers that check its values read the host's */
    if (nd->in[j] < m->n_inputs && in[j].data != d->val[nd->in[j]].data &&
        e.n_host < GP_EXEC_MAX_HOST) {
      e.host_dev[e.n_host] = in[j].data;
      e.host_src[e.n_host++] = d->val[nd->in[j]].data;
    }
  }
  gp_tensor *o = &d->val[m->n_inputs + i];
  gp_shape s = gp_shape_batch(d->n, &l->out_shape);
  GP_TRY(gp_arena_tensor(ar, l->out_dtype, &s, o));
  d->holder[m->n_inputs + i] = d->sbe[sg];
  e.be = d->sbe[sg];
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
  for (int s = 0; s < d->n_stages; s++)
    if (d->arena_on[s]) GP_TRY(gp_arena_reset(&d->batch[s]));
  memset(d->mir_ok, 0, (size_t)(m->n_inputs + m->n_nodes) * (size_t)d->n_stages);
  d->n = b->n;
  d->steps = 0;
  for (int i = 0; i < m->n_inputs; i++) {
    d->val[i].data = d->step_in[i] ? NULL : (void *)b->in[i];
    d->val[i].shape = gp_shape_batch(b->n, &m->inputs[i].shape);
    d->val[i].dtype = m->inputs[i].dtype;
    d->val[i].device = -1;
    d->holder[i] = NULL;
  }
  for (int i = 0; i < m->n_nodes; i++) {
    memset(&d->cache[i], 0, sizeof d->cache[i]);
    d->cache[i].arena = &d->batch[d->stage[i]];
    d->cache[i].cap = d->cap;
    if (!d->dyn[m->n_inputs + i] && !m->nodes[i].layer.type->is_loss) GP_TRY(run_node(d, i, 0, 0));
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
  for (int s = 0; s < d->n_stages; s++)
    if (d->arena_on[s]) GP_TRY(gp_arena_reset(&d->step[s]));
  for (int x = 0; x < m->n_inputs + m->n_nodes; x++)
    if (d->dyn[x]) memset(&d->mir_ok[(size_t)x * (size_t)d->n_stages], 0, (size_t)d->n_stages);
  for (int i = 0; i < m->n_inputs; i++)
    if (d->step_in[i]) {
      d->val[i].data = (void *)in[i];
      d->val[i].shape = gp_shape_batch(d->n, &d->shape[i]);
    }
  for (int i = 0; i <= m->output_node; i++)
    if (d->dyn[m->n_inputs + i] && !m->nodes[i].layer.type->is_loss) GP_TRY(run_node(d, i, 1, 1));
  /* every queue done with the step: two instances on one GPU share values without copies,
   * and the next step rewrites its arena where another may still be reading */
  for (int s = 0; s < d->n_stages; s++)
    if (d->arena_on[s] && !on_host(d->sbe[s])) GP_TRY(d->sbe[s]->sync(d->sbe[s]));
  const gp_tensor *o = &d->val[m->n_inputs + m->output_node];
  gp_backend *be = d->holder[m->n_inputs + m->output_node];
  *width = gp_shape_numel(&d->shape[m->n_inputs + m->output_node]);
  *logits = GP_F32P(o);
  if (!on_host(be)) { /* the token choice is the host's: one copy a step */
    GP_TRY(be->to_host(be, d->logits, o->data, (size_t)(d->n * *width) * sizeof(float)));
    *logits = d->logits;
  }
  return GP_OK;
}

gp_status gp_kvdec_reorder(gp_kvdec *d, const int64_t *from) {
  for (int64_t r = 0; r < d->n; r++) {
    if (from[r] < 0 || from[r] >= d->n)
      return GP_ERR(GP_ERR_RUNTIME, "decoding: row %lld continues row %lld of %lld", (long long)r,
                    (long long)from[r], (long long)d->n);
    d->from32[r] = (int32_t)from[r];
  }
  for (int s = 0; s < d->n_stages; s++) {
    const int32_t *idx = NULL; /* from32 in stage s's memory, once the stage has a cache */
    for (int i = 0; i < d->m->n_nodes; i++) {
      gp_kv_cache *c = &d->cache[i];
      if (!d->attn[i] || !c->kv || d->stage[i] != s) continue;
      gp_backend *be = d->sbe[s];
      gp_arena *ar = &d->step[s];
      if (!idx && on_host(be)) {
        idx = d->from32;
      } else if (!idx) {
        int32_t *dev;
        GP_TRY(gp_arena_alloc(ar, (size_t)d->n * sizeof *dev, (void **)&dev));
        GP_TRY(be->from_host(be, dev, d->from32, (size_t)d->n * sizeof *dev));
        idx = dev;
      }
      const int64_t rf = c->row_floats, ri = c->row_ids;
      void *tmp, *tid;
      GP_TRY(gp_arena_alloc(ar, (size_t)(d->n * rf) * sizeof(float), &tmp));
      GP_TRY(gp_arena_alloc(ar, (size_t)(d->n * ri) * sizeof(int32_t), &tid));
      GP_TRY(be->copy(be, tmp, c->kv, (size_t)(d->n * rf) * sizeof(float)));
      GP_TRY(be->copy(be, tid, c->ids, (size_t)(d->n * ri) * sizeof(int32_t)));
      GP_TRY(be->gather_rows(be, d->n, rf, idx, tmp, rf, c->kv, rf));
      GP_TRY(be->gather_rows(be, d->n, ri, idx, tid, ri, c->ids, ri));
    }
  }
  return GP_OK;
}
