/* Fixed-shape rows of token ids for sequence models (translation and language models), from a
 * gp_token_corpus. A model's inputs are told apart by name (docs/data-translation.md):
 *
 *   translation: src, src_mask | src_seg + src_pos, tgt_in, tgt_mask | tgt_seg + tgt_pos, label
 *   language model: tokens, seg + pos (optional), label
 *
 * all I32 of shape [S] (source side) or [T] (target side: tgt_in, tokens, label and their
 * masks). Without segment inputs a row holds one pair, padded; with them (packed rows, as
 * Lingvo's packed inputs and T5) it holds as many pairs as fit, sentence k of the row marked
 * k + 1 in the segment ids (0 = padding) and its positions counted from 0, so a batch of B
 * rows is a token budget of B x S source and B x T target tokens whatever the sentence
 * lengths. The language model reads the target side of each pair (one sentence a line).
 *
 * Row contents for a pair with source s_0..s_{n-1} EOS and target t_0..t_{m-1} EOS:
 * src = s_0..s_{n-1} EOS; tgt_in = BOS t_0..t_{m-1}; label = t_0..t_{m-1} EOS; masks 1 on
 * those positions; padding is pad_id in ids, 0 in masks, segments and positions, and -100
 * (ignored) in labels. */
#ifndef GP_SEQFEED_H
#define GP_SEQFEED_H

#include "core/spec/spec.h"
#include "data/tokens.h"

typedef enum gp_seq_role {
  GP_SEQ_SRC,
  GP_SEQ_SRC_MASK,
  GP_SEQ_SRC_SEG,
  GP_SEQ_SRC_POS,
  GP_SEQ_TGT_IN,
  GP_SEQ_TGT_MASK,
  GP_SEQ_TGT_SEG,
  GP_SEQ_TGT_POS,
  GP_SEQ_LABEL,
  GP_SEQ_ROLES
} gp_seq_role;

#define GP_SEQ_IGNORE (-100) /* label of a padded position */

typedef struct gp_seq_layout {
  int input[GP_SEQ_ROLES]; /* the model input of each role, -1 when the model has none */
  int n_inputs;            /* the model's inputs (all of them have a role) */
  int64_t S, T;            /* source and target row lengths (S = 0: a language model) */
  int packed;              /* segment inputs: several pairs a row */
} gp_seq_layout;

/* The layout of m's inputs; GP_ERR_SPEC "FILE: ..." naming an input that has no role, a
 * wrong dtype or shape, or a missing one (tgt_in/tokens and label are required; src for a
 * translation model; a segment input needs its positions and the other side's segments). */
gp_status gp_seq_layout_of(const gp_model *m, gp_seq_layout *out);
/* 1 when m's inputs name a sequence model (one of them is tgt_in or tokens). */
int gp_seq_is_sequence_model(const gp_model *m);

typedef struct gp_seqfeed_opts {
  int64_t rows;    /* rows a batch */
  int train;       /* 1: reshuffled and repacked each epoch, endless; 0: one pass in order */
  int one_per_row; /* 1: one pair a row even for a packed model (decoding) */
  uint64_t seed;   /* train: the order of each epoch comes from (seed, epoch) */
  int32_t pad_id, bos_id;
  int64_t limit;        /* 0: every pair; else only the first limit pairs of the corpus */
  int truncate;         /* 1: a pair too long for a row is cut to fit (its source keeps EOS last)
                           instead of left out (one_per_row only: for decoding a whole split) */
  int by_source_length; /* eval, one pair a row: rows ordered by source length, longest
                           first, so a batch's sentences are of similar lengths */
} gp_seqfeed_opts;

typedef struct gp_seqfeed gp_seqfeed;

/* A feed over c (borrowed: it must outlive the feed). Pairs too long for a row (a side
 * longer than S or T) are left out and counted (gp_seqfeed_stats), or cut (truncate). GP_ERR_DATA
 * when no pair fits, or a train epoch has fewer than one batch of rows. */
gp_status gp_seqfeed_open(const gp_token_corpus *c, const gp_seq_layout *L,
                          const gp_seqfeed_opts *o, gp_seqfeed **out);
void gp_seqfeed_free(gp_seqfeed *f);

/* Fills in[L->input[role]] (each rows x [S] or [T] int32, in the model's input order; NULL:
 * not wanted, except tgt_in and the labels) with the next batch; *rows = 0 when an eval pass is
 * done (seek to (0, 0) to go again). Train batches are always o->rows rows; the last eval batch may
 * be shorter. */
gp_status gp_seqfeed_next(gp_seqfeed *f, void *const *in, int64_t *rows);
/* The corpus pairs in row r of the last batch: *n of them, their indices in *pairs. */
void gp_seqfeed_row_pairs(const gp_seqfeed *f, int64_t r, const int64_t **pairs, int64_t *n);

int64_t gp_seqfeed_batches(const gp_seqfeed *f); /* batches an epoch (eval: of the pass) */
int64_t gp_seqfeed_pairs(const gp_seqfeed *f);   /* pairs used (kept and within limit) */
void gp_seqfeed_tell(const gp_seqfeed *f, int64_t *epoch, int64_t *index);
gp_status gp_seqfeed_seek(gp_seqfeed *f, int64_t epoch, int64_t index);

typedef struct gp_seqfeed_stats {
  int64_t too_long; /* pairs left out (or cut): a side does not fit a row */
} gp_seqfeed_stats;
void gp_seqfeed_stats_get(const gp_seqfeed *f, gp_seqfeed_stats *out);
/* Rows of the current epoch's plan, and the fraction of their source and target slots that
 * hold real tokens (the rest is padding). */
void gp_seqfeed_fill(const gp_seqfeed *f, int64_t *rows, double *src_fill, double *tgt_fill);

#endif
