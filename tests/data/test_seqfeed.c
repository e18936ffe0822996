/* data/seqfeed: model input layouts by name, and rows of token ids. Packed rows are read
 * back segment by segment and compared with the corpus pairs they should hold: every kept
 * pair exactly once an epoch (train: but for the dropped remainder rows), positions from 0,
 * tgt_in = BOS + target, label = target + EOS, padding as documented; the packing fills the
 * rows; epochs are reproducible from (seed, epoch) and seek gives the same batches. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/spec/spec.h"
#include "data/seqfeed.h"
#include "tests/support/check.h"

static int failures, passes;

#define VOCAB 50
#define PAIRS 700
#define EOS 3
#define BOS 2
#define PAD 0

static gp_model *load(const char *inputs) {
  char text[2048];
  const char *first = strstr(inputs, "tgt_in") ? "tgt_in" : "tokens";
  snprintf(text, sizeof text,
           "name: t\ninputs:\n%s"
           "layers:\n  - {type: embedding, num_embeddings: 50, dim: 4, from: %s}\n"
           "  - {type: linear, out_features: 50}\n"
           "loss: {type: softmax_cross_entropy}\n",
           inputs, first);
  gp_model *m = NULL;
  if (gp_model_load_string(text, "t.yaml", NULL, 0, &m) != GP_OK) {
    printf("load: %s\n", gp_error_message());
    exit(1);
  }
  return m;
}

static const char *packed_nmt =
    "  src: {shape: [24], dtype: i32}\n  src_seg: {shape: [24], dtype: i32}\n"
    "  src_pos: {shape: [24], dtype: i32}\n  tgt_in: {shape: [20], dtype: i32}\n"
    "  tgt_seg: {shape: [20], dtype: i32}\n  tgt_pos: {shape: [20], dtype: i32}\n"
    "  label: {shape: [20], dtype: i32}\n";

static void layouts(void) {
  gp_seq_layout L;
  gp_model *m = load(packed_nmt);
  CHECK(gp_seq_is_sequence_model(m), "packed nmt is a sequence model");
  CHECK(gp_seq_layout_of(m, &L) == GP_OK && L.packed && L.S == 24 && L.T == 20, "packed layout");
  gp_model_free(m);
  m = load("  tokens: {shape: [16], dtype: i32}\n  label: {shape: [16], dtype: i32}\n");
  CHECK(gp_seq_layout_of(m, &L) == GP_OK && !L.packed && L.S == 0 && L.T == 16, "lm layout");
  gp_model_free(m);
  struct {
    const char *inputs, *msg;
  } bad[] = {
      {"  tgt_in: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n  words: {shape: "
       "[8], "
       "dtype: i32}\n",
       "input 'words' has no meaning for translation data"},
      {"  tgt_in: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n",
       "needs an input named 'src'"},
      {"  src: {shape: [8], dtype: i32}\n  tgt_in: {shape: [8], dtype: i32}\n",
       "needs an input named 'label'"},
      {"  src: {shape: [8], dtype: i32}\n  tgt_in: {shape: [8], dtype: i32}\n  tgt_mask: {shape: "
       "[9], dtype: i32}\n  label: {shape: [8], dtype: i32}\n",
       "input 'tgt_mask' has length 9 but the other target inputs 8"},
      {"  src: {shape: [8], dtype: i32}\n  src_seg: {shape: [8], dtype: i32}\n  tgt_in: {shape: "
       "[8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n",
       "'src_seg' (segments) needs 'src_pos'"},
      {"  src: {shape: [8], dtype: i32}\n  src_seg: {shape: [8], dtype: i32}\n  src_pos: {shape: "
       "[8], dtype: i32}\n  tgt_in: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n",
       "segment inputs on both sides"},
      {"  src: {shape: [8], dtype: i32}\n  src_mask: {shape: [8], dtype: i32}\n  src_seg: {shape: "
       "[8], dtype: i32}\n  src_pos: {shape: [8], dtype: i32}\n  tgt_in: {shape: [8], dtype: i32}\n"
       "  label: {shape: [8], dtype: i32}\n",
       "both mark padding"},
      {"  src: [8]\n  tgt_in: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n",
       "input 'src' must be i32"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    m = load(bad[i].inputs);
    gp_status s = gp_seq_layout_of(m, &L);
    CHECK(s == GP_ERR_SPEC && strstr(gp_error_message(), bad[i].msg) &&
              strstr(gp_error_message(), "t.yaml: "),
          "bad layout %zu: want '%s'", i, bad[i].msg);
    gp_model_free(m);
  }
}

/* A TSV corpus of PAIRS pairs: lengths 0..30 (a few longer than the rows), ids 4..VOCAB-1. */
static void make_corpus(const char *path, gp_token_corpus *c) {
  FILE *f = fopen(path, "w");
  gp_rng r;
  gp_rng_seed(&r, 11);
  for (int p = 0; p < PAIRS; p++) {
    int ns = (int)gp_rng_below(&r, p % 50 == 7 ? 40 : 23), nt = (int)gp_rng_below(&r, 20);
    for (int j = 0; j < ns; j++)
      fprintf(f, "%s%d", j ? " " : "", 4 + (int)gp_rng_below(&r, VOCAB - 4));
    fputc('\t', f);
    for (int j = 0; j < nt; j++)
      fprintf(f, "%s%d", j ? " " : "", 4 + (int)gp_rng_below(&r, VOCAB - 4));
    fputc('\n', f);
  }
  fclose(f);
  gp_tokens_opts o;
  gp_tokens_opts_default(&o);
  o.vocab = VOCAB;
  o.max_tokens = 1 << 20;
  if (gp_token_corpus_read(path, NULL, &o, c) != GP_OK) {
    printf("corpus: %s\n", gp_error_message());
    exit(1);
  }
}

