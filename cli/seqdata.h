/* gpipe-train's data for sequence models (translation and language models): the corpora of
 * a translation or text data section (or synthetic pairs), packed rows for training
 * (data/seqfeed.h), and evaluation with loss, perplexity and, for translation, greedy
 * decoding scored by corpus BLEU against the reference text. */
#ifndef GP_CLI_SEQDATA_H
#define GP_CLI_SEQDATA_H

#include "core/train/trainer.h"
#include "data/loader.h"
#include "data/seqfeed.h"

typedef struct gp_seqdata gp_seqdata;

/* Models that are not sequence models are fed (x, y) batches: the one f32 input that is not
 * the labels, found in *out. Otherwise an error in user terms naming m's file and inputs;
 * `data` says what feeds them ("synthetic data"). */
gp_status gp_data_input(const gp_model *m, const char *data, const gp_model_input **out);
/* The classes m's output scores: the size of its last dimension (1 for a scalar). */
int64_t gp_model_classes(const gp_model *m);
/* Whether the training data opened for m fits it: its samples have xi's shape, its classes
 * are the model's outputs, and it holds at least one batch (streams of unknown size pass;
 * batch 0: any number, for a test split checked alone).
 * Errors name the model file, or for the size the data and what was read. */
gp_status gp_data_fits(const gp_model *m, const gp_model_input *xi, const gp_loader *train,
                       int64_t batch);
/* s, and where it is an error in the data section that opening the data found (GP_ERR_SPEC:
 * "data.path: set it ..."), its message located at that section ("m.yaml:30:3: "), as the
 * errors found when the file is read are. */
gp_status gp_data_error_at(const gp_model *m, gp_status s);

/* Reads path/{train,<eval_split>,test}.LANG.ids of m's data section (synthetic: random
 * pairs of the model's lengths and vocabulary, 16 batches for training and 2 for each
 * evaluation split). Errors name the file. */
gp_status gp_seqdata_open(const gp_model *m, int synthetic, uint64_t seed, int64_t batch,
                          gp_seqdata **out);
void gp_seqdata_free(gp_seqdata *d);

int64_t gp_seqdata_batches(const gp_seqdata *d); /* training batches an epoch */
/* Whether evaluation decodes translations: a translation model on real text (synthetic pairs
 * have no reference text, a language model no source). */
int gp_seqdata_translates(const gp_seqdata *d);
/* The next training batch (batch rows). */
gp_status gp_seqdata_next(gp_seqdata *d, gp_batch *b);
void gp_seqdata_tell(const gp_seqdata *d, int64_t *epoch, int64_t *index);
gp_status gp_seqdata_seek(gp_seqdata *d, int64_t epoch, int64_t index);
/* One line on the data: pairs, rows a batch, padding. */
void gp_seqdata_describe(const gp_seqdata *d, char *buf, size_t n);

typedef struct gp_seq_eval {
  const char *split;   /* "valid" or "test" */
  double loss;         /* the model's loss (label smoothing included), mean over tokens */
  double accuracy;     /* next-token accuracy */
  double perplexity;   /* exp of the plain negative log-likelihood per target token */
  int64_t tokens;      /* target tokens scored */
  int64_t left_out;    /* pairs of the split not scored: a side does not fit a row */
  double bleu;         /* corpus BLEU of greedy translations; < 0 when none were decoded */
  int64_t sentences;   /* sentences decoded */
  char bleu_line[160]; /* sacreBLEU's verbose line */
  double decode_s;     /* time spent decoding */
} gp_seq_eval;

/* Evaluates the eval split (final 0) or the test split (final 1): loss and perplexity over
 * every pair that fits a row, and BLEU over data.bleu_samples sentences (every one when final).
 * When hyp_out is set, writes one detokenized translation a line there. */
gp_status gp_seqdata_evaluate(gp_seqdata *d, gp_trainer *t, int final, const char *hyp_out,
                              gp_seq_eval *out);

#endif
