/* Synchronous training of a loaded model through the pipeline (K = 1 is a pipeline of one
 * stage): a step over a mini-batch, evaluation, weights in safetensors, and exact
 * checkpoints (weights, optimizer state, step, data position) written atomically. Weights and
 * checkpoints are named by layer path, so they do not depend on K or M. */
#ifndef GP_TRAINER_H
#define GP_TRAINER_H

#include "core/exec/pipeline.h"
#include "core/train/batch_source.h"

typedef struct gp_metrics {
  double loss;     /* mean over targets (samples, or tokens that are not ignored) */
  double accuracy; /* fraction of the targets predicted correctly (f32 targets: NAN in steps) */
  int64_t samples;
  int64_t targets;
  /* evaluations of a source whose targets are tokens (gp_batch_source_stats.tokens): exp of
   * the mean plain negative log-likelihood (no label smoothing) over ppl_targets; else NAN, 0 */
  double perplexity;
  int64_t ppl_targets;
  /* evaluations of denoising data (gp_batch_source_stats.peak > 0): the PSNR in dB of the
   * model's output (loss mse; else NAN) and of the noisy input against the clean targets, over
   * the pass; else NAN */
  double psnr, input_psnr;
} gp_metrics;

/* Host buffers for mini-batches of up to cap samples of every model input, in the model's
 * input order; gp_batch_buffers_free accepts a zeroed struct. */
typedef struct gp_batch_buffers {
  void *in[GP_MAX_MODEL_INPUTS];
  int64_t cap;
} gp_batch_buffers;

typedef struct gp_trainer {
  const gp_model *m; /* read only */
  gp_plan plan;
  gp_pipeline *pl;
  uint64_t seed;
  int64_t step; /* optimizer steps done */
  /* asked before each evaluation batch (NULL: never): an error drops the evaluation (a signal
   * that stops the program) */
  gp_status (*check)(void);
  /* the largest file weights and checkpoints are written as; above it, shards and an index
   * (core/io/shards.h). 0: GP_SHARD_BYTES_DEFAULT, 4 GiB */
  int64_t shard_bytes;
  /* gp_trainer_fetch's batches: this step's and the next (have_next), kept in buffers of their
   * own (flip: the one holding this step's) where the next is fetched */
  gp_batch_buffers keep[2];
  gp_batch cur, next;
  int have_next, flip;
  /* the source's position (gp_batch_source_tell) after cur: while next, fetched, is not yet
   * trained, where a run that stops goes on from */
  int64_t cur_epoch, cur_index, next_epoch, next_index;
} gp_trainer;

/* Weights are initialized from seed (the same for every K and M). */
gp_status gp_trainer_init(gp_trainer *t, const gp_model *m, const gp_plan *plan,
                          const gp_pipeline_opts *o, uint64_t seed);
void gp_trainer_free(gp_trainer *t);

/* One optimizer step on a host mini-batch (one buffer per model input, see gp_batch). */
gp_status gp_trainer_step(gp_trainer *t, const gp_batch *b, double lr, gp_metrics *out);
/* The same, told the next step's batch (NULL: none), so that steps may overlap
 * (gp_pipeline_train_step_ahead: the next call must be the step of `next`, whose buffers stay
 * valid and unchanged until it returns; gp_batch_keep makes such a copy). */
gp_status gp_trainer_step_ahead(gp_trainer *t, const gp_batch *b, const gp_batch *next, double lr,
                                gp_metrics *out);
/* The batch of a model of one f32 input and labels: x (n x sample f32) feeds the input that
 * is not the labels, y (int32) the labels. GP_ERR_USAGE for other models. */
gp_status gp_batch_xy(const gp_model *m, const float *x, const int32_t *y, int64_t n,
                      gp_batch *out);

gp_status gp_batch_buffers_alloc(const gp_model *m, int64_t cap, gp_batch_buffers *out);
void gp_batch_buffers_free(gp_batch_buffers *b);
gp_batch gp_batch_of(const gp_batch_buffers *b, int64_t n);
/* The batch for the next gp_trainer_step_fetched from src, and, with `ahead`, the one after it
 * too, so that the steps may overlap (gp_trainer_step_ahead); each kept where needed (the source
 * may reuse its buffers). */
gp_status gp_trainer_fetch(gp_trainer *t, gp_batch_source *src, int ahead);
gp_status gp_trainer_step_fetched(gp_trainer *t, double lr, gp_metrics *out);
/* A copy of b's inputs in buf (grown to fit b), as *out (its f32 targets, which no loss reads,
 * still b's): a batch that outlives the source's next one, which may reuse its buffers. */
gp_status gp_batch_keep(const gp_model *m, const gp_batch *b, gp_batch_buffers *buf, gp_batch *out);

/* Loss and accuracy (and, for tokens, perplexity) over one pass of src from its start
 * (seeks it to (0, 0)), forward only. */
gp_status gp_trainer_evaluate(gp_trainer *t, gp_batch_source *src, gp_metrics *out);

/* Weights and checkpoints: core/train/checkpoint.c (the multi-process writer: checkpoint.h).
 * The weights of the stages this process holds (all of them in one process) to path: one
 * safetensors file, or shards and path.index.json when they are larger than t->shard_bytes
 * (core/io/shards.h). */
gp_status gp_trainer_save_weights(gp_trainer *t, const char *path);
/* The weights of a gp_trainer_save_weights file or index (path X.safetensors, sharded or not,
 * or X.safetensors.index.json), or of a gpipe checkpoint (its "optim." tensors, the optimizer
 * state, are left: gp_trainer_load_checkpoint takes them); every other tensor must be one of the
 * model's. Only the stages this process holds are read. *ckpt_step (NULL: not wanted) is the
 * checkpoint's step, or -1 for a weights file. */
gp_status gp_trainer_load_weights(gp_trainer *t, const char *path, int64_t *ckpt_step);

typedef struct gp_ckpt_pos {
  int64_t epoch, index; /* data position */
  int64_t eval_due;     /* 1: the evaluation due after the step was cut short (by a signal) and
                         * is still to be done; 0 otherwise */
  double elapsed_s;     /* the run's time up to the checkpoint, seconds (0 in checkpoints
                         * written before it was stored), so a resumed run's clock goes on */
} gp_ckpt_pos;
/* DIR/checkpoint.safetensors, or (larger than t->shard_bytes) shards committed by
 * DIR/checkpoint.safetensors.index.json: weights, optimizer state ("optim.<slot>.<parameter>";
 * the flat "optim.<slot>" of older checkpoints loads too), and in the metadata the step, data
 * position, eval_due, elapsed time, batch size, seed and model name. Loading refuses a
 * checkpoint of another model, seed or batch size (the step count, epochs and data position all
 * depend on the batch size); one written before the batch size was stored is taken. Loading
 * reads the stages this process holds, so a checkpoint of any layout loads at any other. */
gp_status gp_trainer_save_checkpoint(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos);
gp_status gp_trainer_load_checkpoint(gp_trainer *t, const char *dir, gp_ckpt_pos *pos);

#endif
