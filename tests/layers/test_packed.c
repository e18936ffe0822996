/* Packed rows (several sentences per row, as Lingvo's packed inputs and T5): attention with
 * mask: segments and positional with explicit positions give every real token of a packed
 * row the output and the input gradients it gets when its sentence runs alone, and the
 * parameter gradients of the packed rows are those of the lone sentences summed. Two
 * references: each sentence alone in a row of exactly its length with no mask at all (which
 * shares no masking code with the packed run), and each sentence in its own padded row with
 * segment ids 1 on its tokens and 0 on the padding. Padding tokens output out_proj.bias
 * (finite) and get no gradient. Then the errors: bad input ranks and dtypes for
 * mask: segments, negative segment ids, positions outside [0, max_len).
 * Usage: test_layers_packed */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/layers/harness.h"

enum { D = 6, H = 2, MAXS = 8 };

static int passed, failed;

static void tally(int ok, const char *what) {
  lt_tally(ok, what, &passed, &failed);
}

/* Expects status s == code with every needle (NULL-terminated) in the message. */
static int expect_error(gp_status s, gp_status code, const char *const *needles) {
  const char *msg = gp_error_message();
  int ok = s == code;
  for (int i = 0; needles[i]; i++)
    ok = ok && strstr(msg, needles[i]) != NULL;
  if (!ok) printf("  got %s: '%s'\n", gp_status_name(s), msg);
  return ok;
}

static int all_finite(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

/* A sentence of a packed row: tokens [start, start + len) of row `row`, segment id seg. */
typedef struct sent {
  int row, start, len, seg;
} sent;

/* n sentences; for cross-attention q[i] (targets) attends k[i] (sources), same row and id. */
typedef struct packing {
  int64_t rows, tq, tk;
  int n;
  sent q[MAXS], k[MAXS];
} packing;

/* Segment ids (0 on padding) and positions within each sentence (0 on padding) of [rows, t]. */
static void pack_ids(const sent *s, int n, int64_t t, int64_t rows, int32_t *seg, int32_t *pos) {
  memset(seg, 0, (size_t)(rows * t) * sizeof *seg);
  if (pos) memset(pos, 0, (size_t)(rows * t) * sizeof *pos);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < s[i].len; j++) {
      int64_t at = s[i].row * t + s[i].start + j;
      seg[at] = s[i].seg;
      if (pos) pos[at] = j;
    }
}

/* Copies len rows of width w between a packed tensor [.., t, w] and a lone one. */
static void rows_copy(float *dst, const float *src, int64_t len, int64_t w) {
  memcpy(dst, src, (size_t)(len * w) * sizeof *dst);
}

static float *row_at(const gp_tensor *x, const sent *s, int64_t t, int64_t w) {
  return GP_F32P(x) + (s->row * t + s->start) * w;
}

/* What a run should give, laid out like the packed tensors. */
typedef struct want {
  double *out, *dx, *dm; /* dm: the memory's gradient (cross) */
  double *g[GP_MAX_PARAMS];
} want;

static void want_free(want *w) {
  free(w->out);
  free(w->dx);
  free(w->dm);
  for (int i = 0; i < GP_MAX_PARAMS; i++)
    free(w->g[i]);
  memset(w, 0, sizeof *w);
}

static void want_alloc(want *w, const lt_layer *p, int cross) {
  memset(w, 0, sizeof *w);
  w->out = calloc((size_t)gp_shape_numel(&p->out.shape), sizeof(double));
  w->dx = calloc((size_t)gp_shape_numel(&p->in[0].shape), sizeof(double));
  if (cross) w->dm = calloc((size_t)gp_shape_numel(&p->in[1].shape), sizeof(double));
  for (int i = 0; i < p->l.n_params; i++)
    if (p->b.grad[i]) w->g[i] = calloc((size_t)lt_param_numel(p, i), sizeof(double));
}

static void add_rows(double *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dst[i] += src[i];
}

/* Padding queries output out_proj.bias (their context is 0); padding tokens get dx = 0. The
 * want arrays start at 0, so only the bias is written. */
