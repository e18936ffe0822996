/* Incremental decoding through a trainer's stages: the nodes that read only the inputs given
 * once per batch (a translation model's source side: the encoder) run once, and the others run
 * one position a row per step, each attention layer keeping its keys and values
 * (gp_kv_cache), so a step costs one position, not the whole row. Stages on any backend (CPU,
 * CUDA, some of each: the caches in each stage's memory) but all in this process;
 * gp_kvdec_unsupported says why not elsewhere (callers then use the uncached path). */
#ifndef GP_EVAL_KVDEC_H
#define GP_EVAL_KVDEC_H

#include "core/train/trainer.h"

typedef struct gp_kvdec gp_kvdec;

/* NULL when t's model and stages can be decoded incrementally with the inputs marked in
 * step_in (1: the input changes each step: the target side, whose first axis is the position),
 * else one line on why not (a static string or buf). */
const char *gp_kvdec_unsupported(gp_trainer *t, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                                 char *buf, size_t n);

/* A decoder of batches of up to rows rows; the cache holds as many positions as the step inputs'
 * first axis (the model's maximum length). */
gp_status gp_kvdec_create(gp_trainer *t, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                          int64_t rows, gp_kvdec **out);
void gp_kvdec_free(gp_kvdec *d);

/* Bytes of the caches of a batch of rows held by nodes [first, end): every attention layer
 * reached from the step inputs (self-attention: keys and values of the maximum length;
 * cross-attention: of its memory) and the ids kept beside them (gpipe-partition counts them
 * when decoding is part of the run). */
int64_t gp_kvdec_cache_bytes(const gp_model *m, const unsigned char step_in[GP_MAX_MODEL_INPUTS],
                             int64_t rows, int first, int end);

/* Starts a batch of b->n rows: runs the once-a-batch nodes on b's inputs (the step inputs of b
 * are not read) and empties the caches. */
gp_status gp_kvdec_begin(gp_kvdec *d, const gp_batch *b);

/* One position a row: in[i] holds b->n values of each step input i (host memory; others
 * ignored). *logits: the model output of the position, n x *width floats in host memory (read
 * back once a step from a device), valid until the next call. */
gp_status gp_kvdec_step(gp_kvdec *d, const void *const in[GP_MAX_MODEL_INPUTS],
                        const float **logits, int64_t *width);

/* Row r of every cache becomes row from[r]'s (beam search keeps the best continuations); the
 * once-a-batch outputs are not moved, so from[r] must read the same input as r. */
gp_status gp_kvdec_reorder(gp_kvdec *d, const int64_t *from);

/* Positions a row may hold: the maximum length, or a smaller position table's max_len. */
int64_t gp_kvdec_capacity(const gp_kvdec *d);

#endif
