/* Translation token shards and batches: files written here (plain, gzip in two members, TSV,
 * gzip TSV) decode to the ids they were made from, with EOS appended; batches keep to the
 * token budget, place BOS/EOS and padding right, see every pair once an epoch, pad far less
 * than random batching, shuffle by (seed, epoch), split across replicas, resume exactly;
 * too-long pairs are counted and bad input is refused with FILE:LINE:COL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/rng.h"
#include "data/tokens.h"
#include "tests/support/check.h"

static int failures, passes;
static char dir[256];

#define VOCAB 1000
#define MAXN 4000

/* A corpus definition: lengths per pair (ids without EOS); ids are functions of (i, j). */
typedef struct def {
  int n;
  int ls[MAXN], lt[MAXN];
} def;

static int32_t id_src(int i, int j) {
  return (int32_t)((i * 131 + j * 17 + 5) % VOCAB);
}
static int32_t id_tgt(int i, int j) {
  return (int32_t)((i * 71 + j * 29 + 900) % VOCAB);
}

static const char *in_dir(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

/* gz: 0 plain, 1 gzip, 2 gzip in two members (split mid-text). */
static void write_file(const char *path, const char *text, size_t n, int gz) {
  if (!gz) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) exit(99);
    return;
  }
  size_t half = gz == 2 ? n / 2 : n;
  gzFile f = gzopen(path, "wb");
  if (!f || (half && gzwrite(f, text, (unsigned)half) != (int)half) || gzclose(f) != Z_OK) exit(99);
  if (gz == 2) {
    f = gzopen(path, "ab");
    if (!f || gzwrite(f, text + half, (unsigned)(n - half)) != (int)(n - half) ||
        gzclose(f) != Z_OK)
      exit(99);
  }
}

typedef struct text {
  char *p;
  size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) {
  va_list ap;
  if (t->cap - t->n < 64) {
    t->cap = t->cap ? t->cap * 2 : 1 << 16;
    t->p = realloc(t->p, t->cap);
    if (!t->p) exit(99);
  }
  va_start(ap, fmt);
  t->n += (size_t)vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
}

/* side 0 source, 1 target, 2 TSV; newline after the last line or not. */
static text make_text(const def *d, int side, int last_newline) {
  text t = {0};
  for (int i = 0; i < d->n; i++) {
    for (int k = 0; k < 2; k++) {
      if ((side == 0 && k == 1) || (side == 1 && k == 0)) continue;
      int len = k ? d->lt[i] : d->ls[i];
      for (int j = 0; j < len; j++)
        put(&t, j ? " %d" : "%d", k ? id_tgt(i, j) : id_src(i, j));
      if (side == 2 && k == 0) put(&t, "\t");
    }
    if (i + 1 < d->n || last_newline) put(&t, "\n");
  }
  return t;
}

static void write_def(const def *d, const char *src, const char *tgt, int gz) {
  for (int side = 0; side < 3; side++) {
    const char *p = side == 0 ? src : side == 1 ? tgt : src;
    if ((side == 2) != (tgt == NULL)) continue;
    text t = make_text(d, side, gz != 1);
    write_file(p, t.p, t.n, gz);
    free(t.p);
  }
}

static def mixed; /* 300 pairs of lengths 0..40 and 0..44 */

static void make_mixed(void) {
  mixed.n = 300;
  for (int i = 0; i < mixed.n; i++) {
    mixed.ls[i] = (i * 37 + 11) % 41;
    mixed.lt[i] = (mixed.ls[i] * 3 + i % 7) % 45;
  }
}

static gp_tokens_opts opts(void) {
  gp_tokens_opts o;
  gp_tokens_opts_default(&o);
  o.vocab = VOCAB;
  o.max_tokens = 256;
  return o;
}

/* Every kept pair equals the definition, EOS appended; kept[i] maps corpus pair -> def pair. */
static int corpus_matches(const gp_token_corpus *c, const def *d, const int *kept, int32_t eos) {
  int bad = 0;
  for (int64_t p = 0; p < c->pairs; p++) {
    int i = kept ? kept[p] : (int)p;
    int64_t ls = c->src_off[p + 1] - c->src_off[p], lt = c->tgt_off[p + 1] - c->tgt_off[p];
    bad += ls != d->ls[i] + 1 || lt != d->lt[i] + 1 || c->line[p] != i + 1;
    if (bad) break;
    for (int j = 0; j <= d->ls[i]; j++)
      bad += c->src[c->src_off[p] + j] != (j < d->ls[i] ? id_src(i, j) : eos);
    for (int j = 0; j <= d->lt[i]; j++)
      bad += c->tgt[c->tgt_off[p] + j] != (j < d->lt[i] ? id_tgt(i, j) : eos);
  }
  return bad;
}