static void want_padding(want *w, const lt_layer *p, const packing *pk) {
  int ob = lt_param_index(p, "out_proj.bias");
  int32_t *seg = malloc((size_t)(pk->rows * pk->tq) * sizeof *seg);
  pack_ids(pk->q, pk->n, pk->tq, pk->rows, seg, NULL);
  for (int64_t i = 0; i < pk->rows * pk->tq; i++)
    if (!seg[i] && ob >= 0)
      for (int j = 0; j < D; j++)
        w->out[i * D + j] = p->b.param[ob][j];
  free(seg);
}

static void copy_params(lt_layer *dst, const lt_layer *src) {
  for (int i = 0; i < src->l.n_params; i++)
    memcpy(dst->b.param[i], src->b.param[i], (size_t)lt_param_numel(src, i) * sizeof(float));
}

/* Compares the packed run with the wanted values: every token's output and input gradients,
 * every parameter gradient. */
static int compare_run(const lt_layer *p, const want *w, int cross, const char *what,
                       double *worst) {
  char buf[256];
  int ok = 1;
  double e;
  *worst = 0;
  snprintf(buf, sizeof buf, "%s: output", what);
  ok &= lt_compare(buf, GP_F32P(&p->out), w->out, gp_shape_numel(&p->out.shape), LT_TOL_MICRO, &e);
  *worst = fmax(*worst, e);
  snprintf(buf, sizeof buf, "%s: dx", what);
  ok &= lt_compare(buf, GP_F32P(&p->din[0]), w->dx, gp_shape_numel(&p->din[0].shape), LT_TOL_MICRO,
                   &e);
  *worst = fmax(*worst, e);
  if (cross) {
    snprintf(buf, sizeof buf, "%s: d(memory)", what);
    ok &= lt_compare(buf, GP_F32P(&p->din[1]), w->dm, gp_shape_numel(&p->din[1].shape),
                     LT_TOL_MICRO, &e);
    *worst = fmax(*worst, e);
  }
  for (int i = 0; i < p->l.n_params; i++) {
    if (!w->g[i]) continue;
    snprintf(buf, sizeof buf, "%s: grad.%s", what, p->l.pdesc[i].name);
    ok &= lt_compare(buf, p->b.grad[i], w->g[i], lt_param_numel(p, i), LT_TOL_MICRO, &e);
    *worst = fmax(*worst, e);
  }
  return ok;
}

/* Reference 1: each sentence (pair) alone, in a row of exactly its length, with no mask. */
static int lone_unpadded(gp_backend *be, const lt_layer *p, const packing *pk, int cross,
                         const char *opts, want *w) {
  char yaml[160];
  snprintf(yaml, sizeof yaml, "{type: attention, heads: %d%s}", H, opts);
  for (int i = 0; i < pk->n; i++) {
    const sent *q = &pk->q[i], *k = &pk->k[i];
    gp_shape s[2] = {{2, {q->len, D}}, {2, {k->len, D}}};
    lt_layer t;
    if (!lt_build_or_report(&t, be, yaml, cross ? 2 : 1, s, NULL, 1)) return 0;
    copy_params(&t, p);
    rows_copy(GP_F32P(&t.in[0]), row_at(&p->in[0], q, pk->tq, D), q->len, D);
    if (cross) rows_copy(GP_F32P(&t.in[1]), row_at(&p->in[1], k, pk->tk, D), k->len, D);
    rows_copy(GP_F32P(&t.dout), row_at(&p->dout, q, pk->tq, D), q->len, D);
    if (lt_forward(&t) != GP_OK || lt_backward(&t) != GP_OK) {
      printf("  FAIL lone sentence %d: %s\n", i, gp_error_message());
      lt_layer_free(&t);
      return 0;
    }
    int64_t qo = (q->row * pk->tq + q->start) * D, ko = (k->row * pk->tk + k->start) * D;
    add_rows(w->out + qo, GP_F32P(&t.out), q->len * D);
    add_rows(w->dx + qo, GP_F32P(&t.din[0]), q->len * D);
    if (cross) add_rows(w->dm + ko, GP_F32P(&t.din[1]), k->len * D);
    for (int j = 0; j < t.l.n_params; j++)
      if (w->g[j]) add_rows(w->g[j], t.b.grad[j], lt_param_numel(&t, j));
    lt_layer_free(&t);
  }
  return 1;
}

