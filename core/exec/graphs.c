/* CUDA graphs of a stage's actions: which layers are recorded, the recording, the replay with
 * the host state the recorded run left, and when a graph is dropped (docs/cuda.md). */
#include "core/exec/graphs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/env.h"
#include "core/exec/pass.h"

/* An action shape whose graphs had to be dropped this many times (its pointers, or what may
 * be recorded, keep changing) runs eagerly for good. */
#define MAX_DROPS 8
#define N_AR 3 /* the pass's arenas: e->arena, p->remat_arena, e->temp */

static _Atomic int64_t n_recorded, n_launched, n_dropped;

int64_t gp_graphs_recorded(void) {
  return atomic_load(&n_recorded);
}
int64_t gp_graphs_launched(void) {
  return atomic_load(&n_launched);
}
int64_t gp_graphs_dropped(void) {
  return atomic_load(&n_dropped);
}

/* The pass's host state (the stage's part of it): tensors (by gp_graphs.ts), what each node
 * saved and its batch-norm count (by node - first), the arenas' positions. */
typedef struct full {
  gp_tensor *val, *grad;
  void **saved;
  int64_t *count;
  gp_arena_mark ar[N_AR];
} full;

/* What a recording changed in it. */
typedef struct change {
  int what, at; /* 0 val, 1 grad (at: index into ts), 2 saved, 3 count (at: node - first) */
  gp_tensor t;
  void *p;
  int64_t c;
} change;

/* Iterations [start, start + len) of the loop (nodes, in its order), recorded as g: the
 * pointers a replay must find (pre), and what the recorded run left (post). */
typedef struct seg {
  int start, len;
  gp_graph *g;
  void **pv, **pg, **ps;
  int64_t *pc;
  gp_arena_mark pre_ar[N_AR], post_ar[N_AR];
  change *ch;
  int n_ch;
} seg;

/* An action shape: what the recorded pointers and kernel arguments depend on besides the
 * pass's state (checked in full at each segment). */
typedef struct key {
  const gp_pass *p;
  const gp_arena *ar[N_AR];
  int kind, part, training, recompute, remat_only, remat, micro;
  int64_t batch, sample_offset;
} key;

enum { OBSERVE, RECORD, REPLAY, OFF };

typedef struct entry {
  key k;
  int state, runs, drops;
  uint64_t frees;       /* the backend's count of frees after the recording */
  unsigned char *clean; /* per node: its last eager run waited for nothing (recordable) */
  seg *seg;
  int n_seg, cap_seg;
} entry;

struct gp_graphs {
  const gp_model *m;
  gp_backend *be;
  int first, end;
  int *ts, nts;       /* the tensor ids the stage's pass touches: model inputs, its nodes' and their
                         inputs' */
  full at;            /* the state when the segment being recorded began */
  const char **fixed; /* per node: why it is never recorded, or NULL */
  unsigned char *told;
  entry *en;
  int n, cap;
};

struct gp_graph_run {
  gp_graphs *g;
  entry *en;
  gp_pass *p;
  gp_exec *e;
  gp_arena *ar[N_AR];
  int mode, cur, obs, seg_at, ended, changed, failed;
  uint64_t unsafe0, frees0;
  seg *rec; /* being recorded */
};

static uint64_t counters(gp_backend *be, uint64_t *frees, const char **why) {
  uint64_t u, f;
  const char *w;
  be->graph_counters(be, &u, &f, &w);
  if (frees) *frees = f;
  if (why) *why = w;
  return u;
}

