/* The one-layer test bench: see harness.h. Buffers carry guard bytes so a layer that writes
 * past its output, gradient or parameter is caught at the next lt_layer_guards. */
#include "tests/layers/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

#define GUARD_BYTES 256
#define GUARD_BYTE 0xA5

struct lt_buf {
  lt_buf *next;
  void *p;
  size_t bytes;
  char name[48];
};

static gp_status buf_alloc(lt_layer *t, size_t bytes, const char *name, void **out) {
  lt_buf *b = calloc(1, sizeof *b);
  if (!b) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  gp_status s = t->be->alloc(t->be, bytes + GUARD_BYTES, &b->p);
  if (s != GP_OK) {
    free(b);
    return s;
  }
  /* The CPU backend hands out host memory, so the bench may fill and check it directly. */
  memset(b->p, 0, bytes);
  memset((char *)b->p + bytes, GUARD_BYTE, GUARD_BYTES);
  b->bytes = bytes;
  snprintf(b->name, sizeof b->name, "%s", name);
  b->next = t->bufs;
  t->bufs = b;
  *out = b->p;
  return GP_OK;
}

gp_status lt_layer_guards(lt_layer *t) {
  for (lt_buf *b = t->bufs; b; b = b->next) {
    const unsigned char *g = (const unsigned char *)b->p + b->bytes;
    for (int i = 0; i < GUARD_BYTES; i++)
      if (g[i] != GUARD_BYTE)
        return GP_ERR(GP_ERR_RUNTIME, "%s: written past its end (%zu bytes, byte +%d changed)",
                      b->name, b->bytes, i);
  }
  return GP_OK;
}

static int quiet;

void lt_set_quiet(int q) {
  quiet = q;
}

gp_status lt_layer_configure_as(lt_layer *t, const gp_layer_type *type, const char *yaml, int n_in,
                                const gp_shape *in_shapes, const gp_dtype *in_dtypes) {
  static const char *const structural[] = {"type", NULL};
  memset(t, 0, sizeof *t);
  GP_TRY(gp_cfg_parse(yaml, "test.yaml", &t->cfg));
  const char *tname = NULL;
  GP_TRY(gp_cfg_str(t->cfg, "type", NULL, &tname));
  if (!tname) return gp_cfg_error(t->cfg, NULL, "missing required key 'type'");
  if (!type) type = gp_layer_type_find(tname);
  if (!type) return GP_ERR(GP_ERR_UNSUPPORTED, "layer type '%s' is not registered", tname);
  gp_layer *l = &t->l;
  l->type = type;
  l->path = malloc(8);
  l->conf = calloc(1, type->conf_size ? type->conf_size : 1);
  if (!l->path || !l->conf) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  memcpy(l->path, "layer", 6);
  GP_TRY(type->configure(l, t->cfg));
  GP_TRY(gp_cfg_check_unknown(t->cfg, tname, structural));
  if (n_in < type->min_inputs || n_in > type->max_inputs)
    return GP_ERR(GP_ERR_SPEC, "%s takes %d..%d inputs, got %d", tname, type->min_inputs,
                  type->max_inputs, n_in);
  l->n_in = n_in;
  for (int i = 0; i < n_in; i++) {
    l->in_shape[i] = in_shapes[i];
    l->in_dtype[i] = in_dtypes ? in_dtypes[i] : GP_F32;
  }
  l->out_dtype = GP_F32;
  return type->shape(l);
}

gp_status lt_layer_configure(lt_layer *t, const char *yaml, int n_in, const gp_shape *in_shapes,
                             const gp_dtype *in_dtypes) {
  return lt_layer_configure_as(t, NULL, yaml, n_in, in_shapes, in_dtypes);
}

