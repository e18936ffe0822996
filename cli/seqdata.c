/* Sequence-model data for gpipe-train: corpora, packed training rows, evaluation with
 * perplexity and greedy decoding scored by BLEU. */
#include "cli/seqdata.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "core/eval/bleu.h"
#include "core/eval/perplexity.h"
#include "core/eval/spm_detok.h"
#include "core/rng.h"

enum { TRAIN, EVAL, TEST, SPLITS };

typedef struct lines {
  char **line;
  int64_t n;
} lines;

struct gp_seqdata {
  const gp_model *m;
  gp_seq_layout L;
  int synthetic;
  const char *split[SPLITS];
  gp_token_corpus corp[SPLITS];
  gp_seqfeed *feed[SPLITS]; /* packed rows (train), loss passes (eval, test) */
  gp_batch_buffers buf;
  int64_t batch;
  int32_t pad, bos, eos, vocab;
  lines pieces;       /* the vocabulary's pieces (not synthetic) */
  lines refs[SPLITS]; /* reference text of eval and test (translation, not synthetic) */
  int32_t *argmax;    /* batch x T */
  int32_t *hyp;       /* batch x T: the decoded ids */
  int64_t *hyp_len, *max_len, *pair;
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
  if (s == GP_OK) s = gp_batch_buffers_alloc(m, batch, &d->buf);
  size_t bt = (size_t)(batch * d->L.T);
  if (s == GP_OK) {
    d->argmax = malloc(bt * sizeof *d->argmax);
    d->hyp = malloc(bt * sizeof *d->hyp);
    d->hyp_len = malloc((size_t)batch * sizeof *d->hyp_len);
    d->max_len = malloc((size_t)batch * sizeof *d->max_len);
    d->pair = malloc((size_t)batch * sizeof *d->pair);
    if (!d->argmax || !d->hyp || !d->hyp_len || !d->max_len || !d->pair)
      s = GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
  }
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
    gp_seqfeed_free(d->feed[i]);
    gp_token_corpus_free(&d->corp[i]);
    lines_free(&d->refs[i]);
  }
  lines_free(&d->pieces);
  gp_batch_buffers_free(&d->buf);
  free(d->argmax);
  free(d->hyp);
  free(d->hyp_len);
  free(d->max_len);
  free(d->pair);
  free(d);
}

gp_status gp_data_input(const gp_model *m, const char *data, const gp_model_input **out) {
  *out = NULL;
  int xi = m->label_input == 0 ? 1 : 0;
  if (m->label_input >= 0 && m->n_inputs == 2 && m->inputs[xi].dtype == GP_F32) {
    *out = &m->inputs[xi];
    return GP_OK;
  }
  char list[512] = "", shape[96];
  size_t len = 0;
  for (int i = 0; i < m->n_inputs && len < sizeof list; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %s %s", i ? ", " : "",
                            m->inputs[i].name, gp_dtype_spec_name(m->inputs[i].dtype),
                            gp_shape_str(&m->inputs[i].shape, shape, sizeof shape));
  return GP_ERR(GP_ERR_SPEC,
                "%s: %s fills one f32 input and the labels (or a translation or language "
                "model's tokens), but this model's inputs are %s",
                m->file, data, m->n_inputs ? list : "none");
}

int64_t gp_model_classes(const gp_model *m) {
  const gp_shape *o = &m->nodes[m->output_node].layer.out_shape;
  return o->ndim ? o->d[o->ndim - 1] : 1;
}

