/* Random token batches for the Transformer model files' tests, filled by input name. */
#ifndef GP_TEST_TOKEN_FIXTURE_H
#define GP_TEST_TOKEN_FIXTURE_H

#include "core/train/trainer.h"

/* batch rows of len tokens for every input of mo, from (step): per row a random real length
 * in [1, len] (the source side's differs from the target side's); ids in [1, vocab) then pad
 * 0; labels in [0, vocab) then -100; masks 1 then 0; segments: packed rows of two sentences
 * (1 on the first half of the real tokens, 2 on the rest, 0 on padding); positions counted
 * within each sentence, 0 on padding. */
void token_fixture_batch(const gp_model *mo, int step, int64_t batch, int64_t len, int32_t vocab,
                         gp_batch_buffers *bufs);

/* models/transformer-nmt.yaml at a tiny size (rows of 6, vocabulary 13, d 8, 2 heads, 2 + 2
 * layers, no dropout), its optimizer as the file has it (AdamW, eps 1e-9: the attention's key
 * bias gets its exact zero gradient, not rounding noise Adam would turn into lr-sized steps).
 * The array has room for one more override after the TOKEN_TINY_NMT_N given. */
#define TOKEN_TINY_NMT_N 22
extern gp_override token_fixture_tiny_nmt[TOKEN_TINY_NMT_N + 1];

/* Trains file (with overrides) as K stages x M micro-batches for steps of fixture batches at
 * learning rate lr, weights from seed 42; loss[s] gets each step's loss and *t the trainer
 * (free it with gp_trainer_free, then gp_model_free(t->m)). Exits on an error. */
void token_fixture_train(const char *file, const gp_override *ov, int nov, int k, int m,
                         gp_schedule_kind sched, gp_remat remat, int steps, int64_t batch,
                         int64_t len, int32_t vocab, double lr, double *loss, gp_trainer *t);
/* Nonzero: token_fixture_train hands tensors between stages by copies, as if every stage had
 * its own device (gp_pipeline_opts.channels). */
extern int token_fixture_copy_all;
/* Every stage's trainable parameters back to back (malloc'd; *n floats). */
float *token_fixture_weights(gp_trainer *t, int64_t *n);

#endif
