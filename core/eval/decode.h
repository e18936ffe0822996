/* Greedy decoding of a translation model through the trainer's pipeline, detokenized as
 * spm_decode does and scored by corpus BLEU against reference text. The data side
 * (data/seqdata.h) says what decoding needs in a gp_decode_set, so this code reads no data
 * format. */
#ifndef GP_EVAL_DECODE_H
#define GP_EVAL_DECODE_H

#include "core/train/trainer.h"

typedef struct gp_decode_set {
  /* one sentence a row, its source side filled; decoding writes the target side into its own
   * copy of each batch. Owned by the set */
  gp_batch_source *rows;
  /* row r of rows' last batch: the sentence (0 .. sentences - 1: the order of the
   * translations returned), its source length in words (EOS not counted) and its reference
   * text. ctx is rows' (freed with it) */
  void (*row)(void *ctx, int64_t r, int64_t *sentence, int64_t *src_words, const char **ref);
  void *ctx;
  int64_t sentences;
  int64_t batch;                                 /* rows a batch at most */
  int64_t T;                                     /* target row length */
  int tgt_in, label, tgt_mask, tgt_seg, tgt_pos; /* model inputs written (-1: none) */
  int32_t pad, bos, eos;
  double len_a, len_b;       /* a sentence's limit: len_a * source words + len_b, 1 to T */
  const char *const *pieces; /* the vocabulary's pieces ("piece" of "piece<TAB>score") */
  int32_t vocab;
  /* how to search (zero: greedy with the cache): beams (0: greedy; 1 searches, equal to greedy),
   * fairseq's length penalty (a finished hypothesis scores sum log p / len^lenpen, EOS counted in
   * both), and uncached 1 to rerun the whole model for every token (the reference the cache must
   * equal) */
  int beam;
  double lenpen;
  int uncached;
} gp_decode_set;
void gp_decode_set_free(gp_decode_set *s); /* frees rows; accepts a zeroed set */

typedef struct gp_decode_result {
  double bleu;         /* corpus BLEU */
  int64_t sentences;   /* decoded */
  char bleu_line[160]; /* sacreBLEU's verbose line */
  char **text;         /* per sentence of the set, its translation; NULL where not decoded */
  int64_t n_text;
  /* why the cache was not used ("" when it was): the model or stages have no cached form */
  char uncached_why[200];
} gp_decode_result;
void gp_decode_result_free(gp_decode_result *r); /* accepts a zeroed result */

/* Decodes every row of one pass of s->rows (greedily, or by beam search: s->beam) with t's model
 * and scores the translations against the references. t->check is asked between decoding steps. */
gp_status gp_decode_bleu(gp_trainer *t, gp_decode_set *s, gp_decode_result *out);

/* Beam search's choice among n candidate scores (sum of log-probabilities, EOS included) of
 * lengths len (EOS included): the index of the best by fairseq's score / len^lenpen, the first
 * on ties. */
int64_t gp_decode_best(const double *score, const int64_t *len, int64_t n, double lenpen);

#endif
