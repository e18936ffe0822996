/* The pipeline executor: one worker thread per stage, each with its own backend, parameters,
 * optimizer and activation arenas, interpreting its schedule's action list. Every tensor that
 * crosses stages goes through a channel (core/exec/channel.h): values forward into the
 * reader's memory (in place where the two share it), gradients back into buffers the producer
 * posted; a producer reuses a micro-batch's memory once every reader released it. A tensor used
 * by a stage further than the next (a skip tensor) goes straight to the stage that uses it. */
#ifndef GP_PIPELINE_H
#define GP_PIPELINE_H

#include "core/dist/layout.h"
#include "core/exec/channel.h"
#include "core/exec/stats.h"
#include "core/train/optimizer.h"
#include "core/train/params.h"
#include "core/plan/plan.h"
#include "core/schedule/schedule.h"

typedef struct gp_pipeline gp_pipeline;

typedef struct gp_pipeline_opts {
  int cores;         /* cores to share among the stages; threads per CPU stage = max(1, cores/K) */
  int pin;           /* pin each stage's worker to its share of the cores */
  double watchdog_s; /* a stage waiting longer than this for another is an error; 0 = 300 s */
  /* after a failure, how long to wait for the other stages to stop (0 = 10 s); one that does
   * not (stuck in a library call) leaves the pipeline wedged: gp_pipeline_wedged */
  double stop_s;
  int trace;              /* record every action's start and end for gp_pipeline_write_trace */
  gp_precision precision; /* of every stage's GEMMs and convolutions */
  size_t mem_limit;       /* per stage instance (gp_backend.mem_limit); 0 = none */
  int nondeterministic;   /* gp_backend.nondeterministic of every stage */
  /* tests: GP_CHAN_FORCE_COPY hands every tensor through a copying channel (model inputs
   * staged, stage tensors copied), as if each stage had its own device */
  gp_chan_policy channels;
  int device_timing; /* tests: time CPU stages' actions by the backend's timers, as GPU stages
                        always are (see gp_stage_stats) */
  /* tests: called on each stage's backend once made (tests/exec/test_graphs.c gives CPU
   * backends recorded op sequences, to test core/exec/graphs.c without a GPU) */
  void (*test_backend)(gp_backend *be);
  /* several processes (core/dist/dist.h; NULL: this one alone): this process runs the stages
   * its layout gives it, of its replica, on its share of every mini-batch */
  struct gp_dist *dist;
} gp_pipeline_opts;

/* Per-step results, summed over micro-batches (on the last stage). */
typedef struct gp_step_result {
  double loss_sum;          /* sum over targets of loss / loss_count */
  int64_t correct, counted; /* targets (samples, or tokens that are not ignored) */
} gp_step_result;

/* A host mini-batch: one buffer per model input, in the model's input order (labels
 * included), each n x that input's per-sample shape in its dtype (f32, i32). Micro-batches
 * are slices along dimension 0. Labels are the loss's targets: a negative label is an
 * ignored target (padding), which the loss layer must agree with (softmax_cross_entropy's
 * ignore_index is negative); the loss is the mean over the targets of the whole
 * mini-batch. */
typedef struct gp_batch {
  const void *in[GP_MAX_MODEL_INPUTS];
  int64_t n;
  /* f32 targets beside the labels (regression), n x target_numel, or NULL: carried by the
   * batch sources (core/train/batch_source.h); no loss reads them yet */
  const float *target;
  int64_t target_numel;
} gp_batch;

gp_status gp_pipeline_create(const gp_model *m, const gp_plan *plan, uint64_t seed,
                             const gp_pipeline_opts *o, gp_pipeline **out);
void gp_pipeline_free(gp_pipeline *pl);

/* One synchronous training step on a host mini-batch: M micro-batches through the
 * schedule, gradients summed, one optimizer step per stage with lr. The loss is normalized
 * over the targets of the whole mini-batch, so uneven micro-batches (and padding that falls
 * unevenly) are fine. With R replicas, b is the global mini-batch (every process passes the
 * same): replica r takes its contiguous share r of R and splits that into M micro-batches;
 * the gradients are summed over the replicas, the results are the global batch's. */
