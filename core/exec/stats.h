/* Measurement of a pipeline, out of its hot path: each stage's statistics (times by kind of
 * action, memory, traffic), the bubble three ways (measured, simulated from the stages' mean
 * times, replayed from each action's own time) and the Chrome trace. */
#ifndef GP_STATS_H
#define GP_STATS_H

#include "core/schedule/schedule.h"

typedef struct gp_pipeline gp_pipeline;

typedef struct gp_stage_stats {
  size_t mem_peak;       /* measured: the stage's backend memory high-water mark (parameters,
                            optimizer state, activations, scratch); see gp_backend.mem_peak */
  size_t peak_act_bytes; /* measured: arena bytes (activations, saved state, boundary
                            gradients) held at most since the last reset */
  int64_t sent_bytes;    /* activations and gradients handed to other stages */
  int first_unit, end_unit;
  /* Times: on a CPU stage the host's; on a GPU stage (whose host only launches the work) the
   * device's, each action from its start to its end on the stage's compute stream (timers),
   * read when the step has passed, which the stage then waits for */
  double fwd_s, bwd_s;       /* measured time in forwards, and in backwards (recompute
                                included), since the last reset; waiting is not counted (thread
                                CPU time when the stage's BLAS is single-threaded, else wall) */
  int64_t steps;             /* training steps since the last reset */
  double wall_busy_s;        /* wall time inside actions (forward, backward, recompute, transfer,
                                step, less the step's waits for the other stages) since the
                                last reset */
  double span_s;             /* wall time of the whole training steps since the last reset: the
                                measured bubble of a stage is 1 - wall_busy_s / span_s */
  double wall_s[GP_A_KINDS]; /* wall_busy_s by kind of action (gp_action_kind) */
  int device_time;           /* 1: the times above are the device's (a GPU stage), 0: host */
  /* replicas: the gradients' all-reduce across them since the last reset, over allreduce_steps
   * steps: its wall time (from its first bucket's start to its end), the part the step waited
   * for (the rest ran under the backward), and the bytes summed */
  double allreduce_s, allreduce_wait_s;
  int64_t allreduce_bytes, allreduce_steps;
  int64_t early; /* stage 0: forwards of a next step run while the last one ended (overlap) */
} gp_stage_stats;

/* A stage's compute per training step in ms, and its measured bubble: the share of the steps'
 * wall time it spent outside actions (0 when nothing was timed). */
static inline double gp_stage_busy_ms(const gp_stage_stats *s) {
  return 1e3 * (s->fwd_s + s->bwd_s) / (double)(s->steps > 0 ? s->steps : 1);
}
static inline double gp_stage_idle(const gp_stage_stats *s) {
  double idle = s->span_s > 0 ? 1.0 - s->wall_busy_s / s->span_s : 0;
  return idle < 0 ? 0 : idle;
}

/* Device d's measured bubble where its stages are chunks of an interleaved schedule (stage
 * c K + d is its chunk c, K = k / chunks): the share of the steps' wall time its chunks, which
 * take turns on it, together spent outside actions. With one chunk a device, gp_stage_idle. */
static inline double gp_device_idle(const gp_stage_stats *all, int k, int chunks, int d) {
  const int K = k / (chunks > 1 ? chunks : 1);
  double busy = 0, span = all[d].span_s;
  for (int s = d; s < k; s += K)
    busy += all[s].wall_busy_s;
  double idle = span > 0 ? 1.0 - busy / span : 0;
  return idle < 0 ? 0 : idle;
}

void gp_pipeline_stats(const gp_pipeline *pl, int stage, gp_stage_stats *out);
void gp_pipeline_reset_stats(gp_pipeline *pl);
/* The idle share schedule sc alone gives stages that take the times in ss[0 .. stages):
 * each stage's mean forward, backward (with the hand-off of its gradient) and optimizer step
 * per micro-batch and step (wall_s over steps), a recompute costing its forward, simulated as in
 * gp_schedule_simulate (each stage steps after its own last backward; with clipping or tied
 * weights the stages meet first, which it leaves out: a few steps' worth). Against (K-1)/(M+K-1) it
 * adds what unequal stages cost; the measured idle adds to it what the rest costs: hand-off
 * latency, micro-batches of uneven speed, work of the step outside any action. NAN when a stage
 * timed no training step. */
gp_status gp_bubble_sim(const gp_schedule *sc, const gp_stage_stats *ss, double *out);
/* (Where stage 0 ran forwards early, ss[0].early > 0, the steps overlapped: then the overlapped
 * steady state, gp_schedule_simulate_overlap.) */
/* How many of the next step's forwards stage 0 may run early when told the next batch
 * (gp_pipeline_train_step_ahead); 0: the steps never overlap (a barrier: clipping, tied
 * weights, replicas, several processes, GPU stages, GP_STEP_OVERLAP=0). */
int gp_pipeline_overlap(const gp_pipeline *pl);
/* gp_bubble_sim of the pipeline's schedule and stages, since the last reset. */
gp_status gp_pipeline_bubble_sim(const gp_pipeline *pl, double *out);
/* The idle share of the training steps since the last reset, each replayed with every action
 * taking the wall time it took and hand-offs none (gp_schedule_replay): at most the measured
 * idle, since the steps ran the same actions under the same dependencies. Against
 * gp_bubble_sim it adds what the actions' spread costs (a micro-batch slower than the stage's
 * mean, a thread descheduled mid-action), less what a recompute cheaper than the stage's mean
 * forward saves (the simulation charges it the forward); the measured idle adds to it what the
 * pipeline's own work costs: hand-off latency and what runs outside the timed actions (gathering
 * inputs, summing gradients, the stages meeting for clipping or tied weights). NAN before a
 * step, and where a step since the reset could not be replayed (out of memory: a statistic
 * does not fail the step). */
double gp_pipeline_bubble_replayed(const gp_pipeline *pl);
/* The idle share of the stage that set each training step's pace (the one busiest in it) since
 * the last reset: 1 - sum of those busy times / the steps' wall time. At most every stage's
 * idle (gp_stage_idle); with stages of equal speed it is the measured bubble, and (K-1)/(M+K-1)
 * when the pipeline adds nothing to GPipe's own. Where the stages' speed differs (cores that
 * run at different speeds, an uneven split) the faster ones wait for the slowest beyond
 * that: the measured bubble's excess over this one. NAN before a step. */
double gp_pipeline_bubble_bottleneck(const gp_pipeline *pl);
/* Chrome trace JSON (chrome://tracing, Perfetto): one row per stage, one slice per action
 * ("F3", "B3", "R3" for a recompute, "T3" handing a gradient back, "step") in wall time, with
 * args.compute_us the action's compute time (the thread's CPU time when its BLAS is
 * single-threaded: with more stages than cores, wall slices include time-slicing), recorded since
 * the pipeline was made with opts.trace. */
gp_status gp_pipeline_write_trace(const gp_pipeline *pl, const char *path);

#endif
