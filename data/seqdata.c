/* Sequence-model data: corpora (token-id files or synthetic pairs), packed training rows and
 * evaluation passes as batch sources, and the rows greedy decoding reads. */
#include "data/seqdata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/rng.h"

enum { TRAIN = GP_SEQ_TRAIN, EVAL = GP_SEQ_EVAL, TEST = GP_SEQ_TEST, SPLITS = GP_SEQ_SPLITS };

typedef struct lines {
  char **line;
  int64_t n;
} lines;

/* A batch source over one feed: a split's rows, or (decoding) one pair a row. */
typedef struct feed_src {
  gp_seqdata *d;
  int which;
  gp_seqfeed *feed;
  int own_feed; /* decoding's feed, opened for it */
  gp_batch_buffers buf;
  unsigned char skip[GP_MAX_MODEL_INPUTS]; /* inputs not read (gp_batch_source_want) */
} feed_src;

struct gp_seqdata {
  const gp_model *m;
  gp_seq_layout L;
  int synthetic;
  const char *split[SPLITS];
  gp_token_corpus corp[SPLITS];
  gp_seqfeed *feed[SPLITS]; /* packed rows (train), loss passes (eval, test) */
  gp_batch_source *src[SPLITS];
  int64_t batch;
  int32_t pad, bos, eos, vocab;
  lines pieces;       /* the vocabulary's pieces (not synthetic) */
  lines refs[SPLITS]; /* reference text of eval and test (translation, not synthetic) */
};

static void lines_free(lines *l) {
  for (int64_t i = 0; i < l->n; i++)
    free(l->line[i]);
  free(l->line);
  memset(l, 0, sizeof *l);
}

/* Every line of a text file, without its newline. */
static gp_status lines_read(const char *path, lines *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return GP_ERR(GP_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return GP_ERR(GP_ERR_DATA, "%s: not a regular file", path);
  }
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  int64_t cap_n = 0;
  gp_status s = GP_OK;
  while (s == GP_OK && (len = getline(&buf, &cap, f)) >= 0) {
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
      buf[--len] = 0;
    if (out->n == cap_n) {
      cap_n = cap_n ? 2 * cap_n : 1024;
      char **nl = realloc(out->line, (size_t)cap_n * sizeof *nl);
      if (!nl) {
        s = GP_ERR(GP_ERR_NOMEM, "out of memory reading %s", path);
        break;
      }
      out->line = nl;
    }
    if (!(out->line[out->n] = strdup(buf)))
      s = GP_ERR(GP_ERR_NOMEM, "out of memory reading %s", path);
    else
      out->n++;
  }
  free(buf);
  fclose(f);
  if (s != GP_OK) lines_free(out);
  return s;
}

/* A synthetic sentence's length in tokens, EOS included: 2 to lim, or lim itself when that is
 * 0 or 1 (the rng is not drawn then: a bound of 0 divides by zero). */
static int64_t synthetic_len(gp_rng *r, int64_t lim) {
  if (lim <= 1) return lim;
  return 2 + (int64_t)gp_rng_below(r, (uint64_t)(lim - 1));
}

/* Random pairs of the model's lengths: ids in [4, V) (0..3 are the special ids), lengths
 * (EOS included) uniform in [2, S] and [2, T]
 * (just EOS for a length of 1). */