gp_status gp_pipeline_train_step(gp_pipeline *pl, const gp_batch *b, int64_t step, double lr,
                                 gp_step_result *out);
/* The same, told the batch of the next step (NULL: unknown): where no stage's update needs
 * another's (no clip_grad_norm, no tied weights, one process of CPU stages, GP_STEP_OVERLAP not
 * 0), stage 0 runs that step's first forwards while the later stages finish this one, so the
 * steps overlap; the numbers are the same. The next call must then be the step `step + 1` of
 * `next` (the same buffers, unchanged and valid until that call returns); an evaluation in
 * between is refused. */
gp_status gp_pipeline_train_step_ahead(gp_pipeline *pl, const gp_batch *b, const gp_batch *next,
                                       int64_t step, double lr, gp_step_result *out);
/* Forward only (evaluation mode) of a host batch; adds to out. */
gp_status gp_pipeline_eval(gp_pipeline *pl, const gp_batch *b, gp_step_result *out);
/* What gp_pipeline_predict reports beyond the loss: the argmax of the model's output (the
 * logits before the loss) at every position, b->n x positions (NULL: not wanted), and the
 * plain negative log-likelihood (natural log, no label smoothing) summed over the labels
 * that count, with their number; the sums add up over calls. */
typedef struct gp_prediction {
  int32_t *argmax;
  double nll_sum;
  int64_t nll_count;
} gp_prediction;
/* gp_pipeline_eval that also fills pred (for decoding and perplexity). */
gp_status gp_pipeline_predict(gp_pipeline *pl, const gp_batch *b, gp_prediction *pred,
                              gp_step_result *out);
/* The targets of a host batch the loss is averaged over: labels that are not negative
 * (n when the model has no labels). */
int64_t gp_batch_targets(const gp_model *m, const gp_batch *b);
/* Replica r of R's share of a global batch of n rows: rows [*lo, *hi). The shares of r = 0 ..
 * R-1 in order make the batch and differ in size by one at most (the first n % R are larger). */
void gp_batch_share(int64_t n, int r, int R, int64_t *lo, int64_t *hi);

/* Waits until every stage's device has finished the work queued so far (a step returns once
 * its work is queued: on GPUs the next step's launches may run ahead of the devices). */
gp_status gp_pipeline_sync(gp_pipeline *pl);

/* The stages (interleaved: the chunks, K V; chunk c of device d is stage c K + d). */
int gp_pipeline_stages(const gp_pipeline *pl);
/* V: the chunks each device holds (interleaved), else 1. */
int gp_pipeline_chunks(const gp_pipeline *pl);
/* The schedule the devices run (interleaved: K lists of chunked actions, costs per chunk). */
const gp_schedule *gp_pipeline_schedule(const gp_pipeline *pl);
/* 1 while a stage that did not stop after a failure (gp_pipeline_opts.stop_s) still runs: it
 * uses the pipeline and the model, so neither may be freed (gp_pipeline_free leaves them) and
 * no command is taken. A stage stuck for good keeps it 1: end the process. */
int gp_pipeline_wedged(gp_pipeline *pl);
/* Which stages this process runs (all of them in one process; see gp_pipeline_opts.layout):
 * the params, optimizer and backend of a stage held elsewhere are NULL. */
const gp_layout *gp_pipeline_layout(const gp_pipeline *pl);
int gp_pipeline_local(const gp_pipeline *pl, int stage);
/* What this process reads of a host batch (core/train/batch_source.h's gp_batch_source_want):
 * used[i] = 1 for each model input a stage held here reads, and for the labels, which every
 * process reads whole (gp_batch_targets); of an input read, the rows of its replica's share
 * alone (gp_batch_share of gp_pipeline_layout's replica and replicas). */
void gp_pipeline_inputs_used(const gp_pipeline *pl, unsigned char used[GP_MAX_MODEL_INPUTS]);
/* The last command's share of the global batch in this replica: samples [first, first + n). */
void gp_pipeline_share(const gp_pipeline *pl, int64_t *first, int64_t *n);
gp_params *gp_pipeline_params(gp_pipeline *pl, int stage);
gp_optimizer *gp_pipeline_optimizer(gp_pipeline *pl, int stage);
gp_backend *gp_pipeline_backend(gp_pipeline *pl, int stage);
#endif