typedef struct bufs {
  int32_t *in[7];
} bufs;

/* Reads row r of the last batch back: segment k must be the row's k-th pair as the feed
 * names it, laid out as documented; seen[pair] counts it. Returns the pairs found, -1 on a
 * layout error. */
static int check_row(const gp_token_corpus *c, const gp_seq_layout *L, const gp_seqfeed *f, bufs *b,
                     int64_t r, int *seen) {
  const int64_t *pp;
  int64_t np;
  gp_seqfeed_row_pairs(f, r, &pp, &np);
  const int32_t *src = b->in[L->input[GP_SEQ_SRC]] + r * L->S,
                *sseg = b->in[L->input[GP_SEQ_SRC_SEG]] + r * L->S,
                *spos = b->in[L->input[GP_SEQ_SRC_POS]] + r * L->S,
                *tin = b->in[L->input[GP_SEQ_TGT_IN]] + r * L->T,
                *tseg = b->in[L->input[GP_SEQ_TGT_SEG]] + r * L->T,
                *tpos = b->in[L->input[GP_SEQ_TGT_POS]] + r * L->T,
                *lab = b->in[L->input[GP_SEQ_LABEL]] + r * L->T;
  int64_t us = 0, ut = 0;
  int found = 0;
  for (int k = 1;; k++) {
    int64_t ls = 0, lt = 0;
    while (us + ls < L->S && sseg[us + ls] == k)
      ls++;
    while (ut + lt < L->T && tseg[ut + lt] == k)
      lt++;
    if (!ls && !lt) break;
    if (k > np) return -1;
    int64_t hit = pp[k - 1];
    if (c->src_off[hit + 1] - c->src_off[hit] != ls || c->tgt_off[hit + 1] - c->tgt_off[hit] != lt)
      return -1;
    if (memcmp(src + us, c->src + c->src_off[hit], (size_t)ls * 4) ||
        memcmp(lab + ut, c->tgt + c->tgt_off[hit], (size_t)lt * 4))
      return -1;
    for (int64_t j = 0; j < ls; j++)
      if (spos[us + j] != j) return -1;
    for (int64_t j = 0; j < lt; j++)
      if (tpos[ut + j] != j || tin[ut + j] != (j ? c->tgt[c->tgt_off[hit] + j - 1] : BOS))
        return -1;
    seen[hit]++;
    found++;
    us += ls;
    ut += lt;
  }
  if (found != np) return -1;
  for (int64_t j = us; j < L->S; j++)
    if (src[j] != PAD || sseg[j] || spos[j]) return -1;
  for (int64_t j = ut; j < L->T; j++)
    if (tin[j] != PAD || tseg[j] || tpos[j] || lab[j] != GP_SEQ_IGNORE) return -1;
  return found;
}

