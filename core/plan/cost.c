/* Per-unit costs for the partitioner: analytic FLOPs, parameters and bytes from the layers'
 * cost(), boundary traffic per cut, and (GP_COST_TIME) forward and backward time measured on
 * the CPU backend, cached on disk per distinct unit. */
#include "core/plan/cost.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/io/target.h"
#include "core/rng.h"
#include "core/exec/bfstore.h"
#include "core/exec/pass.h"
#include "core/train/params.h"

#define MAX_MICRO_BATCH GP_MAX_BATCH
/* Timing: warm-ups (first-touch, arena growth, BLAS buffers), then repetitions until both
 * MIN_RUNS runs and MIN_SECONDS of measured time, or MAX_RUNS runs for very small units. */
#define WARMUPS 2
#define MIN_RUNS 5
#define MAX_RUNS 200
#define MIN_SECONDS 0.05
/* The smallest time reported: a unit whose backward has nothing to do still costs a call. */
#define MIN_TIME 1e-9
#define CACHE_HEADER "gpipe unit time v3" /* v3: the fastest run, not the median */
/* a unit measured at a day or more is not a measurement: re-measure it */
#define CACHE_MAX_S 86400.0

void gp_unit_costs_free(gp_unit_costs *c) {
  if (!c) return;
  free(c->fwd);
  free(c->bwd);
  free(c->fwd_flops);
  free(c->bwd_flops);
  free(c->params);
  free(c->act_bytes);
  free(c->out_bytes);
  free(c->grad_bytes);
  free(c->wkeep_bytes);
  free(c->cheap_bytes);
  free(c->cheap_share);
  free(c->cut_bytes);
  free(c->scratch);
  memset(c, 0, sizeof *c);
}

static int64_t tensor_bytes(const gp_model *m, int t) {
  if (t < m->n_inputs)
    return gp_shape_numel(&m->inputs[t].shape) * (int64_t)gp_dtype_size(m->inputs[t].dtype);
  const gp_layer *l = &m->nodes[t - m->n_inputs].layer;
  return gp_shape_numel(&l->out_shape) * (int64_t)gp_dtype_size(l->out_dtype);
}

/* last[t]: the highest unit that reads tensor t, or -1. */
static void last_readers(const gp_model *m, int *last) {
  int nt = m->n_inputs + m->n_nodes;
  for (int t = 0; t < nt; t++)
    last[t] = -1;
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++) {
      int t = m->nodes[i].in[j];
      if (m->nodes[i].unit > last[t]) last[t] = m->nodes[i].unit;
    }
}

void gp_node_cost(const gp_model *m, int i, gp_cost *c) {
  const gp_node *n = &m->nodes[i];
  memset(c, 0, sizeof *c);
  n->layer.type->cost(&n->layer, c);
  if (i == m->n_nodes - 1) return;
  for (int j = 0; j < n->n_in; j++) {
    int t = n->in[j];
    if (t >= m->n_inputs && m->nodes[t - m->n_inputs].trains) return;
  }
  c->bwd_flops = n->layer.n_params ? c->bwd_flops - c->bwd_data_flops : 0.0;
  c->bwd_data_flops = 0.0;
}

/* gp_cost.over_input_bytes of node i */
static int64_t loss_over_bytes(const gp_model *m, int i) {
  gp_cost c;
  gp_node_cost(m, i, &c);
  return c.over_input_bytes;
}