gp_status gp_graphs_init(const gp_model *m, int first, int end, gp_backend *be, gp_graphs **out) {
  *out = NULL;
  if (!be->graph_begin || !gp_env_get(GP_ENV_CUDA_GRAPHS, 1)) return GP_OK;
  gp_graphs *g = calloc(1, sizeof *g);
  int n = end - first;
  if (!g || !(g->fixed = calloc((size_t)n, sizeof *g->fixed)) ||
      !(g->told = calloc((size_t)n, 1))) {
    gp_graphs_free(g);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
  }
  g->m = m;
  g->be = be;
  g->first = first;
  g->end = end;
  unsigned char *use = calloc((size_t)(m->n_inputs + m->n_nodes), 1);
  g->ts = malloc((size_t)(m->n_inputs + m->n_nodes) * sizeof *g->ts);
  g->at.saved = malloc((size_t)n * sizeof *g->at.saved);
  g->at.count = malloc((size_t)n * sizeof *g->at.count);
  if (!use || !g->ts || !g->at.saved || !g->at.count) {
    free(use);
    gp_graphs_free(g);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
  }
  for (int t = 0; t < m->n_inputs; t++)
    use[t] = 1;
  for (int i = first; i < end; i++) {
    use[m->n_inputs + i] = 1;
    for (int j = 0; j < m->nodes[i].n_in; j++)
      use[m->nodes[i].in[j]] = 1;
  }
  for (int t = 0; t < m->n_inputs + m->n_nodes; t++)
    if (use[t]) g->ts[g->nts++] = t;
  free(use);
  g->at.val = malloc((size_t)g->nts * sizeof *g->at.val);
  g->at.grad = malloc((size_t)g->nts * sizeof *g->at.grad);
  if (!g->at.val || !g->at.grad) {
    gp_graphs_free(g);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
  }
  for (int i = first; i < end; i++) {
    const gp_node *nd = &m->nodes[i];
    if (nd->layer.type->is_loss) g->fixed[i - first] = "a loss: its sum is read on the host";
    for (int j = 0; j < nd->n_in; j++) {
      int t = nd->in[j];
      gp_dtype d = t < m->n_inputs ? m->inputs[t].dtype : m->nodes[t - m->n_inputs].layer.out_dtype;
      if (d != GP_F32 && d != GP_F16 && d != GP_BF16)
        g->fixed[i - first] =
            "it reads integer ids, labels or masks, which the host checks or reads";
    }
  }
  *out = g;
  return GP_OK;
}

static void seg_free(gp_backend *be, seg *s) {
  be->graph_destroy(be, s->g);
  free(s->pv);
  free(s->pg);
  free(s->ps);
  free(s->pc);
  free(s->ch);
  memset(s, 0, sizeof *s);
}

static void drop(gp_graphs *g, entry *en) {
  for (int i = 0; i < en->n_seg; i++)
    seg_free(g->be, &en->seg[i]);
  en->n_seg = 0;
}

void gp_graphs_free(gp_graphs *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) {
    drop(g, &g->en[i]);
    free(g->en[i].seg);
    free(g->en[i].clean);
  }
  free(g->en);
  free(g->ts);
  free(g->at.val);
  free(g->at.grad);
  free(g->at.saved);
  free(g->at.count);
  free(g->fixed);
  free(g->told);
  free(g);
}

static int64_t *count_of(const gp_graph_run *r, int k) {
  return r->e->binds ? &r->e->binds[r->g->first + k - r->e->bind_first].stats_count : NULL;
}

static void full_take(const gp_graph_run *r, full *f) {
  const gp_graphs *g = r->g;
  for (int j = 0; j < g->nts; j++) {
    f->val[j] = r->p->val[g->ts[j]];
    f->grad[j] = r->p->grad[g->ts[j]];
  }
  for (int k = 0; k < g->end - g->first; k++) {
    f->saved[k] = r->p->saved[g->first + k];
    f->count[k] = count_of(r, k) ? *count_of(r, k) : 0;
  }
  for (int a = 0; a < N_AR; a++)
    if (r->ar[a]) gp_arena_get_mark(r->ar[a], &f->ar[a]);
}

static void full_restore(const gp_graph_run *r, const full *f) {
  const gp_graphs *g = r->g;
  for (int j = 0; j < g->nts; j++) {
    r->p->val[g->ts[j]] = f->val[j];
    r->p->grad[g->ts[j]] = f->grad[j];
  }
  for (int k = 0; k < g->end - g->first; k++) {
    r->p->saved[g->first + k] = f->saved[k];
    if (count_of(r, k)) *count_of(r, k) = f->count[k];
  }
  for (int a = 0; a < N_AR; a++)
    if (r->ar[a]) gp_arena_set_mark(r->ar[a], &f->ar[a]);
}

/* s's pre from the state at its start (g->at). */
static gp_status seg_pre(gp_graphs *g, seg *s) {
  size_t n = (size_t)(g->end - g->first);
  s->pv = malloc((size_t)g->nts * sizeof *s->pv);
  s->pg = malloc((size_t)g->nts * sizeof *s->pg);
  s->ps = malloc(n * sizeof *s->ps);
  s->pc = malloc(n * sizeof *s->pc);
  if (!s->pv || !s->pg || !s->ps || !s->pc)
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for a CUDA graph's state");
  for (int j = 0; j < g->nts; j++) {
    s->pv[j] = g->at.val[j].data;
    s->pg[j] = g->at.grad[j].data;
  }
  memcpy(s->ps, g->at.saved, n * sizeof *s->ps);
  memcpy(s->pc, g->at.count, n * sizeof *s->pc);
  memcpy(s->pre_ar, g->at.ar, sizeof s->pre_ar);
  return GP_OK;
}

