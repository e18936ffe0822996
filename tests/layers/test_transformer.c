/* The Transformer layers' promises beyond the PyTorch fixtures and the finite differences of
 * test_grad.c: embedding ids out of range are data errors that write nothing and the padding
 * row starts and stays zero; the sinusoidal table is the standard interleaved formula (and
 * PyTorch's); attention gives no NaN for fully masked rows, refuses masks that are not 0/1,
 * and its dropout keeps the dropout layer's contract (recompute, micro-batches, eval); and a
 * tiny Transformer written in YAML loads and has the right whole-model gradient, the same in
 * micro-batches as whole.
 * Usage: test_layers_transformer FIXTURE_DIR MODEL_YAML */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"
#include "core/exec/pass.h"
#include "core/train/params.h"
#include "tests/layers/harness.h"

static int passed, failed;

static void tally(int ok, const char *what) {
  lt_tally(ok, what, &passed, &failed);
}

static int all_finite(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

/* Expects status s == code with every needle in the message. */
static int expect_error(gp_status s, gp_status code, const char *n1, const char *n2) {
  const char *msg = gp_error_message();
  int ok = s == code && strstr(msg, n1) && (!n2 || strstr(msg, n2));
  if (!ok) printf("  got %s: '%s'\n", gp_status_name(s), msg);
  return ok;
}

/* ---- embedding ---- */

static void embedding_errors(gp_backend *be) {
  lt_layer t;
  gp_shape s = {1, {5}};
  gp_dtype dt = GP_I32;
  if (!lt_build_or_report(&t, be, "{type: embedding, num_embeddings: 11, dim: 4}", 1, &s, &dt, 2)) {
    tally(0, "embedding: ids out of range");
    return;
  }
  int32_t *ids = GP_I32P(&t.in[0]);
  float *y = GP_F32P(&t.out);
  int ok = 1;
  const int32_t bad[2] = {11, -3};
  const char *want[2] = {"token id 11 at position 7", "token id -3 at position 7"};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 10; i++)
      ids[i] = i;
    ids[7] = bad[k];
    for (int i = 0; i < 2 * 5 * 4; i++)
      y[i] = 777.0f;
    gp_error_clear();
    ok &= expect_error(lt_forward(&t), GP_ERR_DATA, want[k], "outside [0, 11)");
    for (int i = 0; i < 2 * 5 * 4; i++)
      ok &= y[i] == 777.0f; /* nothing written */
    ok &= expect_error(lt_backward(&t), GP_ERR_DATA, want[k], NULL);
  }
  tally(ok, "embedding: ids 11 and -3 of 11 are GP_ERR_DATA naming them; nothing is written");
  lt_layer_free(&t);
}