static void analytic(const gp_model *m, int64_t mb, const int *last, const int *reader,
                     unsigned char *flag, gp_unit_costs *c) {
  int n = m->n_units;
  for (int u = 0; u < n; u++) {
    double cf = 0;
    c->cheap_bytes[u] =
        gp_stage_remat_set(m, reader, m->unit_first[u], m->unit_first[u + 1], flag, &cf) * mb;
    double f = 0, b = 0;
    int64_t p = 0, act = 0, grad = 0, wkeep = 0;
    for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) {
      /* one buffer per input that takes a gradient (the first one's, or a temporary that is
       * added to it), less the one (or two) add, identity or flatten hands dout to */
      int handed =
          m->nodes[i].layer.type->grad_is_dout ? 1 + gp_node_hands_both(m, i, m->unit_first[u]) : 0;
      gp_cost k;
      gp_node_cost(m, i, &k);
      /* a loss over its logits keeps its probabilities and their gradient there */
      const int over = k.over_input_bytes > 0 && gp_node_over_input(m, reader, i, m->unit_first[u]);
      handed += over;
      for (int j = 0; j < m->nodes[i].n_in; j++) {
        int t = m->nodes[i].in[j];
        if (t < m->n_inputs || !m->nodes[t - m->n_inputs].trains) continue;
        if (handed) {
          handed--;
          continue;
        }
        grad += tensor_bytes(m, t);
      }
      grad += k.inner_grad_bytes;
      f += k.fwd_flops;
      b += k.bwd_flops;
      p += k.params;
      /* (an output whose gradient the loss writes over it holds it already) */
      int r = reader[m->n_inputs + i];
      int over_out =
          r >= 0 && gp_node_over_input(m, reader, r, m->unit_first[u]) && loss_over_bytes(m, r) > 0;
      if (m->nodes[i].layer.n_params > 0)
        wkeep += (over_out ? 0 : tensor_bytes(m, m->n_inputs + i)) + k.w_bytes;
      /* a layer that writes over its input (in-place ReLU) adds no output, where its producer
       * is in the unit (across a cut it may not: counted) */
      act += (gp_node_in_place(m, reader, i, m->unit_first[u]) ? 0 : k.out_bytes) + k.saved_bytes -
             (over ? k.over_input_bytes : 0);
    }
    c->fwd_flops[u] = f * (double)mb;
    c->bwd_flops[u] = b * (double)mb;
    c->params[u] = p;
    c->act_bytes[u] = act * mb;
    c->cheap_share[u] = f > 0 ? cf / f : 0.0;
    c->grad_bytes[u] = grad * mb;
    c->wkeep_bytes[u] = wkeep * mb;
    int lastnode = m->unit_first[u + 1] - 1;
    c->out_bytes[u] =
        lastnode >= m->unit_first[u] ? tensor_bytes(m, m->n_inputs + lastnode) * mb : 0;
  }
  /* A tensor made in unit p (model inputs: p = -1) and last read in unit r crosses the cuts
   * before units p+1..r: a difference array adds it to each of them once. */
  for (int u = 0; u <= n; u++)
    c->cut_bytes[u] = 0;
  int nt = m->n_inputs + m->n_nodes;
  for (int t = 0; t < nt; t++) {
    int p = t < m->n_inputs ? -1 : m->nodes[t - m->n_inputs].unit;
    if (last[t] <= p) continue;
    int64_t bytes = tensor_bytes(m, t) * mb;
    c->cut_bytes[p + 1] += bytes;
    c->cut_bytes[last[t] + 1] -= bytes;
  }
  for (int u = 1; u <= n; u++)
    c->cut_bytes[u] += c->cut_bytes[u - 1];
}

/* ---- the measurement cache ----------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = 0;
    memcpy(&v, b + i, n - i < 8 ? n - i : 8);
    h = gp_hash_combine(h, v);
  }
  return gp_hash_combine(h, (uint64_t)n);
}

/* What the unit's time depends on, without its position or names: each layer's type and
 * settings (the conf bytes; confs are zeroed at allocation so padding is stable), its input
 * shapes and dtypes, how its inputs are wired (inside the unit by offset, or from outside),
 * whether later units read its output (so backward starts from a gradient), the micro-batch,
 * the thread count and the device. */
static uint64_t unit_key(const gp_model *m, int u, const int *last, int64_t mb, int threads) {
  uint64_t h = gp_hash_str(0x9e3779b97f4a7c15ULL, CACHE_HEADER);
  h = gp_hash_str(h, "cpu");
  h = gp_hash_combine(h, (uint64_t)mb);
  h = gp_hash_combine(h, (uint64_t)threads);
  int f = m->unit_first[u], e = m->unit_first[u + 1];
  h = gp_hash_combine(h, (uint64_t)(e - f));
  for (int i = f; i < e; i++) {
    const gp_node *nd = &m->nodes[i];
    const gp_layer *l = &nd->layer;
    h = gp_hash_str(h, l->type->name);
    if (l->conf && l->type->conf_size) h = hash_bytes(h, l->conf, l->type->conf_size);
    h = gp_hash_combine(h, (uint64_t)nd->n_in);
    for (int j = 0; j < nd->n_in; j++) {
      int t = nd->in[j], src = t - m->n_inputs;
      /* inside: the offset of its producer; outside: a model input (its label role matters:
       * it decides the random values) or an earlier unit's tensor */
      int64_t where = src >= f ? src - f : t < m->n_inputs ? (t == m->label_input ? -2 : -3) : -1;
      h = gp_hash_combine(h, (uint64_t)where);
      h = hash_bytes(h, &l->in_shape[j].ndim, sizeof l->in_shape[j].ndim);
      h = hash_bytes(h, l->in_shape[j].d, sizeof(int64_t) * (size_t)l->in_shape[j].ndim);
      h = gp_hash_combine(h, (uint64_t)l->in_dtype[j]);
    }
    h = gp_hash_combine(h, (uint64_t)(last[m->n_inputs + i] > u));
  }
  return h;
}