static void test_decode(void) {
  gp_tokens_opts o = opts();
  const char *names[4][2] = {
      {"a.src", "a.tgt"}, {"b.src.gz", "b.tgt.gz"}, {"c.tsv", NULL}, {"d.tsv.gz", NULL}};
  int gz[4] = {0, 2, 0, 2};
  int64_t tok_s = 0, tok_t = 0;
  for (int i = 0; i < mixed.n; i++)
    tok_s += mixed.ls[i] + 1, tok_t += mixed.lt[i] + 1;
  for (int k = 0; k < 5; k++) {
    int f = k % 4; /* k == 4: plain TSV through one gzip member, no final newline */
    const char *src = in_dir(names[f][0]), *tgt = names[f][1] ? in_dir(names[f][1]) : NULL;
    write_def(&mixed, src, tgt, k == 4 ? 1 : gz[f]);
    gp_token_corpus c;
    CHECK(gp_token_corpus_read(src, tgt, &o, &c) == GP_OK, "%s reads", src);
    CHECK(c.pairs == 300 && c.lines == 300 && c.skipped == 0, "%s: %lld pairs", src,
          (long long)c.pairs);
    CHECK(c.pairs == 300 && corpus_matches(&c, &mixed, NULL, o.eos_id) == 0, "%s: ids", src);
    CHECK(c.src_tokens == tok_s && c.tgt_tokens == tok_t && c.max_src == 41 && c.max_tgt == 45,
          "%s: counts %lld %lld %d %d", src, (long long)c.src_tokens, (long long)c.tgt_tokens,
          c.max_src, c.max_tgt);
    gp_token_corpus_free(&c);
  }
  /* Other special ids, e.g. SentencePiece's defaults (eos 2). */
  o.eos_id = 2;
  gp_token_corpus c;
  CHECK(gp_token_corpus_read(in_dir("c.tsv"), NULL, &o, &c) == GP_OK &&
            corpus_matches(&c, &mixed, NULL, 2) == 0,
        "eos 2");
  gp_token_corpus_free(&c);
  gp_token_corpus_free(NULL);
}

typedef struct seen {
  int64_t batches, filler;
  int64_t descents; /* batches narrower than the one before: 0 when in length order */
  int64_t width;
  int64_t ids[MAXN * 4];
  int64_t n;
} seen;

/* Checks one batch's layout against the corpus; records its pairs. Returns mistakes. */
static int check_batch(const gp_token_corpus *c, const gp_tokens_opts *o, const gp_tokens_batch *b,
                       seen *s) {
  int bad = 0;
  s->batches++;
  if (b->B == 0) {
    s->filler++;
    return 0;
  }
  int64_t S = 0, T = 0, ns = 0, nt = 0;
  for (int64_t i = 0; i < b->B; i++) {
    int64_t p = b->pair[i], ls = c->src_off[p + 1] - c->src_off[p];
    int64_t lt = c->tgt_off[p + 1] - c->tgt_off[p];
    const int32_t *src = c->src + c->src_off[p], *tgt = c->tgt + c->tgt_off[p];
    S = ls > S ? ls : S;
    T = lt > T ? lt : T;
    ns += ls;
    nt += lt;
    for (int64_t j = 0; j < b->S; j++) {
      bad += b->src[i * b->S + j] != (j < ls ? src[j] : o->pad_id);
      bad += b->src_mask[i * b->S + j] != (j < ls);
    }
    bad += src[ls - 1] != o->eos_id || b->tgt_in[i * b->T] != o->bos_id;
    for (int64_t j = 0; j < b->T; j++) {
      bad += b->tgt_out[i * b->T + j] != (j < lt ? tgt[j] : o->pad_id);
      bad += b->tgt_in[i * b->T + j] != (j == 0 ? o->bos_id : j < lt ? tgt[j - 1] : o->pad_id);
      bad += b->tgt_mask[i * b->T + j] != (j < lt);
    }
    if (s->n < MAXN * 4) s->ids[s->n++] = p;
  }
  int64_t m = o->pad_multiple, w = b->S > b->T ? b->S : b->T;
  s->descents += w < s->width;
  s->width = w;
  bad += b->S != (S + m - 1) / m * m || b->T != (T + m - 1) / m * m;
  bad += b->B * (b->S > b->T ? b->S : b->T) > o->max_tokens;
  bad += o->max_batch > 0 && b->B > o->max_batch;
  bad += b->src_tokens != ns || b->tgt_tokens != nt;
  return bad;
}