gp_status gp_data_fits(const gp_model *m, const gp_model_input *xi, const gp_loader *train,
                       int64_t batch) {
  int64_t classes = gp_model_classes(m);
  gp_shape ds = gp_loader_sample_shape(train);
  char a[96], c[96];
  if (!gp_shape_equal(&ds, &xi->shape))
    return GP_ERR(GP_ERR_SPEC, "%s: the model's input is %s but the data gives %s", m->file,
                  gp_shape_str(&xi->shape, a, sizeof a), gp_shape_str(&ds, c, sizeof c));
  const gp_data_spec *d = &m->data;
  if (gp_loader_classes(train) != classes) {
    char listed[1100] = ""; /* the list of classes, when one gave them (relative to data.path) */
    if (d->classes_file[0])
      snprintf(listed, sizeof listed, " (the classes listed in %s%s%s)",
               d->classes_file[0] == '/' ? "" : d->path,
               d->classes_file[0] != '/' && d->path[0] ? "/" : "", d->classes_file);
    return GP_ERR(GP_ERR_SPEC,
                  "%s: the model outputs %" PRId64 " class%s, the data has %" PRId64 "%s", m->file,
                  classes, classes == 1 ? "" : "es", gp_loader_classes(train), listed);
  }
  int64_t n = gp_loader_samples(train); /* < 0: a stream of unknown size */
  const char *where = gp_loader_where(train);
  if (n >= 0 && n < batch)
    return GP_ERR(GP_ERR_DATA,
                  "%s: the training set%s%s%s has %" PRId64 " samples, fewer than one batch of "
                  "%" PRId64,
                  gp_loader_name(train), where ? " (" : "", where ? where : "", where ? ")" : "", n,
                  batch);
  return GP_OK;
}

int gp_seqdata_translates(const gp_seqdata *d) {
  return d->L.S != 0 && !d->synthetic && d->m->data.dataset != GP_DATA_SYNTHETIC;
}

int64_t gp_seqdata_batches(const gp_seqdata *d) {
  return gp_seqfeed_batches(d->feed[TRAIN]);
}

gp_status gp_seqdata_next(gp_seqdata *d, gp_batch *b) {
  int64_t rows;
  GP_TRY(gp_seqfeed_next(d->feed[TRAIN], d->buf.in, &rows));
  *b = gp_batch_of(&d->buf, rows);
  return GP_OK;
}

void gp_seqdata_tell(const gp_seqdata *d, int64_t *epoch, int64_t *index) {
  gp_seqfeed_tell(d->feed[TRAIN], epoch, index);
}

gp_status gp_seqdata_seek(gp_seqdata *d, int64_t epoch, int64_t index) {
  return gp_seqfeed_seek(d->feed[TRAIN], epoch, index);
}

void gp_seqdata_describe(const gp_seqdata *d, char *buf, size_t n) {
  gp_seqfeed_stats st;
  gp_seqfeed_stats_get(d->feed[TRAIN], &st);
  int64_t rows;
  double sf, tf;
  gp_seqfeed_fill(d->feed[TRAIN], &rows, &sf, &tf);
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
           (long long)gp_seqfeed_pairs(d->feed[TRAIN]), d->L.S ? "pairs" : "sentences",
           (long long)rows, d->L.packed ? "packed" : "padded", len, (long long)st.too_long,
           (long long)d->batch, fill, 100 * tf);
}

/* Loss, accuracy and perplexity of one split over packed rows. */
static gp_status score_split(gp_seqdata *d, gp_trainer *t, int which, gp_seq_eval *out) {
  gp_seqfeed *f = d->feed[which];
  GP_TRY(gp_seqfeed_seek(f, 0, 0));
  gp_step_result res = {0};
  gp_prediction pr = {0};
  for (;;) {
    int64_t rows;
    GP_TRY(gp_interrupt_check()); /* a signal drops the evaluation (gpipe-train stops) */
    GP_TRY(gp_seqfeed_next(f, d->buf.in, &rows));
    if (rows == 0) break;
    gp_batch b = gp_batch_of(&d->buf, rows);
    GP_TRY(gp_pipeline_predict(t->pl, &b, &pr, &res));
  }
  out->loss = res.counted ? res.loss_sum / (double)res.counted : 0;
  out->accuracy = res.counted ? (double)res.correct / (double)res.counted : 0;
  out->perplexity = gp_perplexity(pr.nll_sum, pr.nll_count);
  out->tokens = pr.nll_count;
  gp_seqfeed_stats st;
  gp_seqfeed_stats_get(f, &st);
  out->left_out = st.too_long;
  return GP_OK;
}

#define SPACE_PIECE "\xe2\x96\x81" /* U+2581, a space in a piece */