static void cache_path(const char *dir, uint64_t key, char *buf, size_t n) {
  snprintf(buf, n, "%s/unit-%016" PRIx64 ".txt", dir, key);
}

/* 1 if the file holds a well-formed entry for key; anything else is treated as absent. */
static int cache_read(const char *dir, uint64_t key, double *fwd, double *bwd, int64_t *scratch) {
  char path[4096], line[128];
  cache_path(dir, key, path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  uint64_t k = 0;
  double a = -1, b = -1;
  int64_t w = -1;
  int ok = fgets(line, sizeof line, f) && strcmp(line, CACHE_HEADER "\n") == 0 &&
           fscanf(f, " key %" SCNx64 " fwd %lf bwd %lf scratch %" SCNd64, &k, &a, &b, &w) == 4 &&
           k == key && a > 0 && b > 0 && a < CACHE_MAX_S && b < CACHE_MAX_S && w >= 0;
  fclose(f);
  if (ok) *fwd = a, *bwd = b, *scratch = w;
  return ok;
}

/* Written to a temporary name and renamed, so a reader never sees half a file. */
static gp_status cache_write(const char *dir, uint64_t key, const char *unit, double fwd,
                             double bwd, int64_t scratch) {
  char path[4096], tmp[4200];
  cache_path(dir, key, path, sizeof path);
  GP_TRY(gp_io_temp_name(path, tmp, sizeof tmp));
  gp_io_temp_claim(tmp);
  FILE *f = fopen(tmp, "w");
  gp_status s = GP_OK;
  if (!f) {
    s = GP_ERR(GP_ERR_IO, "cannot write the cost cache file '%s': %s", tmp, strerror(errno));
  } else {
    int ok = fprintf(f,
                     CACHE_HEADER "\nkey %016" PRIx64 "\nfwd %.17g\nbwd %.17g\nscratch %" PRId64
                                  "\nunit %s\n",
                     key, fwd, bwd, scratch, unit) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
      int err = errno;
      remove(tmp);
      s = GP_ERR(GP_ERR_IO, "cannot write the cost cache file '%s': %s", path, strerror(err));
    }
  }
  gp_io_temp_release(tmp);
  return s;
}

/* mkdir -p. */
static gp_status make_dir(const char *dir) {
  char buf[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof buf) return GP_ERR(GP_ERR_USAGE, "bad cost cache folder name");
  memcpy(buf, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    char c = buf[i];
    buf[i] = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return GP_ERR(GP_ERR_IO, "cannot create the cost cache folder '%s': %s", buf,
                    strerror(errno));
    buf[i] = c;
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return GP_ERR(GP_ERR_IO, "the cost cache folder '%s' is not a folder", dir);
  return GP_OK;
}

/* ---- measuring one unit -------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The fastest run: on a machine shared with other work the runs' times are the unit's own plus
 * whatever preempted it, so the minimum is what repeats (the median of 5 runs on the 2-core VM
 * under a load of 6 to 12 moved a unit's time 2x between two runs a minute apart, and turned
 * resnet20's K = 2 split from 7,7 to 6,8, 1.36x slower measured whole). */
static double fastest(const double *v, int n) {
  double t = v[0];
  for (int i = 1; i < n; i++)
    t = fmin(t, v[i]);
  return t;
}

/* Random values for a tensor of batch x per-sample shape: f32 uniform in [-1, 1), labels in
 * [0, classes), other integers 0 (a valid index for any table). */
static gp_status fill_random(gp_backend *be, gp_tensor *t, int is_label, int64_t classes,
                             gp_rng *r) {
  int64_t n = gp_shape_numel(&t->shape);
  size_t bytes = gp_tensor_bytes(t);
  void *host = calloc(bytes ? bytes : 1, 1);
  if (!host) return GP_ERR(GP_ERR_NOMEM, "out of host memory for timing inputs");
  if (t->dtype == GP_F32)
    for (int64_t i = 0; i < n; i++)
      ((float *)host)[i] = 2.0f * gp_rng_uniform(r) - 1.0f;
  else if (t->dtype == GP_I32 && is_label)
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)host)[i] = (int32_t)gp_rng_below(r, (uint64_t)classes);
  gp_status s = be->from_host(be, t->data, host, bytes);
  free(host);
  return s;
}

