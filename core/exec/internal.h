/* Private to the pipeline executor's files: pipeline.c (setup, the stage threads, the main
 * thread's side), stage.c (a stage's actions and hand-offs), stats.c (busy time, statistics,
 * bubbles) and trace.c (the Chrome trace). The state they share, and how they call each
 * other. */
#ifndef GP_EXEC_INTERNAL_H
#define GP_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/exec/channel.h"
#include "core/exec/collective.h"
#include "core/exec/pass.h"
#include "core/exec/pipeline.h"
#include "core/train/tied.h"

#define MSG_MAX 1024

/* A tensor this stage reads: its channel from the producing stage, or from the host batch. */
typedef struct ext_in {
  int t;        /* tensor id */
  int producer; /* stage, or -1 for a model input */
  gp_chan *ch;
} ext_in;

/* A tensor this stage produces that a later stage reads (one per reader). */
typedef struct ext_out {
  int t;        /* tensor id */
  int consumer; /* stage */
  gp_chan *ch;
} ext_out;

typedef enum cmd_kind { CMD_NONE, CMD_TRAIN, CMD_EVAL, CMD_EXIT } cmd_kind;

/* One traced action (node < 0), or one layer inside an action: node `node`'s forward,
 * backward or recompute. */
typedef struct trace_ev {
  gp_action_kind kind;
  int micro, node;
  int64_t step;
  double t0, t1, busy; /* wall start and end; compute time (see busy_s) */
  int device;          /* a span of the device's queue (device time), not of the host thread */
} trace_ev;

/* An action of this step whose time the device will tell (device_span): timers 2i and 2i + 1
 * of the stage mark its start and end on the compute queue. */
typedef struct device_span {
  gp_action_kind kind;
  int micro, at;
  double waited; /* host time spent waiting for the other stages inside it */
} device_span;

/* Where a stage's time goes: what its statistics and the trace are made of, kept apart from
 * the state its actions run on (core/exec/stats.c counts, core/exec/trace.c writes). */
typedef struct stage_meter {
  int64_t sent_bytes;
  double fwd_s, bwd_s;
  double wall_kind_s[GP_A_KINDS]; /* wall time inside actions, by kind (gp_stage_stats) */
  /* this step's wall time of each of its schedule's actions (a backward's with its hand-off,
   * without its recompute, which is in rec_s), for gp_schedule_replay; at: the action running */
  double *act_s, *rec_s;
  int at;
  /* Device time: on a stage whose backend queues its work (a GPU), the host's wall time of an
   * action is its launches, so each action is instead timed on the compute queue by a pair of
   * timers, read once the step has passed (NULL tm: host time) */
  gp_event **tm;     /* 2 per span, then the step's reference */
  device_span *span; /* this step's spans */
  int n_span, cap_span;
  double ref_host; /* host time when the reference was recorded on the idle queue */
  /* when tracing, each layer too: a pair of timers per layer call (a pool that only grows,
   * so steady state creates none), trace_ev entries waiting for their times (t0, t1 unset) */
  gp_event **ltm;
  trace_ev *lspan;
  int n_lspan, cap_lspan;
  int64_t steps;
  int64_t early; /* forwards run ahead of their step (run_ahead) */
  trace_ev *ev;
  int64_t n_ev, cap_ev;
  double layer_t0; /* record_layer: when the current layer started */
} stage_meter;

/* The stage's gradient all-reduce across its replicas (core/exec/allreduce.c), in buckets of
 * the flat gradient buffer started while its last backward runs: a node's gradients are final
 * once that backward passed it, and nodes lie in order in the buffer, so [lo, n_train) is
 * final as the backward goes down. */
typedef struct stage_ar {
  int on;     /* this step's last backward is running: buckets start as layers finish */
  int last_b; /* the index of the stage's last backward action in its schedule (its last W
                 where the list defers W: the weight gradients are final only after it) */
  int64_t lo; /* [lo, hi) final, not started; [hi, n_train) started */
  int64_t hi;
  int64_t *node_off; /* per node of the stage: its gradients' first float, -1: none */
  struct gp_net_req **req;
  int n_req, cap_req;
  /* a GPU stage's: NCCL's communicator of its replicas (NULL: MPI, each bucket staged in the
   * page-locked host copy through the copy queues: a bucket's copy out, sum and copy back) */
  struct gp_nccl *nccl;
  float *host;
  struct gp_ar_bucket *bucket;
  int n_bucket, cap_bucket;
  double t_first; /* when the first bucket started */
  /* since the last reset: the all-reduces' wall time (first start to last completion), the
   * part the step waited for, the bytes */
  double span_s, wait_s;
  int64_t bytes, steps;
} stage_ar;