gp_status lt_layer_alloc(lt_layer *t, gp_backend *be, int64_t batch) {
  gp_layer *l = &t->l;
  char name[48];
  t->be = be;
  t->batch = batch;
  gp_arena_init(&t->arena, be, 0);
  memset(&t->b, 0, sizeof t->b);
  for (int i = 0; i < l->n_params; i++) {
    const gp_param_desc *p = &l->pdesc[i];
    size_t bytes = (size_t)gp_shape_numel(&p->shape) * sizeof(float);
    snprintf(name, sizeof name, "param %s", p->name);
    GP_TRY(buf_alloc(t, bytes, name, (void **)&t->b.param[i]));
    gp_param_init_host(l, i, 1, t->b.param[i]);
    t->b.grad[i] = NULL;
    if (p->trainable) {
      snprintf(name, sizeof name, "grad %s", p->name);
      GP_TRY(buf_alloc(t, bytes, name, (void **)&t->b.grad[i]));
    }
  }
  if (l->type->stats_floats) {
    int64_t n = l->type->stats_floats(l);
    if (n > 0) GP_TRY(buf_alloc(t, (size_t)n * sizeof(float), "stats", (void **)&t->b.stats));
  }
  for (int i = 0; i < l->n_in; i++) {
    gp_shape s = gp_shape_batch(batch, &l->in_shape[i]);
    t->in[i] = (gp_tensor){NULL, s, l->in_dtype[i], be->device};
    t->din[i] = (gp_tensor){NULL, s, l->in_dtype[i], be->device};
    snprintf(name, sizeof name, "input %d", i);
    GP_TRY(buf_alloc(t, gp_tensor_bytes(&t->in[i]), name, &t->in[i].data));
    if (l->in_dtype[i] == GP_F32) {
      snprintf(name, sizeof name, "din %d", i);
      GP_TRY(buf_alloc(t, gp_tensor_bytes(&t->din[i]), name, &t->din[i].data));
    }
  }
  gp_shape os = gp_shape_batch(batch, &l->out_shape);
  t->out = (gp_tensor){NULL, os, l->out_dtype, be->device};
  t->dout = (gp_tensor){NULL, os, l->out_dtype, be->device};
  GP_TRY(buf_alloc(t, gp_tensor_bytes(&t->out), "output", &t->out.data));
  GP_TRY(buf_alloc(t, gp_tensor_bytes(&t->dout), "dout", &t->dout.data));
  t->e = (gp_exec){.be = be,
                   .arena = &t->arena,
                   .training = 1,
                   .seed = 1234,
                   .loss_count = batch,
                   .bind = &t->b};
  return GP_OK;
}

gp_status lt_layer_build_as(lt_layer *t, const gp_layer_type *type, gp_backend *be,
                            const char *yaml, int n_in, const gp_shape *in_shapes,
                            const gp_dtype *in_dtypes, int64_t batch) {
  GP_TRY(lt_layer_configure_as(t, type, yaml, n_in, in_shapes, in_dtypes));
  return lt_layer_alloc(t, be, batch);
}

gp_status lt_layer_build(lt_layer *t, gp_backend *be, const char *yaml, int n_in,
                         const gp_shape *in_shapes, const gp_dtype *in_dtypes, int64_t batch) {
  return lt_layer_build_as(t, NULL, be, yaml, n_in, in_shapes, in_dtypes, batch);
}

void lt_layer_free(lt_layer *t) {
  if (t->be) gp_arena_free(&t->arena);
  while (t->bufs && t->be) { /* buffers exist only once a backend was given */
    lt_buf *b = t->bufs;
    t->bufs = b->next;
    t->be->free(t->be, b->p);
    free(b);
  }
  gp_cfg_free(t->cfg);
  free(t->l.conf);
  free(t->l.path);
  memset(t, 0, sizeof *t);
}

gp_status lt_forward(lt_layer *t) {
  GP_TRY(gp_arena_reset(&t->arena));
  t->e.loss_sum = 0;
  t->e.correct = t->e.counted = 0;
  t->saved = NULL;
  GP_TRY(t->l.type->forward(&t->l, &t->e, t->in, &t->out, &t->saved));
  return lt_layer_guards(t);
}

