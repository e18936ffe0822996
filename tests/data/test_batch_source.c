/* core/train/batch_source.h over data/'s sources: replica r of R reads the contiguous slice r
 * of R of every global batch, so the R shares concatenated are the batch one replica reads
 * alone (image samples and token rows, training epochs and an evaluation pass whose last
 * batch has fewer rows than replicas); f32 targets go through the slicing beside the labels. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/spec.h"
#include "core/train/batch_source.h"
#include "data/data.h"
#include "tests/support/check.h"

static int failures, passes;

static const char *images = "name: mlp\n"
                            "inputs: {x: [5], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: linear, out_features: 3}\n"
                            "loss: {type: softmax_cross_entropy}\n";

static const char *tokens = "name: lm\n"
                            "inputs:\n"
                            "  tokens: {shape: [12], dtype: i32}\n"
                            "  seg: {shape: [12], dtype: i32}\n"
                            "  pos: {shape: [12], dtype: i32}\n"
                            "  label: {shape: [12], dtype: i32}\n"
                            "layers:\n"
                            "  - {type: embedding, num_embeddings: 40, dim: 4, from: tokens}\n"
                            "  - {type: linear, out_features: 40}\n"
                            "loss: {type: softmax_cross_entropy}\n";

static gp_model *load(const char *text) {
  gp_model *m = NULL;
  if (gp_model_load_string(text, "t.yaml", NULL, 0, &m) != GP_OK) {
    printf("load: %s\n", gp_error_message());
    exit(1);
  }
  return m;
}

#define MAX_R 8

enum { TRAIN, EVAL, LOADER };

/* A reader of m's data: the training split or the evaluated split of synthetic data
 * (gp_data_open), or (LOADER) a synthetic test split of 12 samples, whose last batch is short. */
static gp_batch_source *reader(const gp_model *m, int how, int64_t batch, gp_data *d) {
  gp_data_opts o = {.synthetic = 1, .train = 1, .eval = 1, .batch = batch, .seed = 11};
  memset(d, 0, sizeof *d);
  if (how != LOADER) {
    CHECK(gp_data_open(m, &o, d) == GP_OK, "open");
    return how == EVAL ? d->eval : d->train;
  }
  gp_loader *l = NULL;
  CHECK(gp_loader_open_synthetic(&m->inputs[0].shape, 3, 12, GP_SPLIT_TEST, 11, NULL, &l) ==
                GP_OK &&
            gp_loader_batch_source(l, m, batch, "test", 1, &d->own[0]) == GP_OK,
        "a loader's source");
  return d->own[0];
}

/* Each replica's shares of `batches` batches of a training split, or of one pass of an
 * evaluated split (`batches` of them), against the batches of one reader alone. */
