/* Greedy decoding and BLEU scoring of a translation model (moved from gpipe-train's sequence
 * data, so that it is library code the programs call). */
#include "core/eval/decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/eval/bleu.h"
#include "core/eval/kvdec.h"
#include "core/eval/spm_detok.h"

#define SPACE_PIECE "\xe2\x96\x81" /* U+2581, a space in a piece */

/* Scratch of one decoding pass: a writable copy of each batch (each row beam times with beams)
 * and the decoded ids; with the cache, one position a row of each step input, and the beams'
 * state. */
typedef struct scratch {
  gp_batch_buffers buf;
  int32_t *argmax; /* batch x T */
  int32_t *hyp;    /* batch x T: the decoded ids */
  int64_t *hyp_len, *max_len, *sentence;
  const char **ref;
  int64_t beam;    /* >= 1 */
  gp_kvdec *kd;    /* NULL: uncached */
  float *step_buf; /* 5 x batch x beam values, i32 or f32 */
  const void *step_in[GP_MAX_MODEL_INPUTS];
  int32_t *btok, *btok2;    /* batch x beam x T: each beam's ids (and the next step's) */
  double *bscore, *cand;    /* batch x beam: cumulative log p; 2 beam candidates a sentence */
  int64_t *from, *cand_ix;  /* batch x beam: the row each row continues; candidates' indices */
  int32_t *fin_tok;         /* batch x beam x T: finished hypotheses */
  double *fin_score;        /* batch x beam: their sums of log p */
  int64_t *fin_len, *fin_n; /* batch x beam: their lengths (EOS counted); per sentence: count */
} scratch;

static void scratch_free(scratch *w) {
  gp_kvdec_free(w->kd);
  free(w->step_buf);
  free(w->btok);
  free(w->btok2);
  free(w->bscore);
  free(w->cand);
  free(w->from);
  free(w->cand_ix);
  free(w->fin_tok);
  free(w->fin_score);
  free(w->fin_len);
  free(w->fin_n);
  gp_batch_buffers_free(&w->buf);
  free(w->argmax);
  free(w->hyp);
  free(w->hyp_len);
  free(w->max_len);
  free(w->sentence);
  free(w->ref);
}