typedef struct stage {
  gp_pipeline *pl;
  int index, first, end;
  int place; /* memory space: stages with equal places share memory (plain hand-offs) */
  gp_backend *be;
  /* per micro-batch: outputs ready (compute); gradients written for the producers (compute);
   * the copies of inputs (queue IN) and of gradients (queue OUT) done */
  gp_event **ev_fwd, **ev_grads, **ev_pull, **ev_push;
  gp_params params;
  gp_optimizer opt;
  int have_opt;
  gp_arena *slot_arena; /* M arenas: one per micro-batch slot */
  gp_arena scratch;     /* forwards whose activations are dropped (re-materialization) */
  /* BF16_MIXED in 16 bits (core/exec/bfstore.h; NULL: off): the nodes whose outputs the slots
   * keep packed, and the arena one node's widened copies take in a backward */
  unsigned char *pack;
  gp_arena widen;
  gp_mem_meter meter;
  gp_pass *pass;            /* M passes */
  struct gp_graphs *graphs; /* the passes' CUDA graphs (core/exec/graphs.h), or NULL */
  /* remat auto's selective slots (plan remat_drop, remat_sel): micro-batch m drops the
   * activations of the nodes flagged in remat (gp_stage_remat_set; NULL: none) where
   * remat_drop <= m % slots < remat_drop + remat_sel */
  unsigned char *remat;
  int remat_drop, remat_sel;
  /* the list defers W (zero-bubble): a backward runs the input half alone and the slot stays
   * held until its W, which adds the weight gradients and frees it */
  int split;
  int n_in, n_out, n_grads_expected, n_wait_in;
  int n_net; /* channels to or from other processes (their waits poll MPI) */
  stage_ar ar;
  gp_status net_fail; /* a poll between layers failed: the next wait reports net_msg */
  char net_msg[MSG_MAX];
  ext_in *in;
  ext_out *out;
  void **grad_to;         /* n_out: send_outputs' gradient buffers of the micro-batch */
  gp_chan_count *box;     /* M: what the channels delivered for each micro-batch */
  pthread_cond_t arrived; /* with pl->mu: something arrived in box (or a stage failed) */
  pthread_t thread;
  int started;
  uint64_t finished; /* the generation of the last command it finished (under pl->mu) */
  stage_meter rec;   /* statistics and trace */
  gp_step_result acc;
  /* overlapped steps (pl->nx): the step its current action belongs to (the trace's), whether
   * it runs the next step's forwards, and what those leave to their own step: their times by
   * action index (for the replay) and their results */
  int64_t step;
  int ahead;
  double *ahead_s;
  gp_step_result ahead_acc;
  double nll_sum; /* gp_prediction's sums, on the stage that predicts */
  int64_t nll_count;
} stage;

/* What a command's stages hand the main thread (share_results). */
typedef struct pl_results {
  gp_step_result step;
  double nll_sum;
  int64_t nll_count;
} pl_results;