gp_status lt_backward(lt_layer *t) {
  GP_TRY(t->l.type->backward(&t->l, &t->e, t->in, &t->out, &t->dout, t->din, t->saved));
  return lt_layer_guards(t);
}

gp_status lt_backward_part(lt_layer *t, gp_grad_part part) {
  GP_TRY(gp_layer_backward_part(&t->l, &t->e, part, t->in, &t->out, &t->dout, t->din, t->saved));
  return lt_layer_guards(t);
}

int lt_param_index(const lt_layer *t, const char *name) {
  for (int i = 0; i < t->l.n_params; i++)
    if (strcmp(t->l.pdesc[i].name, name) == 0) return i;
  return -1;
}

int64_t lt_param_numel(const lt_layer *t, int i) {
  return gp_shape_numel(&t->l.pdesc[i].shape);
}

/* ---- comparisons ---- */

int lt_compare(const char *what, const float *got, const double *want, int64_t n, lt_tol_id tol,
               double *max_err) {
  const lt_tol *tt = lt_tol_get(tol);
  double worst = 0, worst_excess = 0;
  int64_t wi = -1, bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    double err = fabs(g - w);
    double lim = tt->atol + tt->rtol * fmax(fabs(g), fabs(w));
    if (isnan(err)) err = INFINITY; /* a NaN on either side never passes */
    if (err > worst) worst = err;
    if (err > lim) {
      bad++;
      if (err - lim > worst_excess || wi < 0) {
        worst_excess = err - lim;
        wi = i;
      }
    }
  }
  if (max_err) *max_err = worst;
  if (bad && !quiet)
    printf("  FAIL %s: %lld of %lld values outside %s (atol %g, rtol %g); max err %.3g; worst "
           "at %lld: got %.7g, want %.7g\n",
           what, (long long)bad, (long long)n, tt->name, tt->atol, tt->rtol, worst, (long long)wi,
           (double)got[wi], want[wi]);
  return bad == 0;
}

int lt_compare_f(const char *what, const float *got, const float *want, int64_t n, lt_tol_id tol,
                 double *max_err) {
  double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
  if (!w) {
    printf("  FAIL %s: out of memory\n", what);
    return 0;
  }
  for (int64_t i = 0; i < n; i++)
    w[i] = want[i];
  int ok = lt_compare(what, got, w, n, tol, max_err);
  free(w);
  return ok;
}

/* ---- random data ---- */

void lt_fill_uniform(uint64_t seed, float *x, int64_t n, float lo, float hi) {
  gp_rng r;
  gp_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++)
    x[i] = lo + (hi - lo) * gp_rng_uniform(&r);
}

void lt_fill_away_from_zero(uint64_t seed, float *x, int64_t n, float margin, float hi) {
  gp_rng r;
  gp_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) {
    float m = margin + (hi - margin) * gp_rng_uniform(&r);
    x[i] = gp_rng_uniform(&r) < 0.5f ? -m : m;
  }
}

void lt_fill_distinct(uint64_t seed, float *x, int64_t n, float gap) {
  gp_rng r;
  gp_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++)
    x[i] = ((float)i - 0.5f * (float)n) * gap;
  for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
    int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1);
    float v = x[i];
    x[i] = x[j];
    x[j] = v;
  }
}

int lt_build_or_report(lt_layer *t, gp_backend *be, const char *yaml, int n_in,
                       const gp_shape *in_shapes, const gp_dtype *in_dtypes, int64_t batch) {
  gp_status st = lt_layer_build(t, be, yaml, n_in, in_shapes, in_dtypes, batch);
  if (st == GP_OK) return 1;
  printf("  FAIL build %s: %s\n", yaml, gp_error_message());
  lt_layer_free(t);
  return 0;
}

void lt_tally(int ok, const char *what, int *passed, int *failed) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok)
    ++*passed;
  else
    ++*failed;
}
