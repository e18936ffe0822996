/* Where the trainer's batches come from: one interface (a table of functions and a context)
 * that image loaders and sequence-model feeds implement in data/, so that the programs and the
 * trainer read every kind of data the same way. A source gives global mini-batches; a replica
 * r of R reads the contiguous slice r of R of each (gp_batch_slice), so R, like K and M,
 * changes the speed and never the numbers. */
#ifndef GP_BATCH_SOURCE_H
#define GP_BATCH_SOURCE_H

#include <stddef.h>

#include "core/exec/pipeline.h"

/* What a source reports besides its batches (for the programs' data lines). */
typedef struct gp_batch_source_stats {
  const char *split;    /* "train", "valid", "test" */
  int tokens;           /* targets are tokens: evaluations report perplexity over them */
  int64_t left_out;     /* samples not read: pairs longer than a row */
  int workers;          /* decode threads (-1: the source has none to report) */
  double wait_s;        /* the caller's time blocked waiting for batches */
  int64_t batches;      /* returned so far */
  int64_t skipped;      /* bad samples replaced */
  int64_t decoded;      /* samples decoded (images; 0 where nothing is decoded) */
  char first_skip[512]; /* the first skipped sample's error */
  /* denoising data (data.task: denoise): the peak of the targets' range (else 0), and the
   * noisy inputs' squared error against the targets summed over the elements read since the
   * last seek (a whole evaluation pass), for the noisy input's PSNR */
  double peak, noisy_sq_sum;
  int64_t noisy_elems;
} gp_batch_source_stats;

typedef struct gp_batch_source_ops {
  /* The next global batch into *b, in buffers the source owns (valid until its next call);
   * b->n = 0 at the end of a pass (evaluation splits; training splits are endless). */
  gp_status (*next)(void *ctx, gp_batch *b);
  /* Position for checkpoints: epoch (from 0) and the index of the next batch or sample in it. */
  gp_status (*seek)(void *ctx, int64_t epoch, int64_t index);
  void (*tell)(const void *ctx, int64_t *epoch, int64_t *index);
  /* One line on the data for the progress display ("" when there is nothing to say). */
  void (*describe)(const void *ctx, char *buf, size_t n);
  int64_t (*batches)(const void *ctx); /* global batches an epoch; -1 when unknown (a stream) */
  void (*stats)(const void *ctx, gp_batch_source_stats *out);
  void (*free)(void *ctx);
  /* What the caller reads of every batch from the next one on (gp_batch_source_want). */
  gp_status (*want)(void *ctx, const unsigned char *used, int replica, int replicas);
} gp_batch_source_ops;

typedef struct gp_batch_source {
  const gp_batch_source_ops *ops;
  void *ctx;
  size_t row_bytes[GP_MAX_MODEL_INPUTS]; /* bytes a sample of each input takes */
  int replica, replicas;                 /* this reads slice `replica` of `replicas` (0 of 1) */
} gp_batch_source;

/* A source over ctx for batches of m's inputs; ops->free frees ctx with the source, or at
 * once when making the source fails. Optional ops: describe, stats, free, want (NULL). */
gp_status gp_batch_source_new(const gp_batch_source_ops *ops, void *ctx, const gp_model *m,
                              gp_batch_source **out);
void gp_batch_source_free(gp_batch_source *s); /* accepts NULL */
/* Makes s read replica r's share of R of every global batch. GP_ERR_USAGE when r is not in
 * [0, R). */
gp_status gp_batch_source_set_replica(gp_batch_source *s, int r, int R);

/* Tells s what its caller reads of every global batch from the next one on: the inputs i with
 * used[i], of the rows of share `replica` of `replicas` (gp_batch_share: as the pipeline takes
 * them); the labels (the model's label input) are read whole all the same, for the loss's
 * normalization (gp_batch_targets). A batch stays the global one (b->n rows, each input's
 * buffer of n rows), but what is not read may be left unfilled: a process holding later stages
 * decodes no image. Batches and positions are what they were; statistics count what was read.
 * Optional (a source without the op fills everything). GP_ERR_USAGE when replica is not in
 * [0, replicas). */
gp_status gp_batch_source_want(gp_batch_source *s, const unsigned char used[GP_MAX_MODEL_INPUTS],
                               int replica, int replicas);

/* Share r of R of g (g->n = n), the rows gp_batch_share gives and the pipeline takes: the
 * shares of r = 0 .. R-1, concatenated, are g, the first n mod R one row longer. row_bytes: of
 * each model input. */
gp_batch gp_batch_slice(const gp_batch *g, const size_t *row_bytes, int r, int R);

/* This replica's share of the next global batch. *end (NULL: not wanted) is 1 at the end of
 * a pass, when the global batch was empty; a replica's share of a non-empty batch may be
 * empty (a batch of fewer rows than replicas). Training splits never end. */
gp_status gp_batch_source_next(gp_batch_source *s, gp_batch *b, int *end);
gp_status gp_batch_source_seek(gp_batch_source *s, int64_t epoch, int64_t index);
void gp_batch_source_tell(const gp_batch_source *s, int64_t *epoch, int64_t *index);
void gp_batch_source_describe(const gp_batch_source *s, char *buf, size_t n);
int64_t gp_batch_source_batches(const gp_batch_source *s);
void gp_batch_source_stats_get(const gp_batch_source *s, gp_batch_source_stats *out);

#endif