static gp_status synthetic_corpus(const gp_seq_layout *L, int32_t vocab, int64_t pairs,
                                  uint64_t seed, int32_t eos, gp_token_corpus *c) {
  memset(c, 0, sizeof *c);
  int64_t S = L->S ? L->S : 2, T = L->T;
  c->pairs = c->lines = pairs;
  c->src = malloc((size_t)(pairs * S) * sizeof *c->src);
  c->tgt = malloc((size_t)(pairs * T) * sizeof *c->tgt);
  c->src_off = malloc((size_t)(pairs + 1) * sizeof *c->src_off);
  c->tgt_off = malloc((size_t)(pairs + 1) * sizeof *c->tgt_off);
  c->line = malloc((size_t)pairs * sizeof *c->line);
  if (!c->src || !c->tgt || !c->src_off || !c->tgt_off || !c->line) {
    gp_token_corpus_free(c);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for synthetic pairs");
  }
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(seed, 0x5157e71cULL));
  int32_t lo = vocab > 4 ? 4 : 0;
  c->src_off[0] = c->tgt_off[0] = 0;
  for (int64_t p = 0; p < pairs; p++) {
    int64_t *off[2] = {c->src_off, c->tgt_off};
    int32_t *ids[2] = {c->src, c->tgt};
    int64_t lim[2] = {L->S, T};
    for (int side = 0; side < 2; side++) {
      int64_t n = synthetic_len(&r, lim[side]);
      int32_t *d = ids[side] + off[side][p];
      for (int64_t j = 0; j + 1 < n; j++)
        d[j] = lo + (int32_t)gp_rng_below(&r, (uint64_t)(vocab - lo));
      if (n) d[n - 1] = eos;
      off[side][p + 1] = off[side][p] + n;
    }
    c->line[p] = p + 1;
  }
  c->src_tokens = c->src_off[pairs];
  c->tgt_tokens = c->tgt_off[pairs];
  return GP_OK;
}

/* The vocabulary size the model predicts: its output's last dimension. */
static int32_t model_vocab(const gp_model *m) {
  const gp_layer *out = &m->nodes[m->output_node].layer;
  return (int32_t)out->out_shape.d[out->out_shape.ndim - 1];
}

/* Where the vocabulary holds SentencePiece's control pieces, the data section's ids must be
 * theirs: ids made with SentencePiece's defaults (unk 0, bos 1, eos 2) read with the defaults
 * here (bos 2, eos 3) would append a word as EOS and decode until the model writes it. */
static gp_status check_special_ids(const char *path, const gp_seqdata *d) {
  const lines *pieces = &d->pieces;
  const char *piece[3] = {"<pad>", "<s>", "</s>"}, *key[3] = {"pad_id", "bos_id", "eos_id"};
  const int32_t id[3] = {d->pad, d->bos, d->eos};
  for (int k = 0; k < 3; k++) /* named here: the token reader's check names no file */
    if (id[k] >= pieces->n)
      return GP_ERR(GP_ERR_DATA, "%s: holds %lld piece%s (ids 0 to %lld), but data.%s is %d", path,
                    (long long)pieces->n, pieces->n == 1 ? "" : "s", (long long)pieces->n - 1,
                    key[k], (int)id[k]);
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < pieces->n; i++)
      if (i != id[k] && !strcmp(pieces->line[i], piece[k]))
        return GP_ERR(GP_ERR_DATA,
                      "%s:%lld: the piece %s is id %lld, but data.%s is %d (set data.%s: %lld)",
                      path, (long long)i + 1, piece[k], (long long)i, key[k], (int)id[k], key[k],
                      (long long)i);
  return GP_OK;
}