/* Runs one epoch of an iterator (the count of batches it promised). */
static int run_epoch(const gp_token_corpus *c, const gp_tokens_opts *o, gp_tokens *t, seen *s) {
  gp_tokens_batch b = {0};
  int bad = 0, more = 1;
  for (int64_t k = 0; k < gp_tokens_batches(t); k++) {
    if (gp_tokens_next(t, &b, &more) != GP_OK || !more) bad++;
    bad += check_batch(c, o, &b, s);
  }
  gp_tokens_batch_free(&b);
  return bad;
}

static int count_each(const seen *s, int64_t n, int64_t *missing) {
  static int cnt[MAXN];
  memset(cnt, 0, sizeof cnt);
  int twice = 0;
  for (int64_t i = 0; i < s->n; i++)
    twice += ++cnt[s->ids[i]] > 1;
  *missing = 0;
  for (int64_t p = 0; p < n; p++)
    *missing += cnt[p] == 0;
  return twice;
}

static void test_batches(void) {
  gp_token_corpus c;
  gp_tokens_opts o = opts();
  if (gp_token_corpus_read(in_dir("c.tsv"), NULL, &o, &c) != GP_OK) {
    CHECK(0, "c.tsv");
    return;
  }
  for (int k = 0; k < 4; k++) {
    o.train = k & 1;
    o.pad_multiple = k & 2 ? 8 : 1;
    o.max_batch = k == 3 ? 5 : 0;
    gp_tokens *t = NULL;
    CHECK(gp_tokens_open(&c, &o, &t) == GP_OK, "open %d", k);
    if (!t) continue;
    for (int e = 0; e < 2; e++) { /* train: the second epoch begins by itself */
      static seen s;
      memset(&s, 0, sizeof s);
      int bad = run_epoch(&c, &o, t, &s);
      int64_t missing, twice = count_each(&s, c.pairs, &missing);
      CHECK(bad == 0 && twice == 0 && missing == 0 && s.filler == 0,
            "case %d epoch %d: %d bad batches, %lld twice, %lld missing", k, e, bad,
            (long long)twice, (long long)missing);
      /* eval in length order; train in a shuffled batch order */
      CHECK(o.train ? s.descents > s.batches / 4 : s.descents == 0, "case %d: %lld descents", k,
            (long long)s.descents);
      int64_t ep, ix;
      gp_tokens_tell(t, &ep, &ix);
      CHECK(ep == (o.train ? e : 0) && ix == gp_tokens_batches(t), "tell %lld %lld", (long long)ep,
            (long long)ix);
      if (!o.train) {
        gp_tokens_batch b = {0};
        int more = 1;
        CHECK(gp_tokens_next(t, &b, &more) == GP_OK && !more && b.B == 0, "eval ends");
        CHECK(gp_tokens_next(t, &b, &more) == GP_OK && !more, "eval stays ended");
        CHECK(gp_tokens_seek(t, 0, 0) == GP_OK, "rewind");
        gp_tokens_batch_free(&b);
      }
    }
    gp_tokens_free(t);
  }
  gp_token_corpus_free(&c);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Padding of fixed-budget batches over random order, computed here, versus the loader's. */
static void test_padding(void) {
  static def d;
  gp_rng r;
  gp_rng_seed(&r, 5);
  d.n = 3000;
  for (int i = 0; i < d.n; i++) {
    d.ls[i] = 1 + (int)gp_rng_below(&r, 100);
    d.lt[i] = d.ls[i] * (8 + (int)gp_rng_below(&r, 5)) / 10;
  }
  const char *p = in_dir("pad.tsv.gz");
  write_def(&d, p, NULL, 1);
  gp_tokens_opts o = opts();
  o.max_tokens = 1024;
  o.train = 1;
  gp_token_corpus c;
  gp_tokens *t = NULL;
  if (gp_token_corpus_read(p, NULL, &o, &c) != GP_OK || gp_tokens_open(&c, &o, &t) != GP_OK) {
    CHECK(0, "pad corpus");
    gp_token_corpus_free(&c);
    return;
  }
  double real = 0, slots = 0;
  gp_tokens_batch b = {0};
  int more;
  /* Two epochs: the same batch shapes (cut once by length), but pairs of equal lengths
   * trade places, so some pairs get other batch-mates. mate[e][p]: smallest pair with p. */
  static int64_t mate[2][MAXN], shape[2][MAXN];
  for (int e = 0; e < 2; e++)
    for (int64_t k = 0; k < gp_tokens_batches(t); k++) {
      if (gp_tokens_next(t, &b, &more) != GP_OK) break;
      if (e == 0) real += (double)(b.src_tokens + b.tgt_tokens);
      if (e == 0) slots += (double)(b.B * (b.S + b.T));
      int64_t lo = b.pair[0];
      for (int64_t i = 0; i < b.B; i++)
        lo = b.pair[i] < lo ? b.pair[i] : lo;
      for (int64_t i = 0; i < b.B; i++)
        mate[e][b.pair[i]] = lo;
      shape[e][k] = (b.B * 1000 + b.S) * 1000 + b.T;
    }
  double bucketed = 1 - real / slots;
  int64_t nb = gp_tokens_batches(t), moved = 0, same_shapes = 1;
  for (int i = 0; i < d.n; i++)
    moved += mate[0][i] != mate[1][i];
  for (int e = 0; e < 2; e++)
    qsort(shape[e], (size_t)nb, sizeof shape[e][0], cmp_i64);
  same_shapes = memcmp(shape[0], shape[1], (size_t)nb * sizeof shape[0][0]) == 0;
  CHECK(moved > 0 && moved < d.n / 2 && same_shapes, "runs shuffled: %lld moved", (long long)moved);
  int perm[MAXN];
  for (int i = 0; i < d.n; i++)
    perm[i] = i;
  for (int i = d.n - 1; i > 0; i--) {
    int j = (int)gp_rng_below(&r, (uint64_t)i + 1), x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  double rreal = 0, rslots = 0;
  for (int i = 0; i < d.n;) {
    int S = 0, T = 0, B = 0;
    double sum = 0;
    for (; i < d.n; i++, B++) {
      int s = d.ls[perm[i]] + 1, tt = d.lt[perm[i]] + 1;
      int S2 = s > S ? s : S, T2 = tt > T ? tt : T;
      if (B > 0 && (B + 1) * (S2 > T2 ? S2 : T2) > o.max_tokens) break;
      S = S2, T = T2, sum += s + tt;
    }
    rreal += sum;
    rslots += (double)B * (S + T);
  }
  double random = 1 - rreal / rslots;
  printf("padding: bucketed %.4f, random batches %.4f (%lld batches)\n", bucketed, random,
         (long long)gp_tokens_batches(t));
  CHECK(bucketed < 0.08 && random > 0.3 && bucketed < random / 5, "padding %.4f vs %.4f", bucketed,
        random);
  gp_tokens_batch_free(&b);
  gp_tokens_free(t);
  gp_token_corpus_free(&c);
}

/* The pair ids of the next nbatch batches (-1 ends a batch). */
static int64_t trace(gp_tokens *t, int64_t nbatch, int64_t *out, int64_t cap) {
  gp_tokens_batch b = {0};
  int64_t n = 0;
  int more;
  for (int64_t k = 0; k < nbatch && gp_tokens_next(t, &b, &more) == GP_OK; k++) {
    for (int64_t i = 0; i < b.B && n < cap; i++)
      out[n++] = b.pair[i] * 1000 + b.src[i * b.S] % 1000; /* the pair and its first id */
    if (n < cap) out[n++] = -1;
  }
  gp_tokens_batch_free(&b);
  return n;
}

static void test_order(void) {
  gp_token_corpus c;
  gp_tokens_opts o = opts();
  o.train = 1;
  o.seed = 7;
  if (gp_token_corpus_read(in_dir("a.src"), in_dir("a.tgt"), &o, &c) != GP_OK) {
    CHECK(0, "a.src");
    return;
  }
  static int64_t a[3][MAXN * 2], b[MAXN * 2];
  gp_tokens *t1 = NULL, *t2 = NULL;
  if (gp_tokens_open(&c, &o, &t1) != GP_OK || gp_tokens_open(&c, &o, &t2) != GP_OK) {
    CHECK(0, "open");
    return;
  }
  int64_t per = gp_tokens_batches(t1), n[3];
  for (int e = 0; e < 3; e++) /* epochs 0, 1, 2 */
    n[e] = trace(t1, per, a[e], MAXN * 2);
  CHECK(trace(t2, per, b, MAXN * 2) == n[0] && memcmp(a[0], b, (size_t)n[0] * 8) == 0,
        "same seed, same epoch 0");
  CHECK(memcmp(a[0], a[1], (size_t)n[0] * 8) != 0, "epoch 1 differs from epoch 0");
  /* resume: from a saved position mid-epoch-1, and from the end of an epoch */
  for (int64_t at = 0; at <= per; at += per / 3 + 1) {
    CHECK(gp_tokens_seek(t2, 1, at) == GP_OK, "seek");
    int64_t m = trace(t2, per - at + per, b, MAXN * 2), skip = 0;
    for (int64_t k = 0, bb = 0; bb < at; k++) /* the first `at` batches of epoch 1 */
      if (a[1][k] == -1) bb++, skip = k + 1;
    CHECK(m == n[1] - skip + n[2] && memcmp(b, a[1] + skip, (size_t)(n[1] - skip) * 8) == 0 &&
              memcmp(b + n[1] - skip, a[2], (size_t)n[2] * 8) == 0,
          "resume at (1, %lld)", (long long)at);
  }
  int64_t ep, ix;
  gp_tokens_seek(t2, 1, 2);
  gp_tokens_tell(t2, &ep, &ix);
  CHECK(ep == 1 && ix == 2, "tell after seek");
  CHECK(gp_tokens_seek(t2, 0, per + 1) == GP_ERR_USAGE && gp_tokens_seek(t2, -1, 0) == GP_ERR_USAGE,
        "bad seeks");
  gp_tokens_free(t2);
  o.seed = 8;
  CHECK(gp_tokens_open(&c, &o, &t2) == GP_OK, "open seed 8");
  CHECK(t2 && trace(t2, per, b, MAXN * 2) == n[0] && memcmp(a[0], b, (size_t)n[0] * 8) != 0,
        "another seed, another order");
  gp_tokens_free(t2);
  gp_tokens_free(t1);
  gp_token_corpus_free(&c);
}

/* Replicas: replica r's batch j is batch j * R + r of the single stream with the same seed;
 * together they cover the epoch once (train: but for the nb % R dropped batches). */
static void test_replicas(void) {
  gp_token_corpus c;
  gp_tokens_opts o = opts();
  o.seed = 7;
  if (gp_token_corpus_read(in_dir("b.src.gz"), in_dir("b.tgt.gz"), &o, &c) != GP_OK) {
    CHECK(0, "b.src.gz");
    return;
  }
  static int64_t full[MAXN * 2], want[MAXN * 2], got[MAXN * 2];
  static seen all[3], u;
  for (int train = 0; train < 2; train++) {
    o.train = train;
    o.replicas = 1;
    o.replica = 0;
    gp_tokens *one = NULL;
    if (gp_tokens_open(&c, &o, &one) != GP_OK) {
      CHECK(0, "open");
      continue;
    }
    int64_t nb = gp_tokens_total_batches(one), per = train ? nb / 3 : (nb + 2) / 3;
    int64_t nf = trace(one, nb, full, MAXN * 2), covered = 0, dropped = 0;
    for (int64_t j = 0, bi = 0; j < nf; j++)
      if (full[j] == -1)
        bi++;
      else if (bi >= per * 3)
        dropped++;
    int bad = 0;
    for (int r = 0; r < 3; r++) {
      o.replicas = 3;
      o.replica = r;
      gp_tokens *t = NULL;
      CHECK(gp_tokens_open(&c, &o, &t) == GP_OK, "replica %d", r);
      if (!t) continue;
      CHECK(gp_tokens_batches(t) == per, "replica %d: %lld batches", r,
            (long long)gp_tokens_batches(t));
      memset(&all[r], 0, sizeof all[r]);
      bad += run_epoch(&c, &o, t, &all[r]);
      covered += all[r].n;
      int64_t nw = 0, bi = 0;
      for (int64_t j = 0; j < nf; j++) {
        if (bi % 3 == r && bi < per * 3) want[nw++] = full[j];
        if (full[j] == -1) bi++;
      }
      for (; bi < per * 3; bi++) /* eval: an empty batch fills the last round */
        if (bi % 3 == r) want[nw++] = -1;
      gp_tokens_seek(t, 0, 0);
      int64_t ng = trace(t, per, got, MAXN * 2);
      bad += ng != nw || memcmp(got, want, (size_t)nw * sizeof *got) != 0;
      gp_tokens_free(t);
    }
    int64_t missing;
    u.n = 0;
    for (int r = 0; r < 3; r++)
      for (int64_t i = 0; i < all[r].n; i++)
        u.ids[u.n++] = all[r].ids[i];
    int twice = count_each(&u, c.pairs, &missing);
    CHECK(bad == 0 && twice == 0 && missing == dropped && covered + missing == c.pairs &&
              (dropped > 0) == (train && nb % 3 != 0),
          "replicas (train %d, %lld batches): %d bad, %d twice, %lld missing, %lld dropped", train,
          (long long)nb, bad, twice, (long long)missing, (long long)dropped);
    CHECK(all[0].filler + all[1].filler + all[2].filler == (train ? 0 : per * 3 - nb),
          "fillers (train %d)", train);
    gp_tokens_free(one);
  }
  gp_token_corpus_free(&c);
}

static void test_skips(void) {
  const char *src = in_dir("a.src"), *tgt = in_dir("a.tgt");
  for (int k = 0; k < 2; k++) {
    gp_tokens_opts o = opts();
    if (k == 0) {
      o.max_len = 20; /* EOS included */
    } else {
      o.max_tokens = 30; /* with pad_multiple 8: a side of more than 24 tokens cannot fit */
      o.pad_multiple = 8;
    }
    static int kept[MAXN];
    int nk = 0, first = -1;
    for (int i = 0; i < mixed.n; i++) {
      int longest = (mixed.ls[i] > mixed.lt[i] ? mixed.ls[i] : mixed.lt[i]) + 1;
      if (k == 0 ? longest <= 20 : (longest + 7) / 8 * 8 <= 30)
        kept[nk++] = i;
      else if (first < 0)
        first = i;
    }
    gp_token_corpus c;
    CHECK(gp_token_corpus_read(src, tgt, &o, &c) == GP_OK, "read %d", k);
    CHECK(c.pairs == nk && c.skipped == mixed.n - nk && c.lines == mixed.n && nk > 50 &&
              c.skipped > 50,
          "case %d: %lld kept (want %d), %lld skipped", k, (long long)c.pairs, nk,
          (long long)c.skipped);
    CHECK(c.pairs == nk && corpus_matches(&c, &mixed, kept, o.eos_id) == 0, "kept ids %d", k);
    gp_tokens *t = NULL;
    CHECK(gp_tokens_open(&c, &o, &t) == GP_OK, "open %d", k);
    static seen s;
    memset(&s, 0, sizeof s);
    int64_t missing;
    CHECK(t && run_epoch(&c, &o, t, &s) == 0 && count_each(&s, c.pairs, &missing) == 0 &&
              missing == 0,
          "batches after skipping %d", k);
    gp_tokens_free(t);
    /* The same pairs refused: the first too-long line, naming the side that is too long. */
    o.skip_long = 0;
    char want[700];
    int src_side = mixed.ls[first] >= mixed.lt[first];
    int len = (src_side ? mixed.ls[first] : mixed.lt[first]) + 1;
    if (k == 0)
      snprintf(want, sizeof want,
               "%s:%d:1: sentence of %d tokens (EOS included) is longer than max_len 20",
               src_side ? src : tgt, first + 1, len);
    else
      snprintf(want, sizeof want,
               "%s:%d:1: sentence of %d tokens (EOS included, padded %d) does not fit "
               "max_tokens 30",
               src_side ? src : tgt, first + 1, len, (len + 7) / 8 * 8);
    gp_token_corpus_free(&c);
    CHECK(gp_token_corpus_read(src, tgt, &o, &c) == GP_ERR_DATA &&
              strcmp(gp_error_message(), want) == 0,
          "refused %d: want '%s'", k, want);
    CHECK(c.src == NULL && c.pairs == 0, "nothing left on error");
  }
}

/* Reading must fail with status st and exactly the message want (PATH replaced by path). */
static void expect_err(const char *src, const char *tgt, const gp_tokens_opts *o, gp_status st,
                       const char *want) {
  gp_token_corpus c;
  gp_error_clear();
  gp_status got = gp_token_corpus_read(src, tgt, o, &c);
  CHECK(got == st, "%s: status %s", src, gp_status_name(got));
  CHECK(strcmp(gp_error_message(), want) == 0, "want '%s'", want);
  if (got == GP_OK) gp_token_corpus_free(&c);
}

static void bad_text(const char *text, int tsv, const char *what) {
  const char *p = in_dir(tsv ? "bad.tsv" : "bad.ids");
  write_file(p, text, strlen(text), 0);
  gp_tokens_opts o = opts();
  char want[700];
  snprintf(want, sizeof want, "%s:%s", p, what);
  expect_err(p, tsv ? NULL : in_dir("a.tgt"), &o, GP_ERR_DATA, want);
}

/* The last message is "PATH:LINE:COL: ... after N bytes": LINE and COL must be where the
 * text stood after its first N bytes. */
static void expect_where(const char *path, const text *t, const char *what) {
  const char *m = gp_error_message(), *after = strstr(m, "after ");
  long long line = 0, col = 0, n = -1;
  size_t pl = strlen(path);
  CHECK(strncmp(m, path, pl) == 0 && sscanf(m + pl, ":%lld:%lld:", &line, &col) == 2 && after &&
            sscanf(after, "after %lld bytes", &n) == 1 && n > 1000 && (size_t)n <= t->n &&
            strstr(m, what),
        "'%s' lacks its place or '%s'", m, what);
  long long want_line = 1, want_col = 1;
  for (long long i = 0; i < n && (size_t)i < t->n; i++)
    if (t->p[i] == '\n')
      want_line++, want_col = 1;
    else
      want_col++;
  CHECK(line == want_line && col == want_col, "'%s': want %lld:%lld", m, want_line, want_col);
}

static void test_bad(void) {
  bad_text("1 2 x\n", 0, "1:5: expected a digit, space or newline, found 'x'");
  bad_text("1 2\n1  2\n", 0, "2:3: expected an id, found a space");
  bad_text(" 1\n", 0, "1:1: expected an id, found a space");
  bad_text("1 \n", 0, "1:3: expected an id, found the end of the line");
  bad_text("1 2 ", 0, "1:5: expected an id, found the end of the line");
  bad_text("1 2\n3 9999\n", 0, "2:3: id 9999 is >= the vocabulary size 1000");
  bad_text("1000", 0, "1:1: id 1000 is >= the vocabulary size 1000");
  bad_text("5 12345678901234567890\n", 0, "1:3: id of 20 digits is >= the vocabulary size 1000");
  bad_text("1 2\r\n", 0, "1:4: expected a digit, space or newline, found byte 0x0d");
  bad_text("-1\n", 0, "1:1: expected a digit, space or newline, found '-'");
  bad_text("1\t2\n", 0, "1:2: unexpected TAB (a TSV file was not asked for)");
  bad_text("", 0, "1:1: empty file");
  bad_text("1 2\t3\n4 5\n", 1, "2:4: no TAB: a TSV line is source ids, TAB, target ids");
  bad_text("1\t2\t3\n", 1, "1:4: a second TAB");
  bad_text("1 \t2\n", 1, "1:3: expected an id, found a TAB");

  /* line counts */
  const char *s3 = in_dir("three"), *s2 = in_dir("two");
  write_file(s3, "1\n2\n3\n", 6, 0);
  write_file(s2, "1\n2", 3, 2);
  gp_tokens_opts o = opts();
  char want[1200];
  snprintf(want, sizeof want, "%s:3:1: line 3 has no partner: %s has only 2 lines", s3, s2);
  expect_err(s3, s2, &o, GP_ERR_DATA, want);
  snprintf(want, sizeof want, "%s:3:1: line 3 has no partner: %s has only 2 lines", s3, s2);
  expect_err(s2, s3, &o, GP_ERR_DATA, want);

  /* empty gzip; a gzip stream cut short and one damaged: where in the text it broke */
  const char *p = in_dir("empty.gz");
  write_file(p, "", 0, 1);
  snprintf(want, sizeof want, "%s:1:1: empty file", p);
  expect_err(p, NULL, &o, GP_ERR_DATA, want);
  text t = {0};
  gp_rng r;
  gp_rng_seed(&r, 3);
  for (int i = 0; i < 60000; i++)
    put(&t, "%d %d\t%d\n", (int)gp_rng_below(&r, 1000), i % 1000, (int)gp_rng_below(&r, 1000));
  p = in_dir("cut.tsv.gz");
  write_file(p, t.p, t.n, 2);
  FILE *f = fopen(p, "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *raw = malloc((size_t)n);
  if (fread(raw, 1, (size_t)n, f) != (size_t)n) exit(99);
  fclose(f);
  write_file(p, (char *)raw, (size_t)n * 3 / 4, 0);
  gp_token_corpus c;
  CHECK(gp_token_corpus_read(p, NULL, &o, &c) == GP_ERR_DATA, "cut gzip");
  expect_where(p, &t, "truncated");
  raw[n - 8] ^= 1; /* the last member's CRC: found after all of the text was parsed */
  write_file(p, (char *)raw, (size_t)n, 0);
  CHECK(gp_token_corpus_read(p, NULL, &o, &c) == GP_ERR_DATA, "corrupt gzip");
  expect_where(p, &t, "corrupt gzip data");
  free(raw);
  /* an error far into a two-member file: the line count runs across chunks and members */
  memcpy(t.p + t.n - 3000, "x", 1);
  int64_t want_line = 1, want_col = 1;
  for (size_t i = 0; i < t.n - 3000; i++)
    if (t.p[i] == '\n')
      want_line++, want_col = 1;
    else
      want_col++;
  write_file(p, t.p, t.n, 2);
  snprintf(want, sizeof want, "%s:%lld:%lld: expected a digit, space or newline, found 'x'", p,
           (long long)want_line, (long long)want_col);
  expect_err(p, NULL, &o, GP_ERR_DATA, want);
  free(t.p);

  p = in_dir("missing.ids");
  CHECK(gp_token_corpus_read(p, NULL, &o, &c) == GP_ERR_DATA &&
            strstr(gp_error_message(), "cannot open") && strstr(gp_error_message(), p),
        "missing file");

  /* options */
  gp_tokens_opts b = o;
  b.vocab = 0;
  expect_err(s3, s3, &b, GP_ERR_USAGE, "tokens: vocab 0 must be > 0");
  b = o;
  b.eos_id = VOCAB;
  expect_err(s3, s3, &b, GP_ERR_USAGE, "tokens: eos_id 1000 must be in [0, vocab 1000)");
  b = o;
  b.replica = 2;
  b.replicas = 2;
  expect_err(s3, s3, &b, GP_ERR_USAGE, "tokens: replica 2 of 2 is not in [0, replicas)");
  b = o;
  b.max_tokens = 0;
  expect_err(s3, s3, &b, GP_ERR_USAGE, "tokens: max_tokens 0 must be in [pad_multiple, 2^31)");
  /* an iterator with options the corpus was not read with */
  CHECK(gp_token_corpus_read(in_dir("a.src"), in_dir("a.tgt"), &o, &c) == GP_OK, "a");
  gp_tokens *it = NULL;
  b = o;
  b.max_tokens = 16;
  CHECK(gp_tokens_open(&c, &b, &it) == GP_ERR_USAGE && it == NULL &&
            strstr(gp_error_message(), "does not fit max_tokens 16"),
        "pair too long for the iterator");
  b = o;
  b.train = 1;
  b.replicas = 1000;
  b.replica = 999;
  CHECK(gp_tokens_open(&c, &b, &it) == GP_ERR_USAGE && strstr(gp_error_message(), "fewer than"),
        "more replicas than batches");
  b.train = 0; /* eval: replicas past the end see only an empty batch */
  CHECK(gp_tokens_open(&c, &b, &it) == GP_OK && gp_tokens_batches(it) == 1, "eval replicas");
  gp_tokens_batch bt = {0};
  int more = 0;
  CHECK(it && gp_tokens_next(it, &bt, &more) == GP_OK && more && bt.B == 0, "filler batch");
  CHECK(it && gp_tokens_next(it, &bt, &more) == GP_OK && !more, "then the end");
  gp_tokens_batch_free(&bt);
  gp_tokens_free(it);
  gp_token_corpus_free(&c);

  /* empty lines are empty sentences: EOS alone */
  write_file(s3, "\n5\n", 3, 0);
  write_file(s2, "7\n\n", 3, 0);
  CHECK(gp_token_corpus_read(s3, s2, &o, &c) == GP_OK && c.pairs == 2 && c.src_off[1] == 1 &&
            c.src[0] == 3 && c.src[1] == 5 && c.tgt[0] == 7 && c.tgt_off[2] == 3 && c.tgt[2] == 3,
        "empty sentences");
  gp_token_corpus_free(&c);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gp_tokens_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  make_mixed();
  test_decode();
  test_batches();
  test_padding();
  test_order();
  test_replicas();
  test_skips();
  test_bad();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