static void embedding_padding(gp_backend *be) {
  enum { V = 6, D = 5, T = 4, B = 3 };
  lt_layer t;
  gp_shape s = {1, {T}};
  gp_dtype dt = GP_I32;
  if (!lt_build_or_report(
          &t, be, "{type: embedding, num_embeddings: 6, dim: 5, padding_idx: 2, scale: true}", 1,
          &s, &dt, B)) {
    tally(0, "embedding: padding row");
    return;
  }
  const float *w = t.b.param[0];
  float *g = t.b.grad[0];
  int ok = 1;
  for (int r = 0; r < V; r++) {
    int zeros = 0;
    for (int j = 0; j < D; j++)
      zeros += w[r * D + j] == 0.0f;
    ok &= r == 2 ? zeros == D : zeros < D;
  }
  tally(ok, "embedding: padding_idx 2 starts as a zero row, the others N(0, 1) draws");

  const int32_t ids[B * T] = {2, 4, 1, 4, 0, 2, 2, 5, 4, 3, 4, 2};
  memcpy(t.in[0].data, ids, sizeof ids);
  lt_fill_uniform(5, GP_F32P(&t.dout), B * T * D, -1.0f, 1.0f);
  ok = lt_forward(&t) == GP_OK;
  const float sc = (float)sqrt((double)D);
  for (int i = 0; ok && i < B * T; i++)
    for (int j = 0; j < D; j++)
      ok &= GP_F32P(&t.out)[i * D + j] == sc * w[ids[i] * D + j];
  tally(ok, "embedding: scale: true gives sqrt(dim) * weight[id], exactly");

  ok = lt_backward(&t) == GP_OK;
  float g1[V * D];
  memcpy(g1, g, sizeof g1);
  for (int j = 0; j < D; j++)
    ok &= g[2 * D + j] == 0.0f;
  /* id 4 at positions 1, 3, 8, 10: the scaled rows of dy summed in that order */
  for (int j = 0; j < D; j++) {
    float want = 0.0f;
    for (int i = 0; i < B * T; i++)
      if (ids[i] == 4) want += sc * GP_F32P(&t.dout)[i * D + j];
    ok &= g[4 * D + j] == want;
  }
  memset(g, 0, sizeof g1);
  ok &= lt_backward(&t) == GP_OK && memcmp(g, g1, sizeof g1) == 0;
  tally(ok, "embedding: the padding row gets no gradient; a repeated id sums its rows in order, "
            "the same bits every time");
  lt_layer_free(&t);

  if (!lt_build_or_report(&t, be, "{type: embedding, num_embeddings: 6, dim: 5, padding_idx: -1}",
                          1, &s, &dt, 1)) {
    tally(0, "embedding: padding_idx -1");
    return;
  }
  ok = 1;
  for (int j = 0; j < D; j++)
    ok &= t.b.param[0][5 * D + j] == 0.0f && t.b.param[0][4 * D + j] != 0.0f;
  tally(ok, "embedding: padding_idx -1 is the last row (as PyTorch)");
  lt_layer_free(&t);
}

/* ---- positional ---- */

static int compare_fixture_pe(const char *dir, const char *file, const float *pe, int64_t n) {
  char path[4096];
  gp_st_file *f;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (gp_st_read(path, &f) != GP_OK) {
    printf("  FAIL %s: %s\n", path, gp_error_message());
    return 0;
  }
  const gp_st_entry *e = gp_st_find(f, "param.pe");
  int ok = e && e->dtype == GP_F32 && gp_shape_numel(&e->shape) == n &&
           lt_compare_f(file, pe, gp_st_data(f, e), n, LT_TOL_TORCH_FWD, NULL);
  gp_st_free(f);
  return ok;
}

static void positional_table(gp_backend *be, const char *fixtures) {
  static const struct {
    const char *yaml, *fixture;
    int64_t max_len, t, dim;
  } cases[] = {
      {"{type: positional, max_len: 9}", "positional_sinusoidal_12.safetensors", 9, 5, 12},
      {"{type: positional, max_len: 6}", "positional_sinusoidal_7.safetensors", 6, 6, 7},
  };
  for (int c = 0; c < 2; c++) {
    lt_layer t;
    gp_shape s = {2, {cases[c].t, cases[c].dim}};
    if (!lt_build_or_report(&t, be, cases[c].yaml, 1, &s, NULL, 1)) {
      tally(0, "positional: sinusoidal table");
      continue;
    }
    const int64_t L = cases[c].max_len, D = cases[c].dim, n = L * D;
    const float *pe = t.b.param[0];
    gp_cost cost;
    t.l.type->cost(&t.l, &cost);
    int ok = t.l.n_params == 1 && strcmp(t.l.pdesc[0].name, "pe") == 0 && !t.l.pdesc[0].trainable &&
             !t.b.grad[0] && cost.params == 0;
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t p = 0; p < L; p++)
      for (int64_t j = 0; j < D; j++) {
        double a = (double)p / pow(10000.0, (double)(j - j % 2) / (double)D);
        want[p * D + j] = j % 2 ? cos(a) : sin(a);
      }
    ok &= lt_compare("sinusoidal table vs pow() formula", pe, want, n, LT_TOL_TABLE, NULL);
    free(want);
    /* the interleaved variant: even features sin, odd features cos of the same angle */
    for (int64_t j = 0; j < D; j++)
      ok &= pe[j] == (j % 2 ? 1.0f : 0.0f);
    ok &= pe[D] == (float)sin(1.0) && pe[D + 1] == (float)cos(1.0);
    ok &= pe[3 * D + 5] == (float)cos(3.0 / pow(10000.0, 4.0 / (double)D));
    ok &= compare_fixture_pe(fixtures, cases[c].fixture, pe, n);
    char what[160];
    snprintf(what, sizeof what,
             "positional: sinusoidal buffer 'pe' [%lld, %lld] is the standard table (and "
             "PyTorch's)",
             (long long)L, (long long)D);
    tally(ok, what);
    lt_layer_free(&t);
  }
}