static gp_status read_corpora(gp_seqdata *d) {
  const gp_data_spec *ds = &d->m->data;
  char path[1100], src[1100];
  snprintf(path, sizeof path, "%s/%s", ds->path, ds->vocab_file);
  GP_TRY(lines_read(path, &d->pieces));
  if (d->pieces.n == 0) return GP_ERR(GP_ERR_DATA, "%s: holds no pieces", path);
  if (d->pieces.n > model_vocab(d->m))
    return GP_ERR(GP_ERR_DATA, "%s: %lld pieces, more than the model's output of %d", path,
                  (long long)d->pieces.n, model_vocab(d->m));
  for (int64_t i = 0; i < d->pieces.n; i++) /* "piece<TAB>score": keep the piece */
    d->pieces.line[i][strcspn(d->pieces.line[i], "\t")] = 0;
  GP_TRY(check_special_ids(path, d));
  d->vocab = (int32_t)d->pieces.n;
  gp_tokens_opts o;
  gp_tokens_opts_default(&o);
  o.vocab = d->vocab;
  o.pad_id = d->pad;
  o.bos_id = d->bos;
  o.eos_id = d->eos;
  o.max_tokens = INT32_MAX;
  GP_TRY(gp_tokens_opts_check(&o));
  int lm = d->L.S == 0;
  for (int i = 0; i < SPLITS; i++) {
    snprintf(path, sizeof path, "%s/%s.%s.ids", ds->path, d->split[i], ds->target);
    snprintf(src, sizeof src, "%s/%s.%s.ids", ds->path, d->split[i], ds->source);
    /* a language model reads its one file as both sides and uses the target */
    GP_TRY(gp_token_corpus_read(lm ? path : src, path, &o, &d->corp[i]));
    if (i != TRAIN && !lm) {
      snprintf(path, sizeof path, "%s/%s.%s", ds->path, d->split[i], ds->target);
      GP_TRY(lines_read(path, &d->refs[i]));
      if (d->refs[i].n != d->corp[i].lines)
        return GP_ERR(GP_ERR_DATA, "%s: %lld lines, but %s has %lld", path, (long long)d->refs[i].n,
                      src, (long long)d->corp[i].lines);
    }
  }
  return GP_OK;
}

/* ---- batch sources ---- */

static gp_status feed_next(void *ctx, gp_batch *b) {
  feed_src *fs = ctx;
  int64_t rows;
  void *in[GP_MAX_MODEL_INPUTS]; /* an input not read is not written (NULL) */
  for (int i = 0; i < GP_MAX_MODEL_INPUTS; i++)
    in[i] = fs->skip[i] ? NULL : fs->buf.in[i];
  GP_TRY(gp_seqfeed_next(fs->feed, in, &rows));
  *b = gp_batch_of(&fs->buf, rows);
  return GP_OK;
}

static gp_status feed_seek(void *ctx, int64_t epoch, int64_t index) {
  return gp_seqfeed_seek(((feed_src *)ctx)->feed, epoch, index);
}

static void feed_tell(const void *ctx, int64_t *epoch, int64_t *index) {
  gp_seqfeed_tell(((const feed_src *)ctx)->feed, epoch, index);
}

static int64_t feed_batches(const void *ctx) {
  return gp_seqfeed_batches(((const feed_src *)ctx)->feed);
}

/* The training rows: pairs, rows a batch, padding. */
static void feed_describe(const void *ctx, char *buf, size_t n) {
  const feed_src *fs = ctx;
  const gp_seqdata *d = fs->d;
  if (fs->which != TRAIN || fs->own_feed) return;
  gp_seqfeed_stats st;
  gp_seqfeed_stats_get(fs->feed, &st);
  int64_t rows;
  double sf, tf;
  gp_seqfeed_fill(fs->feed, &rows, &sf, &tf);
  char fill[64] = "";
  if (d->L.S) snprintf(fill, sizeof fill, "source %.1f%%, ", 100 * sf);
  char len[48];
  if (d->L.S)
    snprintf(len, sizeof len, "%lld/%lld", (long long)d->L.S, (long long)d->L.T);
  else
    snprintf(len, sizeof len, "%lld", (long long)d->L.T);
  snprintf(buf, n,
           "%s: %lld training %s in %lld %s rows of %s tokens (%lld too long, left out), %lld "
           "rows a batch; real tokens fill %starget %.1f%%",
           d->synthetic || d->m->data.dataset == GP_DATA_SYNTHETIC ? "synthetic" : d->m->data.path,
           (long long)gp_seqfeed_pairs(fs->feed), d->L.S ? "pairs" : "sentences", (long long)rows,
           d->L.packed ? "packed" : "padded", len, (long long)st.too_long, (long long)d->batch,
           fill, 100 * tf);
}

static void feed_stats(const void *ctx, gp_batch_source_stats *out) {
  const feed_src *fs = ctx;
  gp_seqfeed_stats st;
  gp_seqfeed_stats_get(fs->feed, &st);
  out->split = fs->d->split[fs->which];
  out->tokens = 1;
  out->left_out = st.too_long;
}