static void shares(const gp_model *m, const char *what, int64_t batch, int R, int how,
                   int batches) {
  int eval = how != TRAIN;
  gp_data whole, part[MAX_R];
  gp_batch_source *w, *p[MAX_R];
  w = reader(m, how, batch, &whole);
  for (int r = 0; r < R; r++) {
    p[r] = reader(m, how, batch, &part[r]);
    CHECK(gp_batch_source_set_replica(p[r], r, R) == GP_OK, "%s: replica %d of %d", what, r, R);
  }
  int empty = 0, k = 0;
  for (; eval || k < batches; k++) {
    gp_batch g, s;
    int end, send;
    CHECK(gp_batch_source_next(w, &g, &end) == GP_OK, "%s: batch %d", what, k);
    int64_t rows = 0, e0, i0, e1, i1;
    for (int r = 0; r < R; r++) {
      CHECK(gp_batch_source_next(p[r], &s, &send) == GP_OK, "%s: share %d of batch %d", what, r, k);
      CHECK(send == end, "%s, batch %d: replica %d ends with the pass (%d, %d)", what, k, r, send,
            end);
      int64_t lo, hi; /* the pipeline's cut (core/exec/pipeline.c) */
      gp_batch_share(g.n, r, R, &lo, &hi);
      CHECK(s.n == hi - lo, "%s, R=%d, batch %d of %lld rows: replica %d has %lld rows", what, R, k,
            (long long)g.n, r, (long long)s.n);
      empty += s.n == 0 && !end;
      for (int i = 0; i < m->n_inputs && s.n == hi - lo; i++) {
        size_t row =
            (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
        CHECK(!memcmp(s.in[i], (const char *)g.in[i] + (size_t)lo * row, (size_t)s.n * row),
              "%s, R=%d, batch %d: replica %d's rows of input %s are rows %lld.. of the batch",
              what, R, k, r, m->inputs[i].name, (long long)lo);
      }
      rows += s.n;
      gp_batch_source_tell(w, &e0, &i0);
      gp_batch_source_tell(p[r], &e1, &i1);
      CHECK(e0 == e1 && i0 == i1, "%s, batch %d: replica %d at the same position", what, k, r);
    }
    CHECK(rows == g.n, "%s, R=%d, batch %d: the shares hold %lld of %lld rows", what, R, k,
          (long long)rows, (long long)g.n);
    if (end) break;
  }
  if (eval) /* the pass ends after ceil(samples / batch) batches */
    CHECK(k == batches, "%s: the pass ended after %d batches, not %d", what, k, batches);
  if (how == LOADER && R > 2)
    CHECK(empty > 0, "%s, R=%d: a share of the short last batch is empty", what, R);
  for (int r = 0; r < R; r++)
    gp_data_close(&part[r]);
  gp_data_close(&whole);
}

/* gp_batch_source_want: a source told to read share r of R of the inputs `used` (bit i: input
 * i) gives those rows of those inputs, and every row of the labels, as the same source told
 * nothing does, at the same positions; an image source decodes only the samples of those rows
 * (its loader has no decode threads, so the count is exact). late: told after one batch. */
static void wants(const gp_model *m, const char *what, int64_t batch, int R, int how, int batches,
                  unsigned used_bits, int late) {
  int eval = how != TRAIN, images = m->inputs[0].dtype == GP_F32;
  unsigned char used[GP_MAX_MODEL_INPUTS] = {0};
  for (int i = 0; i < m->n_inputs; i++)
    used[i] = (used_bits >> i) & 1;
  for (int r = 0; r < R; r++) {
    gp_data whole, part;
    gp_batch_source *w = reader(m, how, batch, &whole), *p = reader(m, how, batch, &part);
    if (!late) CHECK(gp_batch_source_want(p, used, r, R) == GP_OK, "%s: want %d of %d", what, r, R);
    int64_t expect = 0, rows = 0;
    int k = 0;
    for (; eval || k < batches; k++) {
      gp_batch g, s;
      int end, send;
      CHECK(gp_batch_source_next(w, &g, &end) == GP_OK &&
                gp_batch_source_next(p, &s, &send) == GP_OK,
            "%s: batch %d", what, k);
      CHECK(s.n == g.n && send == end, "%s: batch %d has %lld rows, told %lld", what, k,
            (long long)g.n, (long long)s.n);
      int64_t lo = 0, hi = g.n;
      if (!late || k > 0) gp_batch_share(g.n, r, R, &lo, &hi);
      for (int i = 0; i < m->n_inputs && s.n == g.n; i++) {
        size_t row =
            (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
        int all = i == m->label_input || (late && k == 0);
        if (!used[i] && !all) continue;
        int64_t a = all ? 0 : lo, b = all ? g.n : hi;
        CHECK(!memcmp((const char *)s.in[i] + (size_t)a * row,
                      (const char *)g.in[i] + (size_t)a * row, (size_t)(b - a) * row),
              "%s, replica %d of %d, batch %d: rows %lld..%lld of input %s as told nothing", what,
              r, R, k, (long long)a, (long long)b, m->inputs[i].name);
      }
      expect += used[0] || (late && k == 0) ? hi - lo : 0;
      rows += g.n;
      int64_t e0, i0, e1, i1;
      gp_batch_source_tell(w, &e0, &i0);
      gp_batch_source_tell(p, &e1, &i1);
      CHECK(e0 == e1 && i0 == i1, "%s, batch %d: replica %d at the same position", what, k, r);
      if (late && k == 0)
        CHECK(gp_batch_source_want(p, used, r, R) == GP_OK, "%s: want %d of %d", what, r, R);
      if (end) break;
    }
    gp_batch_source_stats sw, sp;
    gp_batch_source_stats_get(w, &sw);
    gp_batch_source_stats_get(p, &sp);
    if (images)
      CHECK(sw.decoded == rows && sp.decoded == expect,
            "%s, replica %d of %d: %lld samples decoded of %lld (told nothing: %lld)", what, r, R,
            (long long)sp.decoded, (long long)expect, (long long)sw.decoded);
    else
      CHECK(sw.decoded == 0 && sp.decoded == 0, "%s: token rows are not counted decoded", what);
    gp_data_close(&part);
    gp_data_close(&whole);
  }
}

/* A source of global batches that carry f32 targets (2 a sample) beside x and labels. */
typedef struct tsrc {
  float x[10 * 5], target[10 * 2];
  int32_t y[10];
  int64_t k;
} tsrc;

static gp_status t_next(void *ctx, gp_batch *b) {
  tsrc *t = ctx;
  for (int i = 0; i < 10 * 5; i++)
    t->x[i] = (float)(t->k * 1000 + i);
  for (int i = 0; i < 10 * 2; i++)
    t->target[i] = (float)(t->k * 1000 + i) + 0.5f;
  for (int i = 0; i < 10; i++)
    t->y[i] = (int32_t)(t->k * 10 + i);
  t->k++;
  *b = (gp_batch){.in = {t->x, t->y}, .n = 10, .target = t->target, .target_numel = 2};
  return GP_OK;
}
static gp_status t_seek(void *ctx, int64_t epoch, int64_t index) {
  ((tsrc *)ctx)->k = epoch * 100 + index;
  return GP_OK;
}
static void t_tell(const void *ctx, int64_t *epoch, int64_t *index) {
  *epoch = ((const tsrc *)ctx)->k / 100;
  *index = ((const tsrc *)ctx)->k % 100;
}
static int64_t t_batches(const void *ctx) {
  (void)ctx;
  return 100;
}
static void t_free(void *ctx) {
  free(ctx);
}
static const gp_batch_source_ops t_ops = {
    .next = t_next, .seek = t_seek, .tell = t_tell, .batches = t_batches, .free = t_free};

static void targets(const gp_model *m) {
  gp_batch_source *s = NULL;
  tsrc *t = calloc(1, sizeof *t);
  CHECK(t && gp_batch_source_new(&t_ops, t, m, &s) == GP_OK, "a source of targets");
  if (!s) return;
  char desc[64] = "x";
  gp_batch_source_describe(s, desc, sizeof desc);
  CHECK(desc[0] == 0 && gp_batch_source_batches(s) == 100, "optional describe, batches");
  CHECK(gp_batch_source_set_replica(s, 3, 3) != GP_OK &&
            gp_batch_source_set_replica(s, 0, 0) != GP_OK &&
            gp_batch_source_set_replica(s, -1, 2) != GP_OK,
        "replica outside [0, replicas) refused");
  for (int r = 0; r < 4; r++) {
    gp_batch b;
    CHECK(gp_batch_source_set_replica(s, r, 4) == GP_OK, "replica %d of 4", r);
    CHECK(gp_batch_source_seek(s, 0, 7) == GP_OK && gp_batch_source_next(s, &b, NULL) == GP_OK,
          "next");
    /* 10 rows over 4: 3, 3, 2, 2, the pipeline's shares (it cut 2, 3, 2, 3 before, its own
     * formula, while the pipeline took 3, 3, 2, 2) */
    static const int64_t first[5] = {0, 3, 6, 8, 10};
    int64_t lo = first[r], hi = first[r + 1];
    CHECK(b.n == hi - lo && b.target_numel == 2, "replica %d: %lld rows", r, (long long)b.n);
    int ok = b.target == t->target + lo * 2;
    for (int64_t i = 0; ok && i < b.n * 2; i++)
      ok = b.target[i] == (float)(7000 + lo * 2 + i) + 0.5f;
    for (int64_t i = 0; ok && i < b.n; i++)
      ok = ((const int32_t *)b.in[1])[i] == 70 + lo + i &&
           ((const float *)b.in[0])[i * 5] == (float)(7000 + (lo + i) * 5);
    CHECK(ok, "replica %d of 4: its rows of x, labels and targets", r);
  }
  gp_batch_source_free(s);
  gp_batch_source_free(NULL);
}

int main(void) {
  gp_model *img = load(images), *tok = load(tokens);
  const int Rs[] = {1, 2, 3, 5, 7};
  for (size_t i = 0; i < sizeof Rs / sizeof Rs[0]; i++) {
    /* images: 16 batches an epoch, so 20 cross into the next */
    shares(img, "image training batches", 7, Rs[i], TRAIN, 20);
    shares(img, "image evaluation pass", 5, Rs[i], EVAL, 2);
    /* 12 samples in batches of 5: 5, 5, 2 */
    shares(img, "image evaluation pass, short last batch", 5, Rs[i], LOADER, 3);
    shares(tok, "token training rows", 6, Rs[i], TRAIN, 20);
  }
  gp_data_opts o = {.synthetic = 1, .eval = 1, .batch = 5, .seed = 11};
  gp_data d;
  CHECK(gp_data_open(tok, &o, &d) == GP_OK, "token eval");
  int64_t n = d.eval ? gp_batch_source_batches(d.eval) : 0;
  gp_data_close(&d);
  /* the token eval split: 2 batches of pairs, packed into fewer rows */
  for (size_t i = 0; i < sizeof Rs / sizeof Rs[0]; i++)
    shares(tok, "token evaluation pass", 5, Rs[i], EVAL, (int)n);
  for (size_t i = 0; i < sizeof Rs / sizeof Rs[0]; i++) {
    /* images: x is input 0, the labels 1 */
    wants(img, "images wanted", 7, Rs[i], TRAIN, 20, 1, 0);
    wants(img, "no image wanted", 7, Rs[i], TRAIN, 20, 0, 0);
    wants(img, "images wanted after a batch", 7, Rs[i], TRAIN, 20, 1, 1);
    wants(img, "images wanted, evaluation pass", 5, Rs[i], EVAL, 2, 1, 0);
    wants(img, "images wanted, short last batch", 5, Rs[i], LOADER, 3, 1, 0);
    /* tokens: tokens, seg, pos, label; seg and pos not read */
    wants(tok, "tokens wanted", 6, Rs[i], TRAIN, 20, 1, 0);
    wants(tok, "tokens, evaluation pass", 5, Rs[i], EVAL, 2, 1, 0);
  }
  {
    gp_data d;
    gp_batch_source *s = reader(img, TRAIN, 7, &d);
    unsigned char used[GP_MAX_MODEL_INPUTS] = {1, 1};
    CHECK(gp_batch_source_want(s, used, 2, 2) == GP_ERR_USAGE &&
              gp_batch_source_want(s, used, 0, 0) == GP_ERR_USAGE,
          "want: a replica outside [0, replicas) refused");
    gp_data_close(&d);
  }
  targets(img);
  gp_model_free(img);
  gp_model_free(tok);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