/* ---- attention ---- */

static int param_ix(const lt_layer *t, const char *name) {
  int i = lt_param_index(t, name);
  if (i < 0) printf("  FAIL no parameter %s\n", name);
  return i;
}

/* Fully masked queries: output = out_proj.bias, no NaN, and no gradient for their sample. */
static void attention_fully_masked(gp_backend *be) {
  enum { T = 4, D = 6, B = 2 };
  static const struct {
    const char *yaml, *what;
    int32_t mask[B * T];
    int masked_rows[B * T]; /* 1: that query has no key left */
  } cases[] = {
      {"{type: attention, heads: 2}",
       "attention: a sample with every key padded outputs out_proj.bias, no NaN, dx = 0",
       {0, 0, 0, 0, 1, 1, 0, 1},
       {1, 1, 1, 1, 0, 0, 0, 0}},
      {"{type: attention, heads: 2, causal: true}",
       "attention: causal with key 0 padded: query 0 outputs out_proj.bias, the rest attend",
       {0, 1, 1, 1, 1, 0, 1, 1},
       {1, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (int c = 0; c < 2; c++) {
    lt_layer t;
    gp_shape s[2] = {{2, {T, D}}, {1, {T}}};
    gp_dtype dt[2] = {GP_F32, GP_I32};
    if (!lt_build_or_report(&t, be, cases[c].yaml, 2, s, dt, B)) {
      tally(0, cases[c].what);
      continue;
    }
    int ob = param_ix(&t, "out_proj.bias");
    if (ob < 0) {
      tally(0, cases[c].what);
      lt_layer_free(&t);
      continue;
    }
    for (int i = 0; i < t.l.n_params; i++)
      lt_fill_uniform(40 + (uint64_t)i, t.b.param[i], lt_param_numel(&t, i), -1.0f, 1.0f);
    lt_fill_uniform(50, GP_F32P(&t.in[0]), B * T * D, -2.0f, 2.0f);
    memcpy(t.in[1].data, cases[c].mask, sizeof cases[c].mask);
    lt_fill_uniform(51, GP_F32P(&t.dout), B * T * D, -1.0f, 1.0f);
    int ok = lt_forward(&t) == GP_OK && lt_backward(&t) == GP_OK;
    const float *y = GP_F32P(&t.out), *bias = t.b.param[ob], *dx = GP_F32P(&t.din[0]);
    ok &= all_finite(y, B * T * D) && all_finite(dx, B * T * D);
    for (int i = 0; i < t.l.n_params; i++)
      ok &= all_finite(t.b.grad[i], lt_param_numel(&t, i));
    for (int r = 0; r < B * T; r++) {
      int same = 1;
      for (int j = 0; j < D; j++)
        same &= y[r * D + j] == bias[j];
      ok &= same == cases[c].masked_rows[r];
    }
    if (c == 0)
      for (int j = 0; j < T * D; j++)
        ok &= dx[j] == 0.0f;
    tally(ok, cases[c].what);
    lt_layer_free(&t);
  }

  /* Scores of thousands: the softmax subtracts the row maximum. */
  lt_layer t;
  gp_shape s = {2, {T, D}};
  if (!lt_build_or_report(&t, be, "{type: attention, heads: 1}", 1, &s, NULL, 1)) {
    tally(0, "attention: huge scores");
    return;
  }
  for (int i = 0; i < t.l.n_params; i++)
    lt_fill_uniform(60 + (uint64_t)i, t.b.param[i], lt_param_numel(&t, i), -1.0f, 1.0f);
  lt_fill_uniform(61, GP_F32P(&t.in[0]), T * D, -300.0f, 300.0f);
  lt_fill_uniform(62, GP_F32P(&t.dout), T * D, -1.0f, 1.0f);
  int ok = lt_forward(&t) == GP_OK && lt_backward(&t) == GP_OK &&
           all_finite(GP_F32P(&t.out), T * D) && all_finite(GP_F32P(&t.din[0]), T * D);
  tally(ok, "attention: scores in the thousands stay finite (stable softmax)");
  lt_layer_free(&t);
}

static void attention_bad_mask(gp_backend *be) {
  enum { T = 3, D = 4 };
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    lt_layer t;
    gp_shape s[2] = {{2, {T, D}}, {1, {T}}};
    gp_dtype dt[2] = {GP_F32, k == 0 ? GP_I32 : GP_F32};
    if (!lt_build_or_report(&t, be, "{type: attention, heads: 2}", 2, s, dt, 2)) {
      ok = 0;
      continue;
    }
    for (int i = 0; i < 2 * T; i++) {
      if (k == 0) GP_I32P(&t.in[1])[i] = 1;
      if (k > 0) GP_F32P(&t.in[1])[i] = 1.0f;
    }
    if (k == 0) GP_I32P(&t.in[1])[4] = 2;
    if (k == 1) GP_F32P(&t.in[1])[4] = 0.5f;
    if (k == 2) GP_F32P(&t.in[1])[4] = -INFINITY; /* a PyTorch-style additive mask */
    gp_error_clear();
    ok &= expect_error(lt_forward(&t), GP_ERR_DATA, "of sample 1, key 1 is not 0 (pad) or 1", NULL);
    lt_layer_free(&t);
  }
  tally(ok, "attention: mask values 2 (I32), 0.5 and -inf (F32) are GP_ERR_DATA naming the key");
}

/* Dropout on the probabilities: a recompute gives the same bits, a micro-batch of samples
 * 2..3 (sample_offset 2) the same values as those samples in the whole batch, evaluation
 * mode no dropout at all, another step other masks. */
static void attention_dropout(gp_backend *be) {
  enum { T = 5, D = 4, B = 4 };
  const int64_t per = T * D;
  gp_shape s = {2, {T, D}};
  lt_layer full, micro, plain;
  if (!lt_build_or_report(&full, be, "{type: attention, heads: 2, dropout: 0.5}", 1, &s, NULL, B)) {
    tally(0, "attention dropout");
    return;
  }
  if (!lt_build_or_report(&micro, be, "{type: attention, heads: 2, dropout: 0.5}", 1, &s, NULL,
                          2)) {
    lt_layer_free(&full);
    tally(0, "attention dropout");
    return;
  }
  if (!lt_build_or_report(&plain, be, "{type: attention, heads: 2}", 1, &s, NULL, B)) {
    lt_layer_free(&full);
    lt_layer_free(&micro);
    tally(0, "attention dropout");
    return;
  }
  for (int i = 0; i < full.l.n_params; i++) {
    int64_t n = lt_param_numel(&full, i);
    lt_fill_uniform(70 + (uint64_t)i, full.b.param[i], n, -1.0f, 1.0f);
    memcpy(micro.b.param[i], full.b.param[i], (size_t)n * sizeof(float));
    memcpy(plain.b.param[i], full.b.param[i], (size_t)n * sizeof(float));
  }
  lt_fill_uniform(80, GP_F32P(&full.in[0]), B * per, -1.0f, 1.0f);
  memcpy(micro.in[0].data, GP_F32P(&full.in[0]) + 2 * per, 2 * per * sizeof(float));
  memcpy(plain.in[0].data, full.in[0].data, B * per * sizeof(float));
  full.e.step = micro.e.step = 3;
  float y[B * T * D], y2[B * T * D];
  int ok = lt_forward(&full) == GP_OK;
  memcpy(y, full.out.data, sizeof y);
  full.e.recompute = 1;
  ok &= lt_forward(&full) == GP_OK;
  tally(ok && memcmp(y, full.out.data, sizeof y) == 0,
        "attention dropout: a recompute forward gives the same bits");

  micro.e.sample_offset = 2;
  ok = lt_forward(&micro) == GP_OK &&
       lt_compare_f("attention dropout: samples 2..3 as a micro-batch", GP_F32P(&micro.out),
                    y + 2 * per, 2 * per, LT_TOL_MICRO, NULL);
  micro.e.sample_offset = 0; /* the wrong offset must give other masks */
  lt_set_quiet(1);
  ok &= lt_forward(&micro) == GP_OK &&
        !lt_compare_f("", GP_F32P(&micro.out), y + 2 * per, 2 * per, LT_TOL_MICRO, NULL);
  lt_set_quiet(0);
  tally(ok, "attention dropout: a micro-batch at sample_offset 2 has the masks of samples 2..3 "
            "of the whole batch (and offset 0 does not)");

  full.e.recompute = 0;
  full.e.training = 0;
  ok = lt_forward(&full) == GP_OK && lt_forward(&plain) == GP_OK &&
       memcmp(full.out.data, plain.out.data, sizeof y) == 0;
  double diff = 0;
  for (int i = 0; i < B * T * D; i++)
    diff = fmax(diff, fabs(y[i] - GP_F32P(&plain.out)[i]));
  tally(ok && diff > 1e-2, "attention dropout: evaluation mode is dropout 0; training mode is not");

  full.e.training = 1;
  full.e.step = 4;
  ok = lt_forward(&full) == GP_OK;
  memcpy(y2, full.out.data, sizeof y2);
  diff = 0;
  for (int i = 0; i < B * T * D; i++)
    diff = fmax(diff, fabs(y[i] - y2[i]));
  tally(ok && diff > 1e-2, "attention dropout: another step draws other masks");
  lt_layer_free(&full);
  lt_layer_free(&micro);
  lt_layer_free(&plain);
}

/* ---- a tiny Transformer in YAML, through the executor ---- */

#define MB 3
#define MT 5
/* Steps of 1e-2 meet the curvature of attention over sqrt(dim)-scaled embeddings (5% off on
 * a few query weights, shrinking 100x with the step: truncation, not a bug); at 1e-3 the f32
 * loss rounding (~2e-7 / 2e-3 = 1e-4) stays well inside fd_norm. */
#define FD_H 1e-3

typedef struct rig {
  gp_model *m;
  gp_backend *be;
  gp_arena arena;
  gp_params params;
} rig;

static int32_t tokens[MB * MT] = {3, 7, 1, 0, 0, 5, 5, 9, 10, 2, 4, 0, 6, 8, 0};
static const int32_t labels[MB] = {1, 3, 0};
static int32_t mask[MB * MT];

/* The mean loss of samples [first, first + n) as part of a mini-batch of MB; grads +=
 * (backward 1: gp_pass_backward; 2: its halves, B then W) */
static gp_status loss_of(rig *r, int first, int n, int backward, double *loss) {
  gp_model *m = r->m;
  gp_pass p;
  gp_exec e = {.be = r->be,
               .arena = &r->arena,
               .training = 1,
               .seed = 9,
               .step = 2,
               .sample_offset = first,
               .loss_count = MB,
               .binds = r->params.bind};
  GP_TRY(gp_pass_init(&p, m, 0, m->n_nodes, n));
  const void *src[3] = {tokens + first * MT, mask + first * MT, labels + first};
  for (int i = 0; i < 3; i++)
    p.val[i] = (gp_tensor){(void *)src[i], gp_shape_batch(n, &m->inputs[i].shape), GP_I32, -1};
  gp_status s = gp_pass_forward(&p, &e);
  if (s == GP_OK && backward == 1) s = gp_pass_backward(&p, &e);
  if (s == GP_OK && backward == 2) s = gp_pass_backward_input(&p, &e);
  if (s == GP_OK && backward == 2) s = gp_pass_backward_weight(&p, &e);
  gp_pass_free(&p);
  gp_arena_reset(&r->arena);
  *loss = e.loss_sum;
  return s;
}

static const gp_node *node_named(const gp_model *m, const char *path) {
  for (int i = 0; i < m->n_nodes; i++)
    if (strcmp(m->nodes[i].layer.path, path) == 0) return &m->nodes[i];
  return NULL;
}

static void tiny_transformer(gp_backend *be, const char *yaml) {
  rig r = {0};
  r.be = be;
  if (gp_model_load(yaml, NULL, 0, &r.m) != GP_OK) {
    printf("  FAIL %s: %s\n", yaml, gp_error_message());
    tally(0, "tiny Transformer: loads");
    return;
  }
  gp_model *m = r.m;
  /* embedding 11 x 12; per encoder: attention 4 d^2 + 4 d, two layernorms, d -> 24 -> d;
   * the classifier 60 -> 4 */
  const int64_t d = 12, ff = 24;
  int64_t enc = 4 * d * d + 4 * d + 2 * 2 * d + (d * ff + ff) + (ff * d + d);
  int64_t want = 11 * d + 2 * enc + (MT * d * 4 + 4);
  const gp_node *att = node_named(m, "enc.1.att");
  int ok = m->n_params == want && m->n_units == 7 && m->n_inputs == 3 && m->label_input == 2 &&
           att && strcmp(att->layer.type->name, "attention") == 0 && att->n_in == 2 &&
           att->in[1] == 1 && att->layer.n_params == 4 &&
           strcmp(att->layer.pdesc[2].name, "out_proj.weight") == 0;
  if (!ok)
    printf("  got %lld parameters (want %lld), %d units, %d inputs, label %d\n",
           (long long)m->n_params, (long long)want, m->n_units, m->n_inputs, m->label_input);
  tally(ok, "tiny Transformer: loads with 7 units, the mask reaching both attentions, and the "
            "parameter count of its layers");
  if (!ok || gp_params_init(&r.params, m, 0, m->n_nodes, be, 3) != GP_OK) {
    if (ok) printf("  FAIL params: %s\n", gp_error_message());
    gp_model_free(m);
    return;
  }
  gp_arena_init(&r.arena, be, 0);
  for (int i = 0; i < MB * MT; i++)
    mask[i] = tokens[i] != 0;

  double l0 = 0, lp = 0, lm = 0;
  gp_params_zero_grad(&r.params);
  gp_status s = loss_of(&r, 0, MB, 1, &l0);
  int64_t n = r.params.n_train;
  float *g = malloc((size_t)n * sizeof *g);
  double *fd = malloc((size_t)n * sizeof *fd);
  memcpy(g, r.params.grad, (size_t)n * sizeof *g);
  for (int64_t i = 0; i < n && s == GP_OK; i++) {
    float w = r.params.train[i];
    r.params.train[i] = w + (float)FD_H;
    double xp = r.params.train[i];
    s = loss_of(&r, 0, MB, 0, &lp);
    r.params.train[i] = w - (float)FD_H;
    double xm = r.params.train[i];
    if (s == GP_OK) s = loss_of(&r, 0, MB, 0, &lm);
    r.params.train[i] = w;
    fd[i] = (lp - lm) / (xp - xm);
  }
  /* The embedding's padding row 0 comes first: it is looked up (so the loss moves with it)
   * but gets no gradient by definition; every other element is compared. */
  const gp_node *emb = node_named(m, "embed");
  int64_t pad = d;
  ok = emb && gp_params_bind(&r.params, (int)(emb - m->nodes))->param[0] == r.params.train;
  for (int64_t i = 0; ok && i < pad; i++)
    ok &= g[i] == 0.0f && r.params.train[i] == 0.0f;
  double err = 0;
  ok &= s == GP_OK && isfinite(l0) &&
        lt_compare("tiny Transformer: gradient vs finite differences", g + pad, fd + pad, n - pad,
                   LT_TOL_FD_NORM, &err);
  if (s != GP_OK) printf("  FAIL pass: %s\n", gp_error_message());
  char what[200];
  snprintf(what, sizeof what,
           "tiny Transformer: whole-model gradient of %lld parameters vs finite differences "
           "(loss %.4f, max error %.2g)",
           (long long)n, l0, err);
  tally(ok, what);

  /* Samples 0..1 and then 2 as micro-batches: the same loss and gradients. */
  double la = 0, lb = 0;
  gp_params_zero_grad(&r.params);
  s = loss_of(&r, 0, 2, 1, &la);
  if (s == GP_OK) s = loss_of(&r, 2, 1, 1, &lb);
  double sum[1] = {la + lb};
  float l0f = (float)l0;
  ok = s == GP_OK &&
       lt_compare("tiny Transformer: loss of 2 micro-batches", &l0f, sum, 1, LT_TOL_MICRO, NULL) &&
       lt_compare_f("tiny Transformer: gradients of 2 micro-batches", r.params.grad, g, n,
                    LT_TOL_MICRO, NULL);
  tally(ok, "tiny Transformer: micro-batches of 2 + 1 samples give the whole batch's loss and "
            "gradients (dropout masks included)");

  /* The same micro-batches with the backward in halves: the same gradient bytes. */
  memcpy(g, r.params.grad, (size_t)n * sizeof *g);
  gp_params_zero_grad(&r.params);
  s = loss_of(&r, 0, 2, 2, &la);
  if (s == GP_OK) s = loss_of(&r, 2, 1, 2, &lb);
  int64_t diff = 0;
  for (int64_t i = 0; i < n; i++)
    diff += memcmp(&r.params.grad[i], &g[i], sizeof *g) != 0;
  if (s != GP_OK) printf("  FAIL pass: %s\n", gp_error_message());
  if (diff) printf("  %lld of %lld gradients differ\n", (long long)diff, (long long)n);
  tally(s == GP_OK && diff == 0, "tiny Transformer: 2 + 1 samples with the backward as B then W "
                                 "give the combined backward's gradients, bit for bit");

  /* A token id outside the vocabulary, through the executor: a data error naming the layer. */
  tokens[6] = 11;
  gp_error_clear();
  s = loss_of(&r, 0, MB, 0, &la);
  tokens[6] = 5;
  tally(expect_error(s, GP_ERR_DATA, "forward of layer 'embed' (embedding, ",
                     "token id 11 at position 6 is outside [0, 11)"),
        "tiny Transformer: token id 11 is GP_ERR_DATA through the executor, naming the layer");
  free(g);
  free(fd);
  gp_params_free(&r.params);
  gp_arena_free(&r.arena);
  gp_model_free(m);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    printf("usage: %s FIXTURE_DIR MODEL_YAML\n", argv[0]);
    return 2;
  }
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  embedding_errors(be);
  embedding_padding(be);
  positional_table(be, argv[1]);
  attention_fully_masked(be);
  attention_bad_mask(be);
  attention_dropout(be);
  tiny_transformer(be, argv[2]);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