/* Token rows are cheap: every row is made, of the inputs read (the feed always writes tgt_in and
 * the labels). */
static gp_status feed_want(void *ctx, const unsigned char *used, int replica, int replicas) {
  (void)replica;
  (void)replicas;
  feed_src *fs = ctx;
  const gp_seq_layout *L = &fs->d->L;
  for (int i = 0; i < GP_MAX_MODEL_INPUTS; i++)
    fs->skip[i] = !used[i] && i != L->input[GP_SEQ_TGT_IN] && i != L->input[GP_SEQ_LABEL];
  return GP_OK;
}

static void feed_free(void *ctx) {
  feed_src *fs = ctx;
  if (fs->own_feed) gp_seqfeed_free(fs->feed);
  gp_batch_buffers_free(&fs->buf);
  free(fs);
}

static const gp_batch_source_ops feed_ops = {
    .next = feed_next,
    .seek = feed_seek,
    .tell = feed_tell,
    .describe = feed_describe,
    .batches = feed_batches,
    .stats = feed_stats,
    .free = feed_free,
    .want = feed_want,
};

/* A source over feed f of split `which` (own: f goes with the source). */
static gp_status feed_src_new(gp_seqdata *d, int which, gp_seqfeed *f, int own,
                              gp_batch_source **out) {
  feed_src *fs = calloc(1, sizeof *fs);
  if (!fs) {
    if (own) gp_seqfeed_free(f);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a batch source");
  }
  *fs = (feed_src){.d = d, .which = which, .feed = f, .own_feed = own};
  gp_status s = gp_batch_buffers_alloc(d->m, d->batch, &fs->buf);
  if (s != GP_OK) {
    feed_free(fs);
    return s;
  }
  return gp_batch_source_new(&feed_ops, fs, d->m, out);
}

gp_status gp_seqdata_open(const gp_model *m, int synthetic, uint64_t seed, int64_t batch,
                          gp_seqdata **out) {
  *out = NULL;
  gp_seqdata *d = calloc(1, sizeof *d);
  if (!d) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  d->m = m;
  d->synthetic = synthetic;
  d->batch = batch;
  const gp_data_spec *ds = &m->data;
  int real = !synthetic && ds->dataset != GP_DATA_SYNTHETIC;
  d->pad = real ? (int32_t)ds->pad_id : 0;
  d->bos = real ? (int32_t)ds->bos_id : 2;
  d->eos = real ? (int32_t)ds->eos_id : 3;
  d->split[TRAIN] = "train";
  d->split[EVAL] = real ? ds->eval_split : "valid";
  d->split[TEST] = "test";
  gp_status s = gp_seq_layout_of(m, &d->L);
  int lm = d->L.S == 0;
  if (s == GP_OK && real && ds->dataset != (lm ? GP_DATA_TEXT : GP_DATA_TRANSLATION))
    s = GP_ERR(GP_ERR_SPEC, "%s: a %s model reads data with dataset: %s (or --data synthetic)",
               m->file, lm ? "language" : "translation", lm ? "text" : "translation");
  if (s == GP_OK && real) {
    s = read_corpora(d);
  } else if (s == GP_OK) {
    d->vocab = model_vocab(m);
    if (d->vocab < 4) d->pad = d->bos = d->eos = 0;
    int64_t rows[SPLITS] = {16 * batch, 2 * batch, 2 * batch};
    for (int i = 0; s == GP_OK && i < SPLITS; i++)
      s = synthetic_corpus(&d->L, d->vocab, rows[i], seed + (uint64_t)i, d->eos, &d->corp[i]);
  }
  for (int i = 0; s == GP_OK && i < SPLITS; i++) {
    gp_seqfeed_opts fo = {
        .rows = batch, .train = i == TRAIN, .seed = seed, .pad_id = d->pad, .bos_id = d->bos};
    s = gp_seqfeed_open(&d->corp[i], &d->L, &fo, &d->feed[i]);
    if (s != GP_OK) { /* which split, of which data ("all 40 pairs are longer" says neither) */
      char msg[512];
      snprintf(msg, sizeof msg, "%s", gp_error_message());
      s = real ? GP_ERR(s, "%s: the %s split: %s", ds->path[0] ? ds->path : ".", d->split[i], msg)
               : GP_ERR(s, "synthetic data, the %s split: %s", d->split[i], msg);
    }
  }
  for (int i = 0; s == GP_OK && i < SPLITS; i++)
    s = feed_src_new(d, i, d->feed[i], 0, &d->src[i]);
  if (s != GP_OK) {
    gp_seqdata_free(d);
    return s;
  }
  *out = d;
  return GP_OK;
}