static int tensor_same(const gp_tensor *a, const gp_tensor *b) {
  if (a->data != b->data || a->dtype != b->dtype || a->shape.ndim != b->shape.ndim) return 0;
  for (int d = 0; d < a->shape.ndim; d++)
    if (a->shape.d[d] != b->shape.d[d]) return 0;
  return 1;
}

static gp_status put(seg *s, int *cap, change c) {
  if (s->n_ch == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    change *ch = realloc(s->ch, (size_t)*cap * sizeof *ch);
    if (!ch) return GP_ERR(GP_ERR_NOMEM, "out of host memory for a CUDA graph's state");
    s->ch = ch;
  }
  s->ch[s->n_ch++] = c;
  return GP_OK;
}

/* s's post: what changed since its start (g->at), as the recorded run left it. */
static gp_status seg_post(const gp_graph_run *r, seg *s) {
  const gp_graphs *g = r->g;
  int cap = 0;
  for (int j = 0; j < g->nts; j++) {
    const gp_tensor *v = &r->p->val[g->ts[j]], *d = &r->p->grad[g->ts[j]];
    if (!tensor_same(v, &g->at.val[j])) GP_TRY(put(s, &cap, (change){.what = 0, .at = j, .t = *v}));
    if (!tensor_same(d, &g->at.grad[j]))
      GP_TRY(put(s, &cap, (change){.what = 1, .at = j, .t = *d}));
  }
  for (int k = 0; k < g->end - g->first; k++) {
    if (r->p->saved[g->first + k] != g->at.saved[k])
      GP_TRY(put(s, &cap, (change){.what = 2, .at = k, .p = r->p->saved[g->first + k]}));
    if (count_of(r, k) && *count_of(r, k) != g->at.count[k])
      GP_TRY(put(s, &cap, (change){.what = 3, .at = k, .c = *count_of(r, k)}));
  }
  for (int a = 0; a < N_AR; a++)
    if (r->ar[a]) gp_arena_get_mark(r->ar[a], &s->post_ar[a]);
  return GP_OK;
}

/* Whether the pass is as it was when s was recorded: the pointers it recorded are the ones it
 * would use. (Shapes follow from the key.) */
static int seg_matches(const gp_graph_run *r, const seg *s) {
  const gp_graphs *g = r->g;
  for (int j = 0; j < g->nts; j++)
    if (r->p->val[g->ts[j]].data != s->pv[j] || r->p->grad[g->ts[j]].data != s->pg[j]) return 0;
  for (int k = 0; k < g->end - g->first; k++)
    if (r->p->saved[g->first + k] != s->ps[k] || (count_of(r, k) && *count_of(r, k) != s->pc[k]))
      return 0;
  for (int a = 0; a < N_AR; a++) {
    gp_arena_mark m;
    if (!r->ar[a]) continue;
    gp_arena_get_mark(r->ar[a], &m);
    if (!gp_arena_mark_eq(&m, &s->pre_ar[a])) return 0;
  }
  return 1;
}

/* The pass as the recorded run left it. */
static void seg_apply(const gp_graph_run *r, const seg *s) {
  const gp_graphs *g = r->g;
  for (int i = 0; i < s->n_ch; i++) {
    const change *c = &s->ch[i];
    if (c->what == 0) r->p->val[g->ts[c->at]] = c->t;
    if (c->what == 1) r->p->grad[g->ts[c->at]] = c->t;
    if (c->what == 2) r->p->saved[g->first + c->at] = c->p;
    if (c->what == 3) *count_of(r, c->at) = c->c;
  }
  for (int a = 0; a < N_AR; a++)
    if (r->ar[a]) gp_arena_set_mark(r->ar[a], &s->post_ar[a]);
}

static int key_eq(const key *a, const key *b) {
  for (int k = 0; k < N_AR; k++)
    if (a->ar[k] != b->ar[k]) return 0;
  return a->p == b->p && a->kind == b->kind && a->part == b->part && a->training == b->training &&
         a->recompute == b->recompute && a->remat_only == b->remat_only && a->remat == b->remat &&
         a->micro == b->micro && a->batch == b->batch && a->sample_offset == b->sample_offset;
}