/* Reference 2: sentence (pair) i alone in row i, padded to the packed length, segment id 1 on
 * its tokens and 0 on the padding (whose inputs are noise). */
static int lone_padded(gp_backend *be, const lt_layer *p, const packing *pk, int cross,
                       const char *opts, want *w) {
  char yaml[160];
  snprintf(yaml, sizeof yaml, "{type: attention, heads: %d, mask: segments%s}", H, opts);
  gp_shape s[4] = {{2, {pk->tq, D}}, {2, {pk->tk, D}}, {1, {pk->tq}}, {1, {pk->tk}}};
  gp_dtype dt[4] = {GP_F32, GP_F32, GP_I32, GP_I32};
  if (!cross) {
    s[1] = s[2];
    dt[1] = GP_I32;
  }
  lt_layer t;
  if (!lt_build_or_report(&t, be, yaml, cross ? 4 : 2, s, dt, pk->n)) return 0;
  copy_params(&t, p);
  lt_fill_uniform(91, GP_F32P(&t.in[0]), gp_shape_numel(&t.in[0].shape), -3.0f, 3.0f);
  if (cross) lt_fill_uniform(92, GP_F32P(&t.in[1]), gp_shape_numel(&t.in[1].shape), -3.0f, 3.0f);
  memset(t.dout.data, 0, gp_tensor_bytes(&t.dout));
  sent lq[MAXS], lk[MAXS];
  for (int i = 0; i < pk->n; i++) {
    lq[i] = (sent){i, 0, pk->q[i].len, 1};
    lk[i] = (sent){i, 0, pk->k[i].len, 1};
    rows_copy(row_at(&t.in[0], &lq[i], pk->tq, D), row_at(&p->in[0], &pk->q[i], pk->tq, D),
              lq[i].len, D);
    if (cross)
      rows_copy(row_at(&t.in[1], &lk[i], pk->tk, D), row_at(&p->in[1], &pk->k[i], pk->tk, D),
                lk[i].len, D);
    rows_copy(row_at(&t.dout, &lq[i], pk->tq, D), row_at(&p->dout, &pk->q[i], pk->tq, D), lq[i].len,
              D);
  }
  pack_ids(lq, pk->n, pk->tq, pk->n, GP_I32P(&t.in[cross ? 2 : 1]), NULL);
  if (cross) pack_ids(lk, pk->n, pk->tk, pk->n, GP_I32P(&t.in[3]), NULL);
  int ok = lt_forward(&t) == GP_OK && lt_backward(&t) == GP_OK;
  if (!ok) printf("  FAIL one sentence per row: %s\n", gp_error_message());
  ok = ok && all_finite(GP_F32P(&t.out), gp_shape_numel(&t.out.shape));
  for (int i = 0; ok && i < pk->n; i++) {
    const sent *q = &pk->q[i], *k = &pk->k[i];
    int64_t qo = (q->row * pk->tq + q->start) * D, ko = (k->row * pk->tk + k->start) * D;
    add_rows(w->out + qo, row_at(&t.out, &lq[i], pk->tq, D), q->len * D);
    add_rows(w->dx + qo, row_at(&t.din[0], &lq[i], pk->tq, D), q->len * D);
    if (cross) add_rows(w->dm + ko, row_at(&t.din[1], &lk[i], pk->tk, D), k->len * D);
  }
  for (int j = 0; ok && j < t.l.n_params; j++)
    if (w->g[j]) add_rows(w->g[j], t.b.grad[j], lt_param_numel(&t, j));
  lt_layer_free(&t);
  return ok;
}

