/* Greedy decoding and BLEU scoring of a translation model (moved from gpipe-train's sequence
 * data, so that it is library code the programs call). */
#include "core/eval/decode.h"

#include <stdlib.h>
#include <string.h>

#include "core/eval/bleu.h"
#include "core/eval/spm_detok.h"

#define SPACE_PIECE "\xe2\x96\x81" /* U+2581, a space in a piece */

/* Scratch of one decoding pass: a writable copy of each batch and the decoded ids. */
typedef struct scratch {
  gp_batch_buffers buf;
  int32_t *argmax; /* batch x T */
  int32_t *hyp;    /* batch x T: the decoded ids */
  int64_t *hyp_len, *max_len, *sentence;
  const char **ref;
} scratch;

static void scratch_free(scratch *w) {
  gp_batch_buffers_free(&w->buf);
  free(w->argmax);
  free(w->hyp);
  free(w->hyp_len);
  free(w->max_len);
  free(w->sentence);
  free(w->ref);
}

static gp_status scratch_alloc(const gp_model *m, const gp_decode_set *s, scratch *w) {
  memset(w, 0, sizeof *w);
  GP_TRY(gp_batch_buffers_alloc(m, s->batch, &w->buf));
  size_t bt = (size_t)(s->batch * s->T), b = (size_t)s->batch;
  w->argmax = malloc(bt * sizeof *w->argmax);
  w->hyp = malloc(bt * sizeof *w->hyp);
  w->hyp_len = malloc(b * sizeof *w->hyp_len);
  w->max_len = malloc(b * sizeof *w->max_len);
  w->sentence = malloc(b * sizeof *w->sentence);
  w->ref = malloc(b * sizeof *w->ref);
  if (!w->argmax || !w->hyp || !w->hyp_len || !w->max_len || !w->sentence || !w->ref) {
    scratch_free(w);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
  }
  return GP_OK;
}

/* The piece to decode for an id. <unk> (SentencePiece's unk_piece) becomes spm_decode's
 * surface " \u2047 " as pieces: U+2581 U+2047 U+2581, with one more U+2581 in front for the
 * first piece, whose leading U+2581 the decoder drops (spm_decode keeps that space). An id
 * outside the vocabulary decodes to nothing. */
static const char *piece_of(const gp_decode_set *s, int32_t id, int first) {
  if (id < 0 || id >= s->vocab) return "";
  if (strcmp(s->pieces[id], "<unk>")) return s->pieces[id];
  return first ? SPACE_PIECE SPACE_PIECE "\xe2\x81\x87" SPACE_PIECE
               : SPACE_PIECE "\xe2\x81\x87" SPACE_PIECE;
}

/* ids -> text: pieces joined by spaces (padding and BOS left out), then decoded as
 * spm_decode does. */
static gp_status detok(const gp_decode_set *s, const int32_t *ids, int64_t n, char **out) {
  size_t len = 1;
  for (int64_t i = 0, np = 0; i < n; i++)
    if (ids[i] != s->pad && ids[i] != s->bos) len += strlen(piece_of(s, ids[i], np++ == 0)) + 1;
  char *p = malloc(len), *q = malloc(len);
  if (!p || !q) {
    free(p);
    free(q);
    return GP_ERR(GP_ERR_NOMEM, "out of memory decoding");
  }
  size_t k = 0;
  for (int64_t i = 0, np = 0; i < n; i++) {
    if (ids[i] == s->pad || ids[i] == s->bos) continue;
    const char *piece = piece_of(s, ids[i], np++ == 0);
    if (k) p[k++] = ' ';
    size_t pl = strlen(piece);
    memcpy(p + k, piece, pl);
    k += pl;
  }
  p[k] = 0;
  gp_status st = gp_spm_decode_pieces(p, q, len);
  free(p);
  if (st != GP_OK) {
    free(q);
    return st;
  }
  *out = q;
  return GP_OK;
}

/* Greedy decoding of the n rows of batch b (one sentence a row): the target side is reset to
 * BOS, then each step runs the model over the rows and appends the argmax at the next
 * position, until every row has written EOS or reached its length limit (source length *
 * len_a + len_b, rounded down, 1 to T: a first piece is always decoded, as
 * docs/model-format.md says). Without a cache the whole model runs at every step; positions
 * after the current one cannot change its output (causal self-attention), so they stay
 * padding. */