static gp_status find(gp_graphs *g, const key *k, entry **out) {
  for (int i = 0; i < g->n; i++)
    if (key_eq(&g->en[i].k, k)) {
      *out = &g->en[i];
      return GP_OK;
    }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    entry *en = realloc(g->en, (size_t)cap * sizeof *en);
    if (!en) return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
    g->en = en;
    g->cap = cap;
  }
  entry *en = &g->en[g->n];
  memset(en, 0, sizeof *en);
  en->k = *k;
  if (!(en->clean = calloc((size_t)(g->end - g->first), 1)))
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
  g->n++;
  *out = en;
  return GP_OK;
}

/* Whether a line was printed for this layer type and reason (a static string) already in this
 * process: one line each, not one per layer, stage and action. */
static int told(const char *type, const char *why) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static const char *seen[64][2];
  static int n;
  int was = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < n && !was; i++)
    was = seen[i][0] == type && seen[i][1] == why;
  if (!was && n < 64) seen[n][0] = type, seen[n][1] = why, n++;
  pthread_mutex_unlock(&mu);
  return was;
}

/* The end of eager iteration i: recordable next time when it waited for nothing. Once an
 * action has run twice, a layer that still cannot be recorded is named, once. */
static void observe_end(gp_graph_run *r, int i) {
  gp_graphs *g = r->g;
  const char *why = "";
  int k = i - g->first;
  uint64_t unsafe = counters(g->be, NULL, &why);
  int clean = !g->fixed[k] && unsafe == r->unsafe0;
  if (clean && !r->en->clean[k]) r->changed = 1; /* more may be recorded */
  if (!clean && r->en->clean[k] && r->mode != OBSERVE) r->changed = 1;
  r->en->clean[k] = (unsigned char)clean;
  /* (a loss always runs outside: no news) */
  if (clean || r->en->runs < 1 || g->told[k] || g->m->nodes[i].layer.type->is_loss) return;
  g->told[k] = 1;
  const gp_layer *l = &g->m->nodes[i].layer;
  if (told(l->type->name, g->fixed[k] ? g->fixed[k] : why)) return;
  fprintf(stderr,
          "gpipe: CUDA graphs: layer '%s' (%s) runs outside them (as any %s for this "
          "reason): %s\n",
          l->path, l->type->name, l->type->name, g->fixed[k] ? g->fixed[k] : why);
}

static gp_status begin_segment(gp_graph_run *r, int i) {
  entry *en = r->en;
  if (en->n_seg == en->cap_seg) {
    int cap = en->cap_seg ? 2 * en->cap_seg : 4;
    seg *s = realloc(en->seg, (size_t)cap * sizeof *s);
    if (!s) return GP_ERR(GP_ERR_NOMEM, "out of host memory for CUDA graphs");
    en->seg = s;
    en->cap_seg = cap;
  }
  seg *s = &en->seg[en->n_seg++];
  memset(s, 0, sizeof *s);
  s->start = i;
  r->rec = s;
  r->ended = 0;
  full_take(r, &r->g->at);
  GP_TRY(seg_pre(r->g, s));
  return r->g->be->graph_begin(r->g->be);
}

/* The recording of r->rec ends, and what it recorded runs now. */
static gp_status end_segment(gp_graph_run *r) {
  gp_backend *be = r->g->be;
  seg *s = r->rec;
  r->ended = 1;
  GP_TRY(be->graph_end(be, &s->g));
  GP_TRY(seg_post(r, s));
  GP_TRY(be->graph_launch(be, s->g));
  atomic_fetch_add(&n_recorded, 1);
  atomic_fetch_add(&n_launched, 1);
  r->rec = NULL;
  return GP_OK;
}

gp_status gp_graph_node(gp_graph_run *r, int i, int *skip) {
  *skip = 0;
  if (r->obs >= 0) observe_end(r, r->obs);
  r->obs = -1;
  r->cur = i;
  entry *en = r->en;
  if (r->mode == RECORD) {
    int clean = en->clean[i - r->g->first];
    if (r->rec && !clean) GP_TRY(end_segment(r));
    if (!r->rec && clean) GP_TRY(begin_segment(r, i));
    if (r->rec) {
      r->rec->len++;
      return GP_OK;
    }
  } else if (r->mode == REPLAY && r->seg_at < en->n_seg && en->seg[r->seg_at].start == i) {
    seg *s = &en->seg[r->seg_at++];
    uint64_t frees;
    counters(r->g->be, &frees, NULL);
    if (frees == en->frees && seg_matches(r, s)) { /* (an eager layer before it freed nothing) */
      GP_TRY(r->g->be->graph_launch(r->g->be, s->g));
      seg_apply(r, s);
      atomic_fetch_add(&n_launched, 1);
      *skip = s->len;
      return GP_OK;
    }
    r->changed = 1; /* its pointers moved: run eagerly, then recorded again */
  }
  r->obs = i;
  r->unsafe0 = counters(r->g->be, NULL, NULL);
  return GP_OK;
}