/* The piece to decode for an id. <unk> (SentencePiece's unk_piece) becomes spm_decode's
 * surface " \u2047 " as pieces: U+2581 U+2047 U+2581, with one more U+2581 in front for the
 * first piece, whose leading U+2581 the decoder drops (spm_decode keeps that space). An id
 * outside the vocabulary decodes to nothing. */
static const char *piece_of(const gp_seqdata *d, int32_t id, int first) {
  if (id < 0 || id >= d->vocab) return "";
  if (strcmp(d->pieces.line[id], "<unk>")) return d->pieces.line[id];
  return first ? SPACE_PIECE SPACE_PIECE "\xe2\x81\x87" SPACE_PIECE
               : SPACE_PIECE "\xe2\x81\x87" SPACE_PIECE;
}

/* ids -> text: pieces joined by spaces (padding and BOS left out), then decoded as
 * spm_decode does. */
static gp_status detok(const gp_seqdata *d, const int32_t *ids, int64_t n, char **out) {
  size_t len = 1;
  for (int64_t i = 0, np = 0; i < n; i++)
    if (ids[i] != d->pad && ids[i] != d->bos) len += strlen(piece_of(d, ids[i], np++ == 0)) + 1;
  char *p = malloc(len), *q = malloc(len);
  if (!p || !q) {
    free(p);
    free(q);
    return GP_ERR(GP_ERR_NOMEM, "out of memory decoding");
  }
  size_t k = 0;
  for (int64_t i = 0, np = 0; i < n; i++) {
    if (ids[i] == d->pad || ids[i] == d->bos) continue;
    const char *piece = piece_of(d, ids[i], np++ == 0);
    if (k) p[k++] = ' ';
    size_t pl = strlen(piece);
    memcpy(p + k, piece, pl);
    k += pl;
  }
  p[k] = 0;
  gp_status s = gp_spm_decode_pieces(p, q, len);
  free(p);
  if (s != GP_OK) {
    free(q);
    return s;
  }
  *out = q;
  return GP_OK;
}

/* Greedy decoding of a batch of n rows that f (one pair a row of corpus c) just filled
 * into d->buf: the target side is reset to BOS, then each step runs the model over the rows
 * and appends the argmax at the next position, until every row has written EOS or reached
 * its length limit (source length * decode_len_a + decode_len_b, rounded down, 1 to T: a
 * first piece is always decoded, as docs/model-format.md says). Without a cache
 * the whole model runs at every step; positions after the current one cannot change its
 * output (causal self-attention), so they stay padding. */
static gp_status decode_batch(gp_seqdata *d, gp_trainer *t, const gp_seqfeed *f,
                              const gp_token_corpus *c, int64_t n) {
  const gp_seq_layout *L = &d->L;
  const gp_data_spec *ds = &d->m->data;
  int64_t T = L->T, longest = 0;
  int32_t *in[GP_SEQ_ROLES] = {0};
  for (int r = GP_SEQ_TGT_IN; r <= GP_SEQ_LABEL; r++)
    if (L->input[r] >= 0) in[r] = d->buf.in[L->input[r]];
  for (int64_t r = 0; r < n; r++) {
    const int64_t *pairs;
    int64_t k;
    gp_seqfeed_row_pairs(f, r, &pairs, &k);
    d->pair[r] = pairs[0];
    int64_t src_words = c->src_off[pairs[0] + 1] - c->src_off[pairs[0]] - 1;
    int64_t lim = (int64_t)(ds->decode_len_a * (double)src_words + ds->decode_len_b);
    d->max_len[r] = lim < 1 ? 1 : lim > T ? T : lim;
    if (d->max_len[r] > longest) longest = d->max_len[r];
    for (int64_t j = 0; j < T; j++) {
      int64_t i = r * T + j;
      in[GP_SEQ_TGT_IN][i] = j ? d->pad : d->bos;
      in[GP_SEQ_LABEL][i] = GP_SEQ_IGNORE;
      if (in[GP_SEQ_TGT_MASK]) in[GP_SEQ_TGT_MASK][i] = 1;
      if (in[GP_SEQ_TGT_SEG]) in[GP_SEQ_TGT_SEG][i] = 1;
      if (in[GP_SEQ_TGT_POS]) in[GP_SEQ_TGT_POS][i] = (int32_t)j;
    }
    d->hyp_len[r] = 0;
  }
  for (int64_t step = 0; step < longest; step++) {
    gp_prediction pr = {.argmax = d->argmax};
    gp_step_result res = {0};
    gp_batch b = gp_batch_of(&d->buf, n);
    GP_TRY(gp_interrupt_check());
    GP_TRY(gp_pipeline_predict(t->pl, &b, &pr, &res));
    int live = 0;
    for (int64_t r = 0; r < n; r++) {
      if (d->max_len[r] < 0) continue; /* done */
      int32_t tok = d->argmax[r * T + step];
      if (tok == d->eos) {
        d->max_len[r] = -1;
        continue;
      }
      d->hyp[r * T + d->hyp_len[r]++] = tok;
      if (step + 1 >= d->max_len[r]) {
        d->max_len[r] = -1;
        continue;
      }
      in[GP_SEQ_TGT_IN][r * T + step + 1] = tok;
      live++;
    }
    if (!live) break;
  }
  return GP_OK;
}