/* The packed rows against both references. opts: extra YAML settings (", causal: true"). */
static void attention_packed(gp_backend *be, const packing *pk, int cross, const char *opts,
                             const char *what) {
  char yaml[160], buf[200];
  snprintf(yaml, sizeof yaml, "{type: attention, heads: %d, mask: segments%s}", H, opts);
  gp_shape s[4] = {{2, {pk->tq, D}}, {2, {pk->tk, D}}, {1, {pk->tq}}, {1, {pk->tk}}};
  gp_dtype dt[4] = {GP_F32, GP_F32, GP_I32, GP_I32};
  if (!cross) {
    s[1] = s[2];
    dt[1] = GP_I32;
  }
  lt_layer p;
  if (!lt_build_or_report(&p, be, yaml, cross ? 4 : 2, s, dt, pk->rows)) {
    tally(0, what);
    return;
  }
  /* Weights larger than the default init: attention far from uniform, so a key let through
   * or left out changes the numbers. */
  for (int i = 0; i < p.l.n_params; i++)
    lt_fill_uniform(70 + (uint64_t)i, p.b.param[i], lt_param_numel(&p, i), -0.8f, 0.8f);
  lt_fill_uniform(81, GP_F32P(&p.in[0]), gp_shape_numel(&p.in[0].shape), -1.5f, 1.5f);
  if (cross) lt_fill_uniform(82, GP_F32P(&p.in[1]), gp_shape_numel(&p.in[1].shape), -1.5f, 1.5f);
  pack_ids(pk->q, pk->n, pk->tq, pk->rows, GP_I32P(&p.in[cross ? 2 : 1]), NULL);
  if (cross) pack_ids(pk->k, pk->n, pk->tk, pk->rows, GP_I32P(&p.in[3]), NULL);
  /* dout: noise on real queries, 0 on padding (a loss ignores it) */
  const int32_t *qseg = GP_I32P(&p.in[cross ? 2 : 1]);
  lt_fill_uniform(83, GP_F32P(&p.dout), gp_shape_numel(&p.dout.shape), -1.0f, 1.0f);
  for (int64_t i = 0; i < pk->rows * pk->tq; i++)
    if (!qseg[i])
      for (int j = 0; j < D; j++)
        GP_F32P(&p.dout)[i * D + j] = 0.0f;
  int ok = lt_forward(&p) == GP_OK && lt_backward(&p) == GP_OK;
  if (!ok) printf("  FAIL packed run: %s\n", gp_error_message());
  snprintf(buf, sizeof buf, "%s: every output finite (padding included)", what);
  tally(ok && all_finite(GP_F32P(&p.out), gp_shape_numel(&p.out.shape)), buf);

  for (int ref = 0; ok && ref < 2; ref++) {
    want w;
    want_alloc(&w, &p, cross);
    want_padding(&w, &p, pk);
    int r = ref == 0 ? lone_unpadded(be, &p, pk, cross, opts, &w)
                     : lone_padded(be, &p, pk, cross, opts, &w);
    snprintf(buf, sizeof buf, "%s vs each %s", what,
             ref == 0 ? "sentence alone (unpadded, no mask)"
                      : "sentence in its own padded row (segment 1, padding 0)");
    double worst = 0;
    r = r && compare_run(&p, &w, cross, buf, &worst);
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " (max error %.2g)", worst);
    tally(r, buf);
    want_free(&w);
  }
  lt_layer_free(&p);
}

static void attention_cases(gp_backend *be) {
  /* self: row 0 holds sentences of 3 and 4 tokens and a pad; row 1 three sentences and a
   * pad, its ids 3, 1, 2 (only equality counts, not order) */
  const packing self = {2,
                        8,
                        8,
                        5,
                        {{0, 0, 3, 1}, {0, 3, 4, 2}, {1, 0, 2, 3}, {1, 2, 2, 1}, {1, 4, 3, 2}},
                        {{0, 0, 3, 1}, {0, 3, 4, 2}, {1, 0, 2, 3}, {1, 2, 2, 1}, {1, 4, 3, 2}}};
  attention_packed(be, &self, 0, "", "self-attention, packed");
  attention_packed(be, &self, 0, ", causal: true", "causal self-attention, packed");
  /* cross: 2 target sentences per query row with 2 source sentences per key row; in row 1
   * the keys hold the sources in the other order */
  const packing cross = {2,
                         7,
                         8,
                         4,
                         {{0, 0, 3, 1}, {0, 3, 2, 2}, {1, 0, 4, 1}, {1, 4, 3, 2}},
                         {{0, 0, 4, 1}, {0, 4, 3, 2}, {1, 2, 5, 1}, {1, 0, 2, 2}}};
  attention_packed(be, &cross, 1, "", "cross-attention, packed queries and keys");
  attention_packed(be, &cross, 1, ", bias: false", "cross-attention without bias, packed");
}

/* ---- positional ---- */