struct gp_pipeline {
  const gp_model *m; /* read only: each stage binds its own parameters */
  gp_plan plan;
  gp_layout lay;            /* which stages this process runs */
  struct gp_dist *dist;     /* NULL: one process */
  int first_local, n_local; /* the lowest stage this process runs, how many it runs (not a
                             * run under interleaved schedules: gp_layout_local says which) */
  int64_t base;             /* this replica's first sample in the global mini-batch */
  /* tests across processes: GP_TEST_NO_ALLREDUCE=1 leaves the replicas' gradients apart (the
   * negative control of the equivalence checks); GP_TEST_NAN_STAGE=s makes stage s's outputs
   * NaN in the second step's micro-batch 0 (-1: neither); GP_TEST_STAGED=1 runs CPU stages
   * through the GPU stages' hand-offs and all-reduce, staged in page-locked host memory by
   * queued copies (plain copies on the CPU), so that their logic runs where no GPU is */
  int test_no_allreduce, test_nan_stage, test_staged;
  /* GP_TEST_AHEAD_ALL=1: stage 0 runs all its early forwards (run_ahead), however soon the other
   * stages are done, so that tests see the same overlap under any load */
  int test_ahead_all;
  int nccl; /* GPU stages of different processes or replicas use NCCL (every process agreed) */
  gp_schedule sched; /* per stage (interleaved: per chunk, derived from dev_sched) */
  int k, micro;
  /* interleaved (chunks V >= 2): k = devices x chunks stages, chunk c of device d being stage
   * c K + d; the devices' lists, each device's phase in a training command (its chunks ready:
   * 0..V-1, its forwards and backwards done: V), and for each device action its stage (-1:
   * the step) and index in that stage's list, with room for its times (replay). Otherwise
   * devices = k, chunks = 1. */
  int devices, chunks;
  gp_schedule dev_sched;
  _Atomic int *turn;
  int **dev_owner, **dev_at;
  double **rep_dur, **rep_rdur;
  stage *st;
  uint64_t seed;
  double watchdog_s;
  int pin, cores, threads_per_stage, trace;
  gp_chan_policy chan_policy;
  gp_chan *chan; /* n_chan: every edge, node tensors and model inputs */
  int n_chan;
  int device_timing; /* 1: every stage (tests), 0: GPU stages, -1: none (GP_DEVICE_TIMING=0) */
  void (*test_backend)(gp_backend *be); /* gp_pipeline_opts' */
  int spin; /* stages wait for their inputs by spinning first (each has cores of its own) */
  gp_precision precision;
  int nondeterministic;
  size_t mem_limit;
  double t_origin;
  double span_s;                       /* wall time of the training steps since the last reset */
  double replay_span_s, replay_busy_s; /* the same steps replayed (gp_schedule_replay) */
  double pace_busy_s; /* the busiest stage's busy time of each training step, summed */
  int replay_lost;    /* a step since the reset could not be replayed */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* commands, completions, the step barrier, failures */
  /* the current command */
  cmd_kind cmd;
  uint64_t generation;
  int done;
  gp_batch in;
  int64_t batch, step;
  int64_t targets; /* the mini-batch's targets: the loss's normalizer */
  double lr;
  int64_t off[GP_MAX_MICRO_BATCHES + 1]; /* micro-batch m: samples [off[m], off[m+1]) */
  gp_prediction *pred;                   /* gp_pipeline_predict: what the last stage fills */
  /* Consecutive steps overlap (stage.c, run_ahead): where no stage's update needs another's
   * (no clipping norm, no ties, one process of CPU stages: gp_pl_overlap_max), stage 0, after
   * its update, runs the next step's first forwards (at most ahead_max, its list's leading
   * forwards) while the later stages finish this one. nx: that step's batch as the caller
   * announced it (on: it did); ahead: how many ran (that step's command skips them);
   * tail_done: stages other than 0 done with this command's actions (stage 0 stops then) */
  int ahead_max, ahead;
  struct {
    int on;
    gp_batch in;
    int64_t batch, step, targets;
    int64_t off[GP_MAX_MICRO_BATCHES + 1];
  } nx;
  _Atomic int tail_done;
  /* tied parameters: their copies and gradient sums */
  gp_tied tied;
  /* what the stages combine: tied gradients, the clipping norm, the step's results */
  gp_coll coll;
  pl_results results; /* the last command's */
  /* the first failure */
  int failed;
  gp_status fail_status;
  char fail_msg[MSG_MAX];
  /* how long the main thread waits for the stages to stop after a failure */
  double stop_s;
  /* a stage did not stop after a failure (stuck inside a library call): its thread and what
   * it uses cannot be joined or freed, and the pipeline takes no more commands */
  int wedged;
};

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The compute time of an action: this thread's CPU time when the stage's BLAS runs on this
 * thread alone (so stages sharing cores are not charged for each other), else wall time. */