static gp_status decode_batch(gp_trainer *t, const gp_decode_set *s, const gp_batch *src,
                              scratch *w) {
  const gp_model *m = t->m;
  int64_t T = s->T, longest = 0, n = src->n;
  for (int i = 0; i < m->n_inputs; i++)
    memcpy(w->buf.in[i], src->in[i],
           (size_t)n * (size_t)gp_shape_numel(&m->inputs[i].shape) *
               gp_dtype_size(m->inputs[i].dtype));
  int32_t *tgt_in = w->buf.in[s->tgt_in], *label = w->buf.in[s->label];
  int32_t *mask = s->tgt_mask >= 0 ? w->buf.in[s->tgt_mask] : NULL;
  int32_t *seg = s->tgt_seg >= 0 ? w->buf.in[s->tgt_seg] : NULL;
  int32_t *pos = s->tgt_pos >= 0 ? w->buf.in[s->tgt_pos] : NULL;
  for (int64_t r = 0; r < n; r++) {
    int64_t src_words;
    s->row(s->ctx, r, &w->sentence[r], &src_words, &w->ref[r]);
    int64_t lim = (int64_t)(s->len_a * (double)src_words + s->len_b);
    w->max_len[r] = lim < 1 ? 1 : lim > T ? T : lim;
    if (w->max_len[r] > longest) longest = w->max_len[r];
    for (int64_t j = 0; j < T; j++) {
      int64_t i = r * T + j;
      tgt_in[i] = j ? s->pad : s->bos;
      label[i] = -100; /* ignored (GP_SEQ_IGNORE) */
      if (mask) mask[i] = 1;
      if (seg) seg[i] = 1;
      if (pos) pos[i] = (int32_t)j;
    }
    w->hyp_len[r] = 0;
  }
  for (int64_t step = 0; step < longest; step++) {
    gp_prediction pr = {.argmax = w->argmax};
    gp_step_result res = {0};
    gp_batch b = gp_batch_of(&w->buf, n);
    if (t->check) GP_TRY(t->check());
    GP_TRY(gp_pipeline_predict(t->pl, &b, &pr, &res));
    int live = 0;
    for (int64_t r = 0; r < n; r++) {
      if (w->max_len[r] < 0) continue; /* done */
      int32_t tok = w->argmax[r * T + step];
      if (tok == s->eos) {
        w->max_len[r] = -1;
        continue;
      }
      w->hyp[r * T + w->hyp_len[r]++] = tok;
      if (step + 1 >= w->max_len[r]) {
        w->max_len[r] = -1;
        continue;
      }
      tgt_in[r * T + step + 1] = tok;
      live++;
    }
    if (!live) break;
  }
  return GP_OK;
}

void gp_decode_set_free(gp_decode_set *s) {
  if (!s) return;
  gp_batch_source_free(s->rows);
  memset(s, 0, sizeof *s);
}

void gp_decode_result_free(gp_decode_result *r) {
  if (!r) return;
  for (int64_t p = 0; r->text && p < r->n_text; p++)
    free(r->text[p]);
  free(r->text);
  memset(r, 0, sizeof *r);
}

gp_status gp_decode_bleu(gp_trainer *t, gp_decode_set *s, gp_decode_result *out) {
  memset(out, 0, sizeof *out);
  out->bleu = -1;
  scratch w;
  GP_TRY(scratch_alloc(t->m, s, &w));
  /* per sentence, for corpus order */
  out->text = calloc(s->sentences ? (size_t)s->sentences : 1, sizeof *out->text);
  out->n_text = s->sentences;
  gp_status st = out->text ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory decoding");
  gp_bleu_stats bs = {0};
  if (st == GP_OK) st = gp_batch_source_seek(s->rows, 0, 0);
  while (st == GP_OK) {
    gp_batch b;
    int end;
    st = gp_batch_source_next(s->rows, &b, &end);
    if (st != GP_OK || end) break;
    st = decode_batch(t, s, &b, &w);
    for (int64_t r = 0; st == GP_OK && r < b.n; r++) {
      int64_t p = w.sentence[r];
      st = detok(s, w.hyp + r * s->T, w.hyp_len[r], &out->text[p]);
      if (st != GP_OK) break;
      st = gp_bleu_add_sentence(&bs, out->text[p], &w.ref[r], 1);
      out->sentences++;
    }
  }
  scratch_free(&w);
  if (st != GP_OK) {
    gp_decode_result_free(out);
    return st;
  }
  gp_bleu bl;
  gp_bleu_compute(&bs, &bl);
  out->bleu = bl.score;
  gp_bleu_format(&bl, out->bleu_line, sizeof out->bleu_line);
  return GP_OK;
}