typedef struct timer_ctx {
  gp_backend *be;
  const gp_model *orig;
  gp_model mm;         /* a shallow copy of the model with its own nodes */
  const int *last;     /* last reader unit of each tensor */
  int64_t mb, classes; /* micro-batch; label range */
} timer_ctx;

/* Builds the unit's parameters and its outside inputs and output gradients, then times its
 * forward and backward. The layers measured are copies (own nodes and confs), so the caller's
 * model keeps its parameter pointers and its layers' state. */
static gp_status time_unit(timer_ctx *x, int u, int end_u, double *fwd, double *bwd) {
  gp_model *m = &x->mm;
  gp_backend *be = x->be;
  int f = m->unit_first[u], e = m->unit_first[end_u];
  int nt = m->n_inputs + m->n_nodes;
  gp_params pp = {0};
  gp_pass p = {0};
  gp_arena keep, work;
  gp_arena_init(&keep, be, 0);
  gp_arena_init(&work, be, 0);
  gp_tensor *ext = calloc((size_t)nt, sizeof *ext);     /* outside inputs, kept for all runs */
  gp_tensor *grads = calloc((size_t)nt, sizeof *grads); /* output gradients, pristine */
  double *tf = malloc(sizeof(double) * MAX_RUNS), *tb = malloc(sizeof(double) * MAX_RUNS);
  void **confs = calloc((size_t)(e - f) + 1, sizeof *confs);
  gp_status s = GP_OK;
  if (!ext || !grads || !tf || !tb || !confs) {
    s = GP_ERR(GP_ERR_NOMEM, "out of host memory timing unit '%s'", m->unit_names[u]);
    goto done;
  }
  for (int i = f; i < e; i++) {
    gp_layer *l = &m->nodes[i].layer;
    size_t cs = l->type->conf_size;
    if (!l->conf || !cs) continue;
    if (!(confs[i - f] = malloc(cs))) {
      s = GP_ERR(GP_ERR_NOMEM, "out of host memory timing unit '%s'", m->unit_names[u]);
      goto done;
    }
    memcpy(confs[i - f], l->conf, cs);
    l->conf = confs[i - f];
  }
  if ((s = gp_params_init(&pp, m, f, e, be, 1)) != GP_OK) goto done;
  if ((s = gp_pass_init(&p, m, f, e, x->mb)) != GP_OK) goto done;
  gp_rng r;
  gp_rng_seed(&r, 0x5eedULL + (uint64_t)u);
  for (int i = f; i < e && s == GP_OK; i++) {
    const gp_node *nd = &m->nodes[i];
    for (int j = 0; j < nd->n_in && s == GP_OK; j++) {
      int t = nd->in[j];
      if ((t >= m->n_inputs && t - m->n_inputs >= f) || ext[t].data) continue;
      gp_shape sh = gp_shape_batch(x->mb, &nd->layer.in_shape[j]);
      s = gp_arena_tensor(&keep, nd->layer.in_dtype[j], &sh, &ext[t]);
      if (s == GP_OK) s = fill_random(be, &ext[t], t == m->label_input, x->classes, &r);
    }
    int t = m->n_inputs + i;
    if (s == GP_OK && x->last[t] >= end_u && nd->layer.out_dtype == GP_F32) {
      gp_shape sh = gp_shape_batch(x->mb, &nd->layer.out_shape);
      s = gp_arena_tensor(&keep, GP_F32, &sh, &grads[t]);
      if (s == GP_OK) s = fill_random(be, &grads[t], 0, 1, &r);
    }
  }
  int runs = 0;
  double spent = 0;
  for (int it = 0; s == GP_OK; it++) {
    int timed = it >= WARMUPS;
    if (timed && runs >= MAX_RUNS) break;
    if (timed && runs >= MIN_RUNS && spent >= MIN_SECONDS) break;
    memset(p.val, 0, sizeof *p.val * (size_t)nt);
    memset(p.grad, 0, sizeof *p.grad * (size_t)nt);
    memset(p.saved, 0, sizeof *p.saved * (size_t)m->n_nodes);
    for (int t = 0; t < nt; t++)
      if (ext[t].data) p.val[t] = ext[t];
    gp_exec ex = {.be = be,
                  .arena = &work,
                  .training = 1,
                  .seed = 1,
                  .loss_count = x->mb,
                  .binds = pp.bind,
                  .bind_first = f};
    double t0 = now_s();
    if ((s = gp_pass_forward(&p, &ex)) != GP_OK || (s = be->sync(be)) != GP_OK) break;
    double t1 = now_s();
    /* fresh copies: backward adds into a gradient that a layer inside the unit also reads */
    for (int t = 0; t < nt && s == GP_OK; t++) {
      if (!grads[t].data) continue;
      s = gp_arena_tensor(&work, GP_F32, &grads[t].shape, &p.grad[t]);
      if (s == GP_OK) s = be->copy(be, p.grad[t].data, grads[t].data, gp_tensor_bytes(&grads[t]));
    }
    if (s != GP_OK) break;
    double t2 = now_s();
    if ((s = gp_pass_backward(&p, &ex)) != GP_OK || (s = be->sync(be)) != GP_OK) break;
    double t3 = now_s();
    if ((s = gp_arena_reset(&work)) != GP_OK) break;
    if (!timed) continue;
    tf[runs] = t1 - t0;
    tb[runs] = t3 - t2;
    spent += (t1 - t0) + (t3 - t2);
    runs++;
  }
  if (s == GP_OK) {
    *fwd = fmax(fastest(tf, runs), MIN_TIME);
    *bwd = fmax(fastest(tb, runs), MIN_TIME);
  } else {
    gp_error_prefix(s, "timing unit '%s': ", m->unit_names[u]);
  }
done:
  gp_pass_free(&p);
  gp_params_free(&pp);
  gp_arena_free(&work);
  gp_arena_free(&keep);
  /* the copied nodes back as the caller's (confs, parameter pointers): reused for other units */
  memcpy(&m->nodes[f], &x->orig->nodes[f], sizeof *m->nodes * (size_t)(e - f));
  if (confs)
    for (int i = 0; i < e - f; i++)
      free(confs[i]);
  free(confs);
  free(ext);
  free(grads);
  free(tf);
  free(tb);
  return s;
}