static void positional_packed(gp_backend *be, int learned) {
  enum { T = 9, PD = 5, MAXLEN = 8 }; /* T > max_len: fine with explicit positions */
  const sent ss[4] = {{0, 0, 4, 1}, {0, 4, 3, 2}, {1, 0, 5, 1}, {1, 5, 4, 2}};
  const char *what = learned ? "positional learned, packed" : "positional sinusoidal, packed";
  char yaml[96], buf[200];
  snprintf(yaml, sizeof yaml, "{type: positional, max_len: %d%s}", MAXLEN,
           learned ? ", kind: learned" : "");
  gp_shape s[2] = {{2, {T, PD}}, {1, {T}}};
  gp_dtype dt[2] = {GP_F32, GP_I32};
  lt_layer p;
  if (!lt_build_or_report(&p, be, yaml, 2, s, dt, 2)) {
    tally(0, what);
    return;
  }
  int32_t seg[2 * T];
  pack_ids(ss, 4, T, 2, seg, GP_I32P(&p.in[1]));
  lt_fill_uniform(11, GP_F32P(&p.in[0]), 2 * T * PD, -1.0f, 1.0f);
  lt_fill_uniform(12, GP_F32P(&p.dout), 2 * T * PD, -1.0f, 1.0f);
  for (int i = 0; i < 2 * T; i++)
    if (!seg[i])
      for (int j = 0; j < PD; j++)
        GP_F32P(&p.dout)[i * PD + j] = 0.0f;
  if (learned) lt_fill_uniform(13, p.b.param[0], MAXLEN * PD, -1.0f, 1.0f);
  int ok = lt_forward(&p) == GP_OK && lt_backward(&p) == GP_OK;
  if (!ok) printf("  FAIL packed run: %s\n", gp_error_message());
  ok = ok && all_finite(GP_F32P(&p.out), 2 * T * PD);

  /* Each sentence alone, without positions: y = x + P[:len]. Outputs and dx are the same
   * float sums, so they must agree exactly; the weight gradient sums in another order. */
  snprintf(yaml, sizeof yaml, "{type: positional, max_len: %d%s}", MAXLEN,
           learned ? ", kind: learned" : "");
  double out[2 * T * PD], dx[2 * T * PD], g[MAXLEN * PD];
  memset(g, 0, sizeof g);
  for (int i = 0; i < 2 * T * PD; i++) { /* padding: x[t] + P[0], dx = dout = 0 */
    out[i] = (double)(GP_F32P(&p.in[0])[i] + p.b.param[0][i % PD]);
    dx[i] = 0.0;
  }
  for (int k = 0; ok && k < 4; k++) {
    gp_shape ls = {2, {ss[k].len, PD}};
    lt_layer t;
    if (!lt_build_or_report(&t, be, yaml, 1, &ls, NULL, 1)) {
      ok = 0;
      break;
    }
    copy_params(&t, &p);
    rows_copy(GP_F32P(&t.in[0]), row_at(&p.in[0], &ss[k], T, PD), ss[k].len, PD);
    rows_copy(GP_F32P(&t.dout), row_at(&p.dout, &ss[k], T, PD), ss[k].len, PD);
    ok = lt_forward(&t) == GP_OK && lt_backward(&t) == GP_OK;
    int64_t o = (ss[k].row * T + ss[k].start) * PD;
    for (int i = 0; ok && i < ss[k].len * PD; i++) {
      out[o + i] = GP_F32P(&t.out)[i];
      dx[o + i] = GP_F32P(&t.din[0])[i];
    }
    if (learned)
      for (int i = 0; ok && i < MAXLEN * PD; i++)
        g[i] += t.b.grad[0][i];
    lt_layer_free(&t);
  }
  if (ok) {
    snprintf(buf, sizeof buf, "%s: output", what);
    ok &= lt_compare(buf, GP_F32P(&p.out), out, 2 * T * PD, LT_TOL_EXACT, NULL);
    snprintf(buf, sizeof buf, "%s: dx", what);
    ok &= lt_compare(buf, GP_F32P(&p.din[0]), dx, 2 * T * PD, LT_TOL_EXACT, NULL);
    if (learned) {
      snprintf(buf, sizeof buf, "%s: grad.weight", what);
      ok &= lt_compare(buf, p.b.grad[0], g, MAXLEN * PD, LT_TOL_MICRO, NULL);
    }
  }
  snprintf(buf, sizeof buf,
           "%s vs each sentence alone: outputs and dx exact%s, padding finite (T 9 > max_len 8)",
           what, learned ? ", weight gradient the lone ones summed" : "");
  tally(ok, buf);

  /* Determinism: backward again from zero gives the same bits. */
  if (learned && ok) {
    float g1[MAXLEN * PD];
    memcpy(g1, p.b.grad[0], sizeof g1);
    memset(p.b.grad[0], 0, sizeof g1);
    ok = lt_backward(&p) == GP_OK && memcmp(g1, p.b.grad[0], sizeof g1) == 0;
    tally(ok, "positional learned, packed: the weight gradient is the same bits again");
  }
  lt_layer_free(&p);
}