static inline double busy_s(const gp_pipeline *pl) {
  if (pl->threads_per_stage > 1) return now_s();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A stage's wall time inside actions since the last reset (gp_stage_stats.wall_busy_s); read
 * by the main thread once the stage has finished its command. */
static inline double gp_pl_stage_busy(const stage *st) {
  double b = 0;
  for (int k = 0; k < GP_A_KINDS; k++)
    b += st->rec.wall_kind_s[k];
  return b;
}

/* pipeline.c */
/* Records the first failure (with where it happened: micro < 0 for none) and wakes everyone.
 * Holds no lock. Returns s. */
gp_status gp_pl_fail(gp_pipeline *pl, gp_status s, int stage_i, int micro);

/* turns.c (interleaved schedules; no-ops with one chunk a device) */
/* Builds dev_sched and the chunk stages' own lists (sched) from it, and the turn maps. */
gp_status gp_pl_chunks_init(gp_pipeline *pl);
void gp_pl_chunks_free(gp_pipeline *pl);
/* Before a training command: every device at its start. */
void gp_pl_turns_reset(gp_pipeline *pl);
/* A training command's start on chunk stage st, once its own preparations are done: the
 * device's first chunk (st->index < K) waits for the others to be ready, which then wait for
 * it to have run the device's forwards and backwards (gp_pl_device_done). Fails on another
 * stage's failure or the watchdog, as wait_for. */
gp_status gp_pl_device_ready(stage *st);
void gp_pl_device_done(stage *st);
/* gp_pl_replay of the devices' lists, each action taking its chunk's time. */
void gp_pl_replay_chunks(gp_pipeline *pl);

/* How many of the next step's forwards stage 0 may run early (pl->ahead_max; 0: steps do not
 * overlap). Once the pipeline is made. */
int gp_pl_overlap_max(const gp_pipeline *pl);

/* At a training step's call (main thread): a batch other than the one announced, when the last
 * step ran its forwards early, is refused; then the next batch (NULL: unknown) is set up for
 * this step's early forwards, where the steps overlap. */
gp_status gp_pl_announce(gp_pipeline *pl, const gp_batch *b, const gp_batch *next, int64_t step);

/* stage.c: runs one command's actions on stage st (its worker thread). */
gp_status gp_pl_run_command(stage *st, cmd_kind cmd);

/* allreduce.c */
/* Before the stage's action a: the start of its last backward opens the buckets (replicas on
 * the CPU; a device's gradients are summed at the step). */
void gp_pl_ar_action(stage *st, int a);
/* A layer of the backward finished: its gradients are final; a full bucket starts, the others
 * in flight move on. */
void gp_pl_ar_layer(stage *st, int node);
/* At the step: the rest started, every bucket waited for (or, without buckets, the whole
 * buffer summed at once). */
gp_status gp_pl_ar_finish(stage *st);
void gp_pl_ar_free(stage *st);
/* On the main thread, after the channels: each GPU stage's NCCL communicator of its replicas
 * (every process, its stages in order) where the pipeline uses NCCL. */
gp_status gp_pl_ar_init(gp_pipeline *pl);

/* stats.c */
/* Counts an action's wall time as busy, less `waited` (the part it spent waiting for other
 * stages: the optimizer step's barriers), and, when tracing, records it. On a device-timed
 * stage the host span goes to the trace only, and the action's time is its device span,
 * which gp_pl_span_begin opened and this closes. */
gp_status gp_pl_record(stage *st, gp_action_kind kind, int micro, double t0, double t1, double busy,
                       double waited);
/* Device-timed stages: the start of the next recorded action; then, around a training
 * command's actions, the reference at its start and, at its end, the wait for the device and
 * the spans' times counted as gp_pl_record counts host times. No-ops on other stages. */
gp_status gp_pl_span_begin(stage *st);
gp_status gp_pl_device_step_start(stage *st);
gp_status gp_pl_device_step_end(stage *st);
/* trace.c */
/* Appends an event (a gap when out of memory beats a failed step). */
void gp_pl_trace_add(stage *st, trace_ev ev);
/* gp_exec's on_layer when tracing. */
void gp_pl_record_layer(const gp_exec *e, int node, int backward, int end);
/* The training step just run, replayed with each action's own time (stats.c; a statistic:
 * where it cannot be had, the replayed bubble is NAN until the next reset). */
void gp_pl_replay(gp_pipeline *pl);

#endif