/* Every distinct unit is measured once: identical blocks (the repeats of a ResNet stage) share
 * a key, so they share a measurement, from the cache or from this run. */
static gp_status measure(const gp_model *m, int threads, const char *cache_dir, const int *last,
                         gp_unit_costs *c) {
  int n = m->n_units;
  uint64_t *key = malloc(sizeof *key * (size_t)n);
  timer_ctx x = {.orig = m, .mm = *m, .last = last, .mb = c->micro_batch, .classes = 1};
  x.mm.nodes = malloc(sizeof *m->nodes * (size_t)m->n_nodes);
  gp_status s = GP_OK;
  if (!key || !x.mm.nodes) {
    s = GP_ERR(GP_ERR_NOMEM, "out of host memory measuring unit times");
    goto done;
  }
  memcpy(x.mm.nodes, m->nodes, sizeof *m->nodes * (size_t)m->n_nodes);
  const gp_layer *loss = &m->nodes[m->n_nodes - 1].layer;
  if (loss->n_in > 0 && loss->in_shape[0].ndim > 0)
    x.classes = loss->in_shape[0].d[loss->in_shape[0].ndim - 1];
  if (x.classes < 1) x.classes = 1;
  if (cache_dir && (s = make_dir(cache_dir)) != GP_OK) goto done;
  for (int u = 0; u < n && s == GP_OK; u++) {
    key[u] = unit_key(m, u, last, c->micro_batch, threads);
    int same = -1;
    for (int v = 0; v < u && same < 0; v++)
      if (key[v] == key[u]) same = v;
    if (same >= 0) {
      c->fwd[u] = c->fwd[same];
      c->bwd[u] = c->bwd[same];
      c->scratch[u] = c->scratch[same];
      continue;
    }
    if (cache_dir && cache_read(cache_dir, key[u], &c->fwd[u], &c->bwd[u], &c->scratch[u]))
      continue;
    /* a backend of its own: the scratch it keeps after the unit's parameters and arenas are
     * freed is what the unit's layers took (it only grows) */
    if ((s = gp_cpu_backend_create(threads, &x.be)) != GP_OK) break;
    s = time_unit(&x, u, u + 1, &c->fwd[u], &c->bwd[u]);
    c->scratch[u] = (int64_t)x.be->mem_used;
    gp_backend_destroy(x.be);
    x.be = NULL;
    if (s != GP_OK) break;
    if (cache_dir)
      s = cache_write(cache_dir, key[u], m->unit_names[u], c->fwd[u], c->bwd[u], c->scratch[u]);
  }
done:
  gp_backend_destroy(x.be);
  free(x.mm.nodes);
  free(key);
  return s;
}