static void positional_errors(gp_backend *be) {
  gp_shape s[2] = {{2, {9, 4}}, {1, {9}}};
  gp_dtype dt[2] = {GP_F32, GP_I32};
  lt_layer t;
  if (!lt_build_or_report(&t, be, "{type: positional, max_len: 8}", 2, s, dt, 2)) {
    tally(0, "positional: positions out of range");
    return;
  }
  int ok = 1;
  const int32_t bad[2] = {8, -1};
  const char *want[2][3] = {
      {"position 8 at index 11 (sample 1, token 2)", "outside [0, 8)", NULL},
      {"position -1 at index 11 (sample 1, token 2)", "outside [0, 8)", NULL}};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 18; i++)
      GP_I32P(&t.in[1])[i] = i % 8;
    GP_I32P(&t.in[1])[11] = bad[k];
    for (int i = 0; i < 2 * 9 * 4; i++)
      GP_F32P(&t.out)[i] = 777.0f;
    gp_error_clear();
    ok &= expect_error(lt_forward(&t), GP_ERR_DATA, want[k]);
    for (int i = 0; i < 2 * 9 * 4; i++)
      ok &= GP_F32P(&t.out)[i] == 777.0f; /* nothing written */
  }
  tally(ok, "positional: positions 8 and -1 (max_len 8) are GP_ERR_DATA naming value and index, "
            "nothing written");
  lt_layer_free(&t);

  struct {
    const char *what;
    gp_shape pos;
    gp_dtype dt;
    const char *needles[4];
  } shp[] = {
      {"positions of another length", {1, {8}}, GP_I32, {"i32 [9]", "i32 [8]", NULL}},
      {"F32 positions", {1, {9}}, GP_F32, {"positions i32 [9]", "f32 [9]", NULL}},
      {"positions [9, 1]", {2, {9, 1}}, GP_I32, {"positions i32 [9]", "i32 [9, 1]", NULL}},
  };
  for (size_t k = 0; k < sizeof shp / sizeof shp[0]; k++) {
    gp_shape ss[2] = {s[0], shp[k].pos};
    gp_dtype dd[2] = {GP_F32, shp[k].dt};
    memset(&t, 0, sizeof t);
    gp_error_clear();
    gp_status st = lt_layer_configure(&t, "{type: positional, max_len: 8}", 2, ss, dd);
    char buf[160];
    snprintf(buf, sizeof buf, "positional: %s refused at load", shp[k].what);
    tally(expect_error(st, GP_ERR_SPEC, shp[k].needles), buf);
    lt_layer_free(&t);
  }
}

/* ---- attention errors ---- */