void gp_seqdata_free(gp_seqdata *d) {
  if (!d) return;
  for (int i = 0; i < SPLITS; i++) {
    gp_batch_source_free(d->src[i]);
    gp_seqfeed_free(d->feed[i]);
    gp_token_corpus_free(&d->corp[i]);
    lines_free(&d->refs[i]);
  }
  lines_free(&d->pieces);
  free(d);
}

gp_batch_source *gp_seqdata_source(gp_seqdata *d, gp_seq_split split) {
  return d->src[split];
}

int gp_seqdata_translates(const gp_seqdata *d) {
  return d->L.S != 0 && !d->synthetic && d->m->data.dataset != GP_DATA_SYNTHETIC;
}

/* Row r of the decoding feed's last batch: its pair, source words and reference. */
static void decode_row(void *ctx, int64_t r, int64_t *sentence, int64_t *src_words,
                       const char **ref) {
  const feed_src *fs = ctx;
  const gp_seqdata *d = fs->d;
  const gp_token_corpus *c = &d->corp[fs->which];
  const int64_t *pairs;
  int64_t k;
  gp_seqfeed_row_pairs(fs->feed, r, &pairs, &k);
  int64_t p = pairs[0];
  *sentence = p;
  *src_words = c->src_off[p + 1] - c->src_off[p] - 1;
  *ref = d->refs[fs->which].line[c->line[p] - 1];
}

gp_status gp_seqdata_decode_set(gp_seqdata *d, int final, gp_decode_set *out, int *any) {
  memset(out, 0, sizeof *out);
  *any = 0;
  int which = final ? TEST : EVAL;
  int64_t lim = final ? 0 : d->m->data.bleu_samples;
  if (!gp_seqdata_translates(d) || lim < 0) return GP_OK;
  gp_seqfeed_opts fo = {.rows = d->batch,
                        .one_per_row = 1,
                        .truncate = 1,
                        .by_source_length = 1,
                        .limit = lim,
                        .pad_id = d->pad,
                        .bos_id = d->bos};
  gp_seqfeed *f;
  const gp_token_corpus *c = &d->corp[which];
  GP_TRY(gp_seqfeed_open(c, &d->L, &fo, &f));
  GP_TRY(feed_src_new(d, which, f, 1, &out->rows));
  const gp_data_spec *ds = &d->m->data;
  const gp_seq_layout *L = &d->L;
  out->row = decode_row;
  out->ctx = out->rows->ctx;
  out->sentences = c->pairs;
  out->batch = d->batch;
  out->T = L->T;
  out->tgt_in = L->input[GP_SEQ_TGT_IN];
  out->label = L->input[GP_SEQ_LABEL];
  out->tgt_mask = L->input[GP_SEQ_TGT_MASK];
  out->tgt_seg = L->input[GP_SEQ_TGT_SEG];
  out->tgt_pos = L->input[GP_SEQ_TGT_POS];
  out->pad = d->pad;
  out->bos = d->bos;
  out->eos = d->eos;
  out->len_a = ds->decode_len_a;
  out->len_b = ds->decode_len_b;
  out->pieces = (const char *const *)d->pieces.line;
  out->vocab = d->vocab;
  *any = 1;
  return GP_OK;
}