static void packing(const char *path) {
  gp_token_corpus c;
  make_corpus(path, &c);
  gp_model *m = load(packed_nmt);
  gp_seq_layout L;
  gp_seq_layout_of(m, &L);
  bufs b;
  for (int i = 0; i < 7; i++)
    b.in[i] = malloc(64 * 24 * sizeof(int32_t));
  int64_t long_pairs = 0;
  for (int64_t p = 0; p < c.pairs; p++)
    long_pairs += c.src_off[p + 1] - c.src_off[p] > L.S || c.tgt_off[p + 1] - c.tgt_off[p] > L.T;
  CHECK(long_pairs > 5, "the corpus has pairs too long for the rows (%lld)", (long long)long_pairs);

  /* train: two epochs, each kept pair at most once, all but the remainder rows' */
  gp_seqfeed_opts o = {.rows = 16, .train = 1, .seed = 5, .pad_id = PAD, .bos_id = BOS};
  gp_seqfeed *f;
  CHECK(gp_seqfeed_open(&c, &L, &o, &f) == GP_OK, "open train");
  gp_seqfeed_stats st;
  gp_seqfeed_stats_get(f, &st);
  CHECK(st.too_long == long_pairs, "too long %lld, want %lld", (long long)st.too_long,
        (long long)long_pairs);
  CHECK(gp_seqfeed_pairs(f) == c.pairs - long_pairs, "pairs kept");
  int64_t rows;
  double sf, tf;
  gp_seqfeed_fill(f, &rows, &sf, &tf);
  CHECK(tf > 0.9 && sf > 0.75, "packing fills the rows: source %.3f, target %.3f", sf, tf);
  int64_t nb = gp_seqfeed_batches(f);
  CHECK(nb == rows / 16, "batches %lld of %lld rows", (long long)nb, (long long)rows);
  int *seen = calloc((size_t)c.pairs, sizeof *seen);
  int32_t *first = malloc((size_t)nb * 16 * 24 * sizeof *first);
  for (int epoch = 0; epoch < 2; epoch++) {
    memset(seen, 0, (size_t)c.pairs * sizeof *seen);
    int bad = 0, pairs = 0;
    for (int64_t i = 0; i < nb; i++) {
      int64_t n;
      gp_seqfeed_next(f, (void *const *)b.in, &n);
      bad += n != 16;
      for (int64_t r = 0; r < n; r++) {
        int k = check_row(&c, &L, f, &b, r, seen);
        bad += k < 1;
        pairs += k > 0 ? k : 0;
      }
      if (epoch == 0) memcpy(first + i * 16 * 24, b.in[L.input[GP_SEQ_SRC]], 16 * 24 * 4);
    }
    int twice = 0;
    for (int64_t p = 0; p < c.pairs; p++)
      twice += seen[p] > 1;
    CHECK(!bad && !twice, "epoch %d: %d bad rows, %d pairs twice", epoch, bad, twice);
    CHECK(pairs > 0.9 * (double)(c.pairs - long_pairs) && pairs <= c.pairs - long_pairs,
          "epoch %d holds %d of %lld pairs", epoch, pairs, (long long)(c.pairs - long_pairs));
  }
  /* epoch 1 differs from epoch 0; a fresh feed seeking to (0, 3) gives epoch 0's batch 3 */
  int64_t e, idx;
  gp_seqfeed_tell(f, &e, &idx);
  CHECK(e == 1 && idx == nb, "position after two epochs: (%lld, %lld)", (long long)e,
        (long long)idx);
  gp_seqfeed_free(f);
  gp_seqfeed_open(&c, &L, &o, &f);
  gp_seqfeed_seek(f, 0, 3);
  int64_t n;
  gp_seqfeed_next(f, (void *const *)b.in, &n);
  CHECK(!memcmp(first + 3 * 16 * 24, b.in[L.input[GP_SEQ_SRC]], 16 * 24 * 4),
        "seek reproduces a batch");
  gp_seqfeed_seek(f, 1, 3);
  gp_seqfeed_next(f, (void *const *)b.in, &n);
  CHECK(memcmp(first + 3 * 16 * 24, b.in[L.input[GP_SEQ_SRC]], 16 * 24 * 4),
        "epoch 1 is packed in another order");
  CHECK(gp_seqfeed_seek(f, 0, nb + 1) == GP_ERR_USAGE, "seek past the epoch");
  gp_seqfeed_free(f);

  /* eval: one pass, every kept pair exactly once, then rows = 0 */
  o.train = 0;
  gp_seqfeed_open(&c, &L, &o, &f);
  memset(seen, 0, (size_t)c.pairs * sizeof *seen);
  int bad = 0, batches = 0;
  for (;;) {
    gp_seqfeed_next(f, (void *const *)b.in, &n);
    if (!n) break;
    batches++;
    for (int64_t r = 0; r < n; r++)
      bad += check_row(&c, &L, f, &b, r, seen) < 1;
  }
  int once = 0;
  for (int64_t p = 0; p < c.pairs; p++)
    once += seen[p] == 1;
  CHECK(!bad && once == c.pairs - long_pairs && batches == gp_seqfeed_batches(f),
        "eval pass: %d bad rows, %d of %lld pairs once", bad, once,
        (long long)(c.pairs - long_pairs));
  gp_seqfeed_free(f);

  /* one pair a row, truncated: every pair, in corpus order, long sources cut with EOS last */
  o.one_per_row = 1;
  o.truncate = 1;
  o.limit = 100;
  gp_seqfeed_open(&c, &L, &o, &f);
  int64_t next = 0;
  bad = 0;
  for (;;) {
    gp_seqfeed_next(f, (void *const *)b.in, &n);
    if (!n) break;
    for (int64_t r = 0; r < n; r++, next++) {
      const int64_t *pp;
      int64_t np;
      gp_seqfeed_row_pairs(f, r, &pp, &np);
      const int32_t *src = b.in[L.input[GP_SEQ_SRC]] + r * L.S;
      const int32_t *seg = b.in[L.input[GP_SEQ_SRC_SEG]] + r * L.S;
      int64_t ls = c.src_off[next + 1] - c.src_off[next], keep = ls < L.S ? ls : L.S;
      bad += np != 1 || pp[0] != next;
      bad += memcmp(src, c.src + c.src_off[next], (size_t)(keep - 1) * 4) != 0;
      bad += src[keep - 1] != EOS || seg[keep - 1] != 1 || (keep < L.S && seg[keep]);
    }
  }
  CHECK(!bad && next == 100, "one pair a row, truncated: %d bad, %lld rows", bad, (long long)next);
  gp_seqfeed_free(f);
  /* ordered by source length (in the row) for decoding: non-increasing, every pair once */
  o.by_source_length = 1;
  o.limit = 0;
  gp_seqfeed_open(&c, &L, &o, &f);
  memset(seen, 0, (size_t)c.pairs * sizeof *seen);
  int64_t prev = INT64_MAX, rows_seen = 0;
  bad = 0;
  for (;;) {
    gp_seqfeed_next(f, (void *const *)b.in, &n);
    if (!n) break;
    for (int64_t r = 0; r < n; r++, rows_seen++) {
      const int64_t *pp;
      int64_t np;
      gp_seqfeed_row_pairs(f, r, &pp, &np);
      int64_t ls = c.src_off[pp[0] + 1] - c.src_off[pp[0]];
      if (ls > L.S) ls = L.S; /* cut to the row */
      bad += np != 1 || ls > prev || seen[pp[0]]++;
      prev = ls;
    }
  }
  CHECK(!bad && rows_seen == c.pairs, "by source length: %d bad, %lld rows", bad,
        (long long)rows_seen);
  gp_seqfeed_free(f);
  o.one_per_row = 0;
  CHECK(gp_seqfeed_open(&c, &L, &o, &f) == GP_ERR_USAGE, "by_source_length needs one_per_row");
  o.by_source_length = 0;
  CHECK(gp_seqfeed_open(&c, &L, &o, &f) == GP_ERR_USAGE, "truncate needs one_per_row");
  o.truncate = 0;
  o.train = 1;
  o.rows = 1000;
  CHECK(gp_seqfeed_open(&c, &L, &o, &f) == GP_ERR_DATA &&
            strstr(gp_error_message(), "fewer than one batch"),
        "a train epoch shorter than a batch");
  free(seen);
  free(first);
  for (int i = 0; i < 7; i++)
    free(b.in[i]);
  gp_model_free(m);
  gp_token_corpus_free(&c);
}

int main(void) {
  layouts();
  char path[] = "/tmp/test_seqfeed_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  packing(path);
  unlink(path);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
