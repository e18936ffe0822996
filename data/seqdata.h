/* The data of sequence models (translation and language models): the corpora of a translation
 * or text data section (or synthetic pairs), read as batch sources (core/train/batch_source.h)
 * of packed training rows and of one pass over the eval and test splits, and for translation
 * the rows and reference text that greedy decoding scores (core/eval/decode.h). */
#ifndef GP_DATA_SEQDATA_H
#define GP_DATA_SEQDATA_H

#include "core/eval/decode.h"
#include "core/train/batch_source.h"
#include "data/seqfeed.h"

typedef struct gp_seqdata gp_seqdata;

typedef enum gp_seq_split { GP_SEQ_TRAIN, GP_SEQ_EVAL, GP_SEQ_TEST, GP_SEQ_SPLITS } gp_seq_split;

/* Reads path/{train,<eval_split>,test}.LANG.ids of m's data section (synthetic: random
 * pairs of the model's lengths and vocabulary, 16 batches for training and 2 for each
 * evaluation split). Errors name the file. */
gp_status gp_seqdata_open(const gp_model *m, int synthetic, uint64_t seed, int64_t batch,
                          gp_seqdata **out);
void gp_seqdata_free(gp_seqdata *d); /* frees its sources too */

/* The batch source of a split, owned by d: the training split's packed rows (endless,
 * reshuffled each epoch; its describe says pairs, rows a batch and padding), or one pass of
 * the eval or test split (tokens, left_out in its stats). */
gp_batch_source *gp_seqdata_source(gp_seqdata *d, gp_seq_split split);
/* Whether evaluation decodes translations: a translation model on real text (synthetic pairs
 * have no reference text, a language model no source). */
int gp_seqdata_translates(const gp_seqdata *d);
/* What decoding the eval split (final 0: its first data.bleu_samples pairs) or the test
 * split (final 1: every pair) reads, one pair a row, longest source first; *any = 0 (and
 * nothing to free) where nothing is decoded: no translation, or data.bleu_samples < 0. */
gp_status gp_seqdata_decode_set(gp_seqdata *d, int final, gp_decode_set *out, int *any);

#endif