gp_status gp_units_time(const gp_model *m, int first_unit, int end_unit, int64_t micro_batch,
                        int threads, double *fwd, double *bwd) {
  if (!m || first_unit < 0 || end_unit > m->n_units || first_unit >= end_unit)
    return GP_ERR(GP_ERR_USAGE, "timing units: bad range [%d, %d)", first_unit, end_unit);
  if (micro_batch < 1 || micro_batch > MAX_MICRO_BATCH || threads < 1)
    return GP_ERR(GP_ERR_USAGE, "timing units: bad micro-batch or threads");
  int *last = malloc(sizeof(int) * (size_t)(m->n_inputs + m->n_nodes));
  timer_ctx x = {.orig = m, .mm = *m, .last = last, .mb = micro_batch, .classes = 1};
  x.mm.nodes = malloc(sizeof *m->nodes * (size_t)m->n_nodes);
  gp_status s = GP_OK;
  if (!last || !x.mm.nodes) s = GP_ERR(GP_ERR_NOMEM, "out of host memory timing units");
  if (s == GP_OK) {
    last_readers(m, last);
    memcpy(x.mm.nodes, m->nodes, sizeof *m->nodes * (size_t)m->n_nodes);
    const gp_layer *loss = &m->nodes[m->n_nodes - 1].layer;
    if (loss->n_in > 0 && loss->in_shape[0].ndim > 0)
      x.classes = loss->in_shape[0].d[loss->in_shape[0].ndim - 1];
    if (x.classes < 1) x.classes = 1;
    s = gp_cpu_backend_create(threads, &x.be);
  }
  if (s == GP_OK) s = time_unit(&x, first_unit, end_unit, fwd, bwd);
  gp_backend_destroy(x.be);
  free(x.mm.nodes);
  free(last);
  return s;
}

int gp_unit_costs_unmeasured(const gp_model *m, int64_t micro_batch, int threads,
                             const char *cache_dir) {
  int n = m->n_units, missing = 0;
  int *last = malloc(sizeof(int) * (size_t)(m->n_inputs + m->n_nodes));
  uint64_t *key = malloc(sizeof *key * (size_t)(n > 0 ? n : 1));
  if (!last || !key) {
    free(last);
    free(key);
    return n;
  }
  last_readers(m, last);
  for (int u = 0; u < n; u++) {
    key[u] = unit_key(m, u, last, micro_batch, threads);
    int same = 0;
    for (int v = 0; v < u && !same; v++)
      same = key[v] == key[u];
    double f, b;
    int64_t w;
    if (!same && !(cache_dir && cache_read(cache_dir, key[u], &f, &b, &w))) missing++;
  }
  free(last);
  free(key);
  return missing;
}