static gp_status scratch_alloc(const gp_model *m, const gp_decode_set *s, int64_t beam, int search,
                               scratch *w) {
  memset(w, 0, sizeof *w);
  w->beam = beam;
  GP_TRY(gp_batch_buffers_alloc(m, s->batch * beam, &w->buf));
  size_t bt = (size_t)(s->batch * s->T), b = (size_t)s->batch, bb = b * (size_t)beam;
  w->step_buf = malloc(5 * bb * sizeof *w->step_buf);
  if (search) {
    w->btok = malloc(bb * (size_t)s->T * sizeof *w->btok);
    w->btok2 = malloc(bb * (size_t)s->T * sizeof *w->btok2);
    w->fin_tok = malloc(bb * (size_t)s->T * sizeof *w->fin_tok);
    w->bscore = malloc(bb * sizeof *w->bscore);
    w->cand = malloc(2 * bb * sizeof *w->cand);
    w->cand_ix = malloc(2 * bb * sizeof *w->cand_ix);
    w->from = malloc(bb * sizeof *w->from);
    w->fin_score = malloc(bb * sizeof *w->fin_score);
    w->fin_len = malloc(bb * sizeof *w->fin_len);
    w->fin_n = malloc(b * sizeof *w->fin_n);
    if (!w->btok || !w->btok2 || !w->fin_tok || !w->bscore || !w->cand || !w->cand_ix || !w->from ||
        !w->fin_score || !w->fin_len || !w->fin_n) {
      scratch_free(w);
      return GP_ERR(GP_ERR_NOMEM, "out of memory for decoding");
    }
  }
  /* also the ids fed at a step, one a row: batch x beam */
  w->argmax = malloc((bt > bb ? bt : bb) * sizeof *w->argmax);
  w->hyp = malloc(bt * sizeof *w->hyp);
  w->hyp_len = malloc(b * sizeof *w->hyp_len);
  w->max_len = malloc(b * sizeof *w->max_len);
  w->sentence = malloc(b * sizeof *w->sentence);
  w->ref = malloc(b * sizeof *w->ref);
  if (!w->argmax || !w->hyp || !w->hyp_len || !w->max_len || !w->sentence || !w->ref ||
      !w->step_buf) {
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

/* Copies batch src into w->buf (each row w->beam times) with the target side reset to BOS then
 * padding, and sets each sentence's length limit (source length * len_a + len_b, rounded down,
 * 1 to T: a first piece is always decoded, as docs/model-format.md says). Returns the longest. */
static int64_t prepare_rows(const gp_model *m, const gp_decode_set *s, const gp_batch *src,
                            scratch *w) {
  const int64_t T = s->T, n = src->n, B = w->beam;
  int64_t longest = 0;
  for (int i = 0; i < m->n_inputs; i++) {
    size_t row = (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
    for (int64_t r = 0; r < n; r++)
      for (int64_t k = 0; k < B; k++)
        memcpy((char *)w->buf.in[i] + (size_t)(r * B + k) * row,
               (const char *)src->in[i] + (size_t)r * row, row);
  }
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
    for (int64_t j = 0; j < T * B; j++) {
      int64_t i = r * T * B + j;
      tgt_in[i] = j % T ? s->pad : s->bos;
      label[i] = -100; /* ignored (GP_SEQ_IGNORE) */
      if (mask) mask[i] = 1;
      if (seg) seg[i] = 1;
      if (pos) pos[i] = (int32_t)(j % T);
    }
    w->hyp_len[r] = 0;
  }
  return longest;
}

/* Greedy decoding of the n rows of batch b (one sentence a row): each step runs the model over
 * the rows and appends the argmax at the next position, until every row has written EOS or
 * reached its length limit. Without a cache the whole model runs at every step; positions
 * after the current one cannot change its output (causal self-attention), so they stay
 * padding. */
static gp_status decode_batch(gp_trainer *t, const gp_decode_set *s, const gp_batch *src,
                              scratch *w) {
  int64_t T = s->T, n = src->n;
  int64_t longest = prepare_rows(t->m, s, src, w);
  int32_t *tgt_in = w->buf.in[s->tgt_in];
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

/* The step inputs of position `step` for rows whose previous ids are prev[r]. */
static void step_inputs(const gp_model *m, const gp_decode_set *s, scratch *w, int64_t rows,
                        int64_t step, const int32_t *prev) {
  const int which[5] = {s->tgt_in, s->label, s->tgt_mask, s->tgt_seg, s->tgt_pos};
  for (int k = 0; k < 5; k++) {
    if (which[k] < 0) continue;
    void *buf = w->step_buf + k * rows;
    for (int64_t r = 0; r < rows; r++) {
      int32_t v = k == 0 ? prev[r] : k == 1 ? -100 : k == 4 ? (int32_t)step : 1;
      if (m->inputs[which[k]].dtype == GP_F32)
        ((float *)buf)[r] = (float)v;
      else
        ((int32_t *)buf)[r] = v;
    }
    w->step_in[which[k]] = buf;
  }
}

/* torch.argmax of a row: a NaN counts as the largest (the first wins), else the first
 * maximum (as gp_pipeline_predict's). */
static int32_t argmax_of(const float *z, int64_t k) {
  int64_t best = 0;
  for (int64_t j = 0; j < k; j++) {
    if (z[j] != z[j]) return (int32_t)j;
    if (z[j] > z[best]) best = j;
  }
  return (int32_t)best;
}

/* Greedy decoding with the cache: the encoder once, then one position a row a step. Done rows
 * stay in the batch (their outputs are not read), so the cache keeps its rows. */
static gp_status decode_batch_cached(gp_trainer *t, const gp_decode_set *s, const gp_batch *src,
                                     scratch *w) {
  int64_t T = s->T, n = src->n;
  int64_t longest = prepare_rows(t->m, s, src, w);
  gp_batch b = gp_batch_of(&w->buf, n);
  GP_TRY(gp_kvdec_begin(w->kd, &b));
  int32_t *prev = w->argmax; /* n: the ids fed at the step */
  for (int64_t r = 0; r < n; r++)
    prev[r] = s->bos;
  for (int64_t step = 0; step < longest; step++) {
    if (t->check) GP_TRY(t->check());
    step_inputs(t->m, s, w, n, step, prev);
    const float *z;
    int64_t V;
    GP_TRY(gp_kvdec_step(w->kd, w->step_in, &z, &V));
    int live = 0;
    for (int64_t r = 0; r < n; r++) {
      if (w->max_len[r] < 0) continue;
      int32_t tok = argmax_of(z + r * V, V);
      if (tok == s->eos) {
        w->max_len[r] = -1;
        continue;
      }
      w->hyp[r * T + w->hyp_len[r]++] = tok;
      if (step + 1 >= w->max_len[r]) {
        w->max_len[r] = -1;
        continue;
      }
      prev[r] = tok;
      live++;
    }
    if (!live) break;
  }
  return GP_OK;
}

int64_t gp_decode_best(const double *score, const int64_t *len, int64_t n, double lenpen) {
  int64_t best = -1;
  double bs = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = score[i] / pow((double)len[i], lenpen);
    if (best < 0 || v > bs) {
      best = i;
      bs = v;
    }
  }
  return best;
}

/* Keeps the k best (score, index) pairs in cand/ix, best first, ties to the lower index. */
static void top_insert(double *cand, int64_t *ix, int64_t *have, int64_t k, double v, int64_t i) {
  if (*have == k && !(v > cand[k - 1])) return;
  int64_t j = *have < k ? (*have)++ : k - 1;
  while (j > 0 && v > cand[j - 1]) {
    cand[j] = cand[j - 1];
    ix[j] = ix[j - 1];
    j--;
  }
  cand[j] = v;
  ix[j] = i;
}

/* One sentence's step of beam search, as fairseq's sequence_generator: the 2 B best
 * continuations of its live beams (at the first step of beam 0 alone; past the length limit
 * only EOS); an EOS among the first B finishes a hypothesis (fairseq's score: the sum over the
 * whole hypothesis / its length^lenpen, EOS counted), and the first B others are the next
 * beams. Log-probabilities in double, so beam 1 ranks as greedy's argmax. Returns 1 when the
 * sentence has B finished hypotheses. */
static int beam_sentence(const gp_decode_set *s, scratch *w, int64_t r, int64_t step,
                         const float *z, int64_t V) {
  const int64_t B = w->beam, T = s->T;
  double *cand = w->cand + 2 * B * r;
  int64_t *ix = w->cand_ix + 2 * B * r, have = 0;
  const int force_eos = step >= w->max_len[r];
  for (int64_t k = 0; k < (step ? B : 1); k++) {
    const float *zr = z + (r * B + k) * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; j++)
      if (zr[j] > mx) mx = zr[j];
    for (int64_t j = 0; j < V; j++)
      sum += exp((double)zr[j] - mx);
    const double lse = mx + log(sum), base = w->bscore[r * B + k];
    for (int64_t j = 0; j < V; j++) {
      if (j == s->pad || (force_eos && j != s->eos)) continue;
      top_insert(cand, ix, &have, 2 * B, base + ((double)zr[j] - lse), k * V + j);
    }
  }
  int64_t nb = 0;
  for (int64_t c = 0; c < have && nb < B; c++) {
    int64_t k = ix[c] / V, tok = ix[c] % V;
    const int32_t *src = w->btok + (r * B + k) * T;
    if (tok == s->eos) {
      if (c < B && w->fin_n[r] < B) {
        int64_t f = r * B + w->fin_n[r]++;
        memcpy(w->fin_tok + f * T, src, (size_t)step * sizeof *src);
        w->fin_len[f] = step + 1;
        w->fin_score[f] = cand[c];
      }
      continue;
    }
    int64_t to = r * B + nb++;
    memcpy(w->btok2 + to * T, src, (size_t)step * sizeof *src);
    w->btok2[to * T + step] = (int32_t)tok;
    w->bscore[to] = cand[c]; /* read (cand) before any later beam's base: cand is a copy */
    w->from[to] = r * B + k;
  }
  for (; nb < B; nb++) { /* fewer continuations than beams: repeat the last (never chosen) */
    int64_t to = r * B + nb;
    w->from[to] = to;
    w->bscore[to] = -INFINITY;
  }
  return w->fin_n[r] >= B;
}

/* Beam search over the n sentences of batch src, B rows each in the cache. A finished
 * sentence's rows keep running (unread) so the batch keeps its rows. */
static gp_status decode_batch_beam(gp_trainer *t, const gp_decode_set *s, const gp_batch *src,
                                   scratch *w) {
  const int64_t T = s->T, n = src->n, B = w->beam, rows = n * B;
  int64_t longest = prepare_rows(t->m, s, src, w);
  gp_batch b = gp_batch_of(&w->buf, rows);
  GP_TRY(gp_kvdec_begin(w->kd, &b));
  int32_t *prev = w->argmax;
  unsigned char *done = (unsigned char *)w->hyp; /* n flags, until the hypotheses are written */
  for (int64_t r = 0; r < rows; r++) {
    prev[r] = s->bos;
    w->bscore[r] = 0;
    w->from[r] = r;
  }
  memset(done, 0, (size_t)n);
  memset(w->fin_n, 0, (size_t)n * sizeof *w->fin_n);
  for (int64_t step = 0; step <= longest; step++) {
    if (t->check) GP_TRY(t->check());
    if (step == T) { /* a full row: no position left for EOS, so it ends them unscored */
      for (int64_t r = 0; r < n; r++)
        for (int64_t k = 0; !done[r] && k < B && w->fin_n[r] < B; k++) {
          int64_t f = r * B + w->fin_n[r]++;
          memcpy(w->fin_tok + f * T, w->btok + (r * B + k) * T, (size_t)T * sizeof *w->btok);
          w->fin_len[f] = T + 1;
          w->fin_score[f] = w->bscore[r * B + k];
        }
      break;
    }
    step_inputs(t->m, s, w, rows, step, prev);
    const float *z;
    int64_t V;
    GP_TRY(gp_kvdec_step(w->kd, w->step_in, &z, &V));
    int live = 0;
    for (int64_t r = 0; r < n; r++) {
      if (done[r]) {
        for (int64_t k = 0; k < B; k++)
          w->from[r * B + k] = r * B + k;
        continue;
      }
      done[r] = (unsigned char)beam_sentence(s, w, r, step, z, V);
      live += !done[r];
    }
    if (!live) break;
    for (int64_t r = 0; r < rows; r++) {
      if (done[r / B]) continue;
      memcpy(w->btok + r * T, w->btok2 + r * T, (size_t)(step + 1) * sizeof *w->btok);
      prev[r] = w->btok[r * T + step];
    }
    GP_TRY(gp_kvdec_reorder(w->kd, w->from));
  }
  for (int64_t r = 0; r < n; r++) {
    int64_t f =
        r * B + gp_decode_best(w->fin_score + r * B, w->fin_len + r * B, w->fin_n[r], s->lenpen);
    if (w->fin_n[r] == 0) f = -1; /* cannot happen: the limit forces EOS */
    w->hyp_len[r] = f < 0 ? 0 : w->fin_len[f] - 1;
    if (f >= 0) memcpy(w->hyp + r * T, w->fin_tok + f * T, (size_t)w->hyp_len[r] * sizeof *w->hyp);
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
  if (s->beam < 0) return GP_ERR(GP_ERR_USAGE, "--beam %d: beams are 1 or more", s->beam);
  const int64_t B = s->beam > 1 ? s->beam : 1; /* beam 1 searches too: it must equal greedy */
  unsigned char step_in[GP_MAX_MODEL_INPUTS] = {0};
  const int which[5] = {s->tgt_in, s->label, s->tgt_mask, s->tgt_seg, s->tgt_pos};
  for (int k = 0; k < 5; k++)
    if (which[k] >= 0) step_in[which[k]] = 1;
  const char *why =
      s->uncached ? "--no-kv-cache"
                  : gp_kvdec_unsupported(t, step_in, out->uncached_why, sizeof out->uncached_why);
  if (why && s->beam >= 1)
    return GP_ERR(GP_ERR_USAGE, "--beam %d needs the decoding cache: %s", s->beam, why);
  if (why && why != out->uncached_why)
    snprintf(out->uncached_why, sizeof out->uncached_why, "%s", why);
  scratch w;
  GP_TRY(scratch_alloc(t->m, s, B, s->beam >= 1, &w));
  if (!why) {
    gp_status cs = gp_kvdec_create(t, step_in, s->batch * B, &w.kd);
    if (cs != GP_OK) {
      scratch_free(&w);
      return cs;
    }
  }
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
    st = !w.kd          ? decode_batch(t, s, &b, &w)
         : s->beam >= 1 ? decode_batch_beam(t, s, &b, &w)
                        : decode_batch_cached(t, s, &b, &w);
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