static void attention_errors(gp_backend *be) {
  enum { T = 5, TK = 4 };
  const gp_shape x = {2, {T, 8}}, m = {2, {TK, 8}}, sq = {1, {T}}, sk = {1, {TK}};
  const gp_shape bad_len = {1, {T + 1}};
  struct {
    const char *what, *yaml;
    int n;
    gp_shape s[4];
    gp_dtype dt[4];
    const char *needles[5];
  } cases[] = {
      {"mask: segments with 1 input",
       "{type: attention, heads: 2, mask: segments}",
       1,
       {x},
       {GP_F32},
       {"mask: segments", "[x, seg]", "[q, mem, q_seg, k_seg]", "got 1 input", NULL}},
      {"mask: segments with 3 inputs",
       "{type: attention, heads: 2, mask: segments}",
       3,
       {x, m, sk},
       {GP_F32, GP_F32, GP_I32},
       {"mask: segments", "got 3 inputs", NULL}},
      {"F32 segment ids",
       "{type: attention, heads: 2, mask: segments}",
       2,
       {x, sq},
       {GP_F32, GP_F32},
       {"input 2", "segment ids", "i32 [5]", "got f32 [5]", NULL}},
      {"segment ids of another length",
       "{type: attention, heads: 2, mask: segments}",
       2,
       {x, bad_len},
       {GP_F32, GP_I32},
       {"input 2", "i32 [5]", "got i32 [6]", NULL}},
      {"2 inputs, the second keys/values",
       "{type: attention, heads: 2, mask: segments}",
       2,
       {x, m},
       {GP_F32, GP_F32},
       {"self-attention [x, seg]", "got f32 [4, 8]", "[q, mem, q_seg, k_seg]", NULL}},
      {"cross, query ids of the keys' length",
       "{type: attention, heads: 2, mask: segments}",
       4,
       {x, m, sk, sk},
       {GP_F32, GP_F32, GP_I32, GP_I32},
       {"input 3", "queries", "i32 [5]", "got i32 [4]", NULL}},
      {"cross, F32 key ids",
       "{type: attention, heads: 2, mask: segments}",
       4,
       {x, m, sq, sk},
       {GP_F32, GP_F32, GP_I32, GP_F32},
       {"input 4", "keys", "i32 [4]", "got f32 [4]", NULL}},
      {"cross, input 2 not keys/values",
       "{type: attention, heads: 2, mask: segments}",
       4,
       {x, sq, sq, sk},
       {GP_F32, GP_I32, GP_I32, GP_I32},
       {"cross-attention", "input 2 must be keys/values", NULL}},
      {"cross, I32 queries",
       "{type: attention, heads: 2, mask: segments}",
       4,
       {x, m, sq, sk},
       {GP_I32, GP_F32, GP_I32, GP_I32},
       {"f32 queries", "got i32 [5, 8]", NULL}},
      {"4 inputs without mask: segments",
       "{type: attention, heads: 2}",
       4,
       {x, m, sq, sk},
       {GP_F32, GP_F32, GP_I32, GP_I32},
       {"4 inputs", "needs mask: segments", NULL}},
      {"mask value typo",
       "type: attention\nheads: 2\nmask: segment\n",
       2,
       {x, sq},
       {GP_F32, GP_I32},
       {"test.yaml:3:", "did you mean 'segments'?", NULL}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    lt_layer t;
    memset(&t, 0, sizeof t);
    gp_error_clear();
    gp_status st = lt_layer_configure(&t, cases[k].yaml, cases[k].n, cases[k].s, cases[k].dt);
    char buf[160];
    snprintf(buf, sizeof buf, "attention: %s refused at load", cases[k].what);
    tally(expect_error(st, GP_ERR_SPEC, cases[k].needles), buf);
    lt_layer_free(&t);
  }

  /* A negative segment id is a data error naming where it is. */
  const gp_shape cs[4] = {x, m, sq, sk};
  const gp_dtype cd[4] = {GP_F32, GP_F32, GP_I32, GP_I32};
  lt_layer t;
  if (!lt_build_or_report(&t, be, "{type: attention, heads: 2, mask: segments}", 4, cs, cd, 2)) {
    tally(0, "attention: negative segment ids");
    return;
  }
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 2 * T; i++)
      GP_I32P(&t.in[2])[i] = 1;
    for (int i = 0; i < 2 * TK; i++)
      GP_I32P(&t.in[3])[i] = 1;
    GP_I32P(&t.in[2 + k])[k ? 6 : 8] = -2;
    const char *n[3] = {k ? "segment id -2 of sample 1, key 2"
                          : "segment id -2 of sample 1, query 3",
                        "negative", NULL};
    gp_error_clear();
    ok &= expect_error(lt_forward(&t), GP_ERR_DATA, n);
  }
  tally(ok, "attention: a negative query or key segment id is GP_ERR_DATA naming sample and token");
  lt_layer_free(&t);
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  attention_cases(be);
  positional_packed(be, 0);
  positional_packed(be, 1);
  positional_errors(be);
  attention_errors(be);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