gp_status gp_unit_costs_compute(const gp_model *m, int64_t micro_batch, gp_cost_by by, int threads,
                                const char *cache_dir, gp_unit_costs *out) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "unit costs: no output given");
  memset(out, 0, sizeof *out);
  if (!m || m->n_units < 1 || m->n_nodes < 1)
    return GP_ERR(GP_ERR_USAGE, "unit costs: the model has no units");
  if (micro_batch < 1 || micro_batch > MAX_MICRO_BATCH)
    return GP_ERR(GP_ERR_USAGE,
                  "unit costs: the micro-batch must be in 1..%" PRId64 ", got %" PRId64,
                  MAX_MICRO_BATCH, micro_batch);
  if (by != GP_COST_FLOPS && by != GP_COST_PARAMS && by != GP_COST_TIME)
    return GP_ERR(GP_ERR_USAGE, "unit costs: unknown cost basis %d", (int)by);
  if (by == GP_COST_TIME && threads < 1)
    return GP_ERR(GP_ERR_USAGE, "unit costs: timing needs at least 1 thread, got %d", threads);
  int n = m->n_units;
  size_t un = (size_t)n;
  out->n = n;
  out->micro_batch = micro_batch;
  out->by = by;
  out->fwd = calloc(un, sizeof(double));
  out->bwd = calloc(un, sizeof(double));
  out->fwd_flops = calloc(un, sizeof(double));
  out->bwd_flops = calloc(un, sizeof(double));
  out->params = calloc(un, sizeof(int64_t));
  out->act_bytes = calloc(un, sizeof(int64_t));
  out->out_bytes = calloc(un, sizeof(int64_t));
  out->grad_bytes = calloc(un, sizeof(int64_t));
  out->wkeep_bytes = calloc(un, sizeof(int64_t));
  out->cut_bytes = calloc(un + 1, sizeof(int64_t));
  out->cheap_bytes = calloc(un, sizeof(int64_t));
  out->cheap_share = calloc(un, sizeof(double));
  unsigned char *flag = calloc((size_t)m->n_nodes + 1, 1);
  int *last = malloc(sizeof(int) * (size_t)(m->n_inputs + m->n_nodes));
  int *reader = malloc(sizeof(int) * (size_t)(m->n_inputs + m->n_nodes));
  gp_status s = GP_OK;
  if (!out->fwd || !out->bwd || !out->fwd_flops || !out->bwd_flops || !out->params ||
      !out->act_bytes || !out->out_bytes || !out->grad_bytes || !out->wkeep_bytes ||
      !out->cut_bytes || !last || !reader || !out->cheap_bytes || !out->cheap_share || !flag) {
    s = GP_ERR(GP_ERR_NOMEM, "out of host memory for the costs of %d units", n);
    goto done;
  }
  last_readers(m, last);
  gp_model_readers(m, reader);
  analytic(m, micro_batch, last, reader, flag, out);
  for (int u = 0; u < n; u++) {
    out->fwd[u] = by == GP_COST_FLOPS ? out->fwd_flops[u] : (double)out->params[u];
    out->bwd[u] = by == GP_COST_FLOPS ? out->bwd_flops[u] : 0.0;
  }
  if (by == GP_COST_TIME && !(out->scratch = calloc(un, sizeof(int64_t))))
    s = GP_ERR(GP_ERR_NOMEM, "out of host memory for the costs of %d units", n);
  if (s == GP_OK && by == GP_COST_TIME) s = measure(m, threads, cache_dir, last, out);
done:
  free(last);
  free(reader);
  free(flag);
  if (s != GP_OK) gp_unit_costs_free(out);
  return s;
}

gp_status gp_unit_costs_bf16_store(const gp_model *m, gp_unit_costs *c) {
  int nt = m->n_inputs + m->n_nodes;
  int *last = malloc(sizeof(int) * (size_t)nt), *reader = malloc(sizeof(int) * (size_t)nt);
  int *sent = malloc(sizeof(int) * (size_t)(m->n_nodes + 1));
  unsigned char *pack = calloc((size_t)m->n_nodes + 1, 1),
                *cheap = calloc((size_t)m->n_nodes + 1, 1);
  if (!last || !reader || !sent || !pack || !cheap) {
    free(last), free(reader), free(sent), free(pack), free(cheap);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for the costs of %d units", m->n_units);
  }
  last_readers(m, last);
  gp_model_readers(m, reader);
  for (int u = 0; u < m->n_units; u++) {
    int first = m->unit_first[u], end = m->unit_first[u + 1], n_sent = 0;
    for (int i = first; i < end; i++) /* a cut after this unit would hand these on, in f32 */
      if (last[m->n_inputs + i] > u) sent[n_sent++] = m->n_inputs + i;
    int64_t saved = gp_bfstore_set(m, reader, first, end, sent, n_sent, pack);
    gp_stage_remat_set(m, reader, first, end, cheap, NULL);
    int64_t cheap_saved = 0; /* a cheap layer's output dropped is then half as much */
    for (int i = first; i < end; i++)
      if (pack[i] && cheap[i] && !gp_node_in_place(m, reader, i, first))
        cheap_saved += gp_shape_numel(&m->nodes[i].layer.out_shape) * 2;
    c->act_bytes[u] -= saved * c->micro_batch;
    if (c->cheap_bytes) c->cheap_bytes[u] -= cheap_saved * c->micro_batch;
  }
  free(last), free(reader), free(sent), free(pack), free(cheap);
  return GP_OK;
}