/* The translations in corpus order, one a line (a pair not decoded has none). */
typedef struct hyp_lines {
  char **text;
  int64_t n;
} hyp_lines;

static gp_status write_hyps(FILE *fp, const char *path, const void *arg) {
  (void)path; /* gp_args_write_output checks the stream */
  const hyp_lines *h = arg;
  for (int64_t p = 0; p < h->n; p++)
    if (h->text[p]) fprintf(fp, "%s\n", h->text[p]);
  return GP_OK;
}

gp_status gp_seqdata_evaluate(gp_seqdata *d, gp_trainer *t, int final, const char *hyp_out,
                              gp_seq_eval *out) {
  int which = final ? TEST : EVAL;
  memset(out, 0, sizeof *out);
  out->split = d->split[which];
  out->bleu = -1;
  GP_TRY(score_split(d, t, which, out));
  int64_t lim = final ? 0 : d->m->data.bleu_samples;
  if (!gp_seqdata_translates(d) || lim < 0) return GP_OK;
  double t0 = gp_now();
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
  char **text = calloc((size_t)c->pairs, sizeof *text); /* per pair, for corpus order */
  gp_status s = text ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory decoding");
  gp_bleu_stats st = {0};
  while (s == GP_OK) {
    int64_t n;
    s = gp_seqfeed_next(f, d->buf.in, &n);
    if (s != GP_OK || n == 0) break;
    s = decode_batch(d, t, f, c, n);
    for (int64_t r = 0; s == GP_OK && r < n; r++) {
      int64_t p = d->pair[r];
      s = detok(d, d->hyp + r * d->L.T, d->hyp_len[r], &text[p]);
      if (s != GP_OK) break;
      const char *ref = d->refs[which].line[c->line[p] - 1];
      s = gp_bleu_add_sentence(&st, text[p], &ref, 1);
      out->sentences++;
    }
  }
  gp_seqfeed_free(f);
  hyp_lines lines = {text, c->pairs};
  const gp_flag out_flag = {.name = "--translations", .s = hyp_out}; /* hyp_out is its value */
  if (s == GP_OK && hyp_out) s = gp_args_write_output(&out_flag, write_hyps, &lines);
  for (int64_t p = 0; text && p < c->pairs; p++)
    free(text[p]);
  free(text);
  GP_TRY(s);
  gp_bleu b;
  gp_bleu_compute(&st, &b);
  out->bleu = b.score;
  gp_bleu_format(&b, out->bleu_line, sizeof out->bleu_line);
  out->decode_s = gp_now() - t0;
  return GP_OK;
}

gp_status gp_data_error_at(const gp_model *m, gp_status s) {
  if (s != GP_ERR_SPEC || strncmp(gp_error_message(), "data.", 5) != 0) return s;
  if (!m->data.line) return gp_error_prefix(s, "%s: ", m->file);
  return gp_error_prefix(s, "%s:%d:%d: ", m->file, m->data.line, m->data.col);
}