/* After the action: the entry's next state. Any change (more or fewer layers recordable, moved
 * pointers, memory freed while recording) drops its graphs and records again, at most
 * MAX_DROPS times. */
static void settle(gp_graph_run *r) {
  gp_graphs *g = r->g;
  entry *en = r->en;
  uint64_t frees;
  counters(g->be, &frees, NULL);
  en->runs++;
  int any = 0;
  for (int k = 0; k < g->end - g->first; k++)
    any |= en->clean[k];
  /* (memory freed while recording: a recorded pointer may be gone) */
  if (!r->failed && (r->mode == OBSERVE || (!r->changed && frees == r->frees0))) {
    en->state = r->mode == OBSERVE ? (any ? RECORD : OBSERVE) : en->n_seg ? REPLAY : OBSERVE;
    en->frees = frees;
    return;
  }
  if (en->n_seg) atomic_fetch_add(&n_dropped, 1);
  drop(g, en);
  if (++en->drops > MAX_DROPS) {
    en->state = OFF;
    fprintf(stderr,
            "gpipe: CUDA graphs: an action of layers %d to %d (micro-batch %d) keeps changing "
            "its pointers or what can be recorded: it runs without graphs\n",
            g->first, g->end - 1, en->k.micro);
    return;
  }
  en->state = any ? RECORD : OBSERVE;
}

gp_status gp_graphs_pass(gp_pass *p, gp_exec *e, int kind, int part, gp_graph_loop loop) {
  gp_graphs *g = p->graphs;
  int from = kind == 0 ? p->first : p->end - 1;
  /* per-layer callbacks (trace, hand-offs to other processes, bucketed all-reduce) must see
   * each layer run */
  if (!g || e->on_layer || e->cache || p->first != g->first || p->end != g->end || e->be != g->be)
    return loop(p, e, part, from, NULL);
  key k = {.p = p,
           .ar = {e->arena, p->remat_arena != e->arena ? p->remat_arena : NULL,
                  e->temp != e->arena && e->temp != p->remat_arena ? e->temp : NULL},
           .kind = kind,
           .part = part,
           .training = e->training,
           .recompute = e->recompute,
           .remat_only = p->remat_only,
           .remat = p->remat != NULL,
           .micro = e->micro,
           .batch = p->batch,
           .sample_offset = e->sample_offset};
  entry *en = NULL;
  GP_TRY(find(g, &k, &en));
  if (en->state == OFF) return loop(p, e, part, from, NULL);
  gp_graph_run r = {.g = g, .en = en, .p = p, .e = e, .mode = en->state, .cur = -1, .obs = -1};
  memcpy(r.ar, k.ar, sizeof r.ar);
  counters(g->be, &r.frees0, NULL);
  if (r.mode == REPLAY && r.frees0 != en->frees) { /* what a graph points at may be gone */
    atomic_fetch_add(&n_dropped, 1);
    drop(g, en);
    if (++en->drops > MAX_DROPS) {
      en->state = OFF;
      return loop(p, e, part, from, NULL);
    }
    r.mode = en->state = RECORD;
  }
  gp_status st = loop(p, e, part, from, &r);
  if (st == GP_OK && r.obs >= 0) observe_end(&r, r.obs), r.obs = -1;
  if (st == GP_OK && r.rec) st = end_segment(&r);
  /* A recording failed (an op that cannot be recorded; a graph CUDA would not make): the pass
   * back to the segment's start, which runs again eagerly, the layer that failed no longer
   * recorded. (Nothing recorded has run, and the host state is all in the pass.) */
  while (st != GP_OK && r.rec) {
    seg *s = r.rec;
    const char *why;
    counters(g->be, NULL, &why);
    if (!r.ended) (void)g->be->graph_end(g->be, NULL);
    en->clean[r.cur - g->first] = 0;
    full_restore(&r, &g->at);
    e->arena = r.ar[0];
    int restart = s->start;
    seg_free(g->be, s);
    en->n_seg--;
    r.rec = NULL;
    r.mode = OBSERVE;
    r.failed = 1;
    r.obs = -1;
    gp_error_clear();
    st = loop(p, e, part, restart, &r);
    if (st == GP_OK && r.obs >= 0) observe_end(&r, r.obs), r.obs = -1;
  }
  if (st == GP_OK) settle(&r);
  return st;
}
