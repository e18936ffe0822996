/* Pipeline schedules as data. A pure function builds each stage's ordered action list;
 * a validator proves that every action's inputs are produced before it (no deadlock); a
 * simulator returns the makespan, bubble fraction and peak activation memory per stage for
 * given per-stage costs. Stage workers only interpret the lists. */
#ifndef GP_SCHEDULE_H
#define GP_SCHEDULE_H

#include "core/spec/spec.h"

/* The one list of actions, for schedules, the executor, its statistics and the trace. A
 * schedule's lists hold the first four; the executor also times the parts of a backward. */
typedef enum gp_action_kind {
  GP_A_FORWARD,   /* F: forward of micro-batch `micro` */
  GP_A_BACKWARD,  /* B: backward of `micro` (input and, unless a W follows, weight gradients),
                     preceded by its recompute when `recompute` */
  GP_A_WEIGHT,    /* W: the weight-gradient half of a backward, deferred (zero-bubble
                     schedules) */
  GP_A_STEP,      /* S: the optimizer step, once per mini-batch, last */
  GP_A_RECOMPUTE, /* R: a backward's re-materializing forward (timed apart) */
  GP_A_TRANSFER,  /* T: handing a backward's input gradients to their producers */
  GP_A_KINDS
} gp_action_kind;

/* "F", "B", "W", "S", "R", "T" (trace names and tables); "?" outside the enum. */
const char *gp_action_letter(gp_action_kind k);
/* "forward", "backward", "weight", "step", "recompute", "transfer". */
const char *gp_action_name(gp_action_kind k);

typedef struct gp_action {
  gp_action_kind kind;
  int micro;
  int chunk;     /* the model chunk (a stage's part of an interleaved schedule); 0 */
  int recompute; /* forward: activations are dropped (only the input is kept);
                    backward: re-materialize the forward first */
} gp_action;

typedef struct gp_schedule {
  gp_schedule_kind kind;
  gp_remat remat;
  int stages, micro;
  int *n_actions;      /* per stage */
  gp_action **actions; /* per stage, n_actions[s] entries */
  int *slots;          /* per stage: micro-batches in flight at most (activation slots) */
  /* V: the model chunks each stage holds (interleaved; 0 or 1: one). Chunk c of stage s is
   * virtual stage c K + s: the model runs through the K stages V times, and costs given to the
   * simulator are per virtual stage (K V entries). */
  int chunks;
} gp_schedule;

/* GPipe (fill-drain: all forwards, then backwards in reverse micro-batch order) or 1F1B
 * (PipeDream-flush: at most K - s micro-batches in flight on stage s). remat: always = every
 * micro-batch recomputes; except_last = all but the one each stage backwards first (GPipe: the
 * last micro-batch, 1F1B: the first), and none on a stage that keeps at most one micro-batch
 * in flight (1F1B's last), where it would save no memory; never = none. */
gp_status gp_schedule_build(gp_schedule_kind kind, gp_remat remat, int stages, int micro,
                            gp_schedule *out);
/* remat auto: the list of gp_schedule_build at remat never, in which drop[s] of stage s's
 * slots[s] activation slots drop theirs: micro-batch m recomputes when m % slots[s] < drop[s]
 * (the executor's slot of m is m % slots[s], so a slot either always drops or always keeps;
 * under GPipe the first forwarded, backwarded last). None on a stage with one slot. drop NULL:
 * none anywhere. GP_ERR_USAGE for a count outside 0..slots[s]. */
gp_status gp_schedule_build_drops(gp_schedule_kind kind, int stages, int micro, const int *drop,
                                  gp_schedule *out);
void gp_schedule_free(gp_schedule *s);
/* Interleaved 1F1B (Megatron-LM): each stage holds `chunks` (V >= 2) non-adjacent model
 * chunks, K V virtual stages in all; micro must be a multiple of stages (GP_ERR_USAGE saying
 * which would do). No re-materialization yet. Built, validated and simulated; not yet run by
 * the executor. */
gp_status gp_schedule_build_interleaved(int stages, int micro, int chunks, gp_schedule *out);

/* Dependencies: forward(s, m) needs forward(s-1, m); backward(s, m) needs forward(s, m) and
 * backward(s+1, m) (the last stage: its own forward); step(s) needs all of s's backwards.
 * Every action of every stage must run exactly once. On a deadlock or a malformed list:
 * GP_ERR_RUNTIME naming the stuck stages and what each waits for. */
gp_status gp_schedule_validate(const gp_schedule *s);

typedef struct gp_stage_cost {
  double fwd, bwd;    /* seconds (or any unit) per micro-batch; recompute costs fwd again */
  double send;        /* time to hand one micro-batch's boundary tensors to the next stage */
  double act_bytes;   /* activation bytes of one micro-batch kept for backward */
  double input_bytes; /* bytes of the stage's input of one micro-batch (kept under remat) */
  double step;        /* the optimizer step, once after the stage's last backward */
  /* A split backward (zero-bubble schedules: B, then W): W's share of bwd (B takes the rest),
   * and the bytes W keeps alive beyond the activations until it runs (the output gradients
   * its weight gradients read). Unused by lists without W. */
  double wgt, w_bytes;
} gp_stage_cost;

typedef struct gp_sim_stage {
  double busy;        /* time computing */
  int peak_in_flight; /* micro-batches forwarded and not yet backwarded, at most */
  double peak_bytes;  /* activation bytes held at most */
} gp_sim_stage;

typedef struct gp_sim_result {
  double makespan;
  double bubble;       /* 1 - sum(busy) / (stages * makespan) */
  gp_sim_stage *stage; /* stages entries, owned: free with gp_sim_result_free */
} gp_sim_result;

/* Event simulation: each stage runs its actions in order, each starting when the stage is free
 * and its inputs have arrived (a forward's input arrives send after the previous stage's
 * forward ended; a backward's gradient likewise from the next stage). A re-materializing
 * backward runs its recompute when the stage is free, before its gradient arrives. */
gp_status gp_schedule_simulate(const gp_schedule *s, const gp_stage_cost *cost, gp_sim_result *out);
void gp_sim_result_free(gp_sim_result *r);
/* gp_schedule_simulate of consecutive steps that overlap (the pipeline's, where no update needs
 * another stage's): stage 0 runs up to `ahead` of the next step's first forwards after its
 * update, while a later stage is still busy; makespan and bubble are the steady state's step
 * (its period; busy and memory as gp_schedule_simulate's). ahead 0, one stage or chunks: the
 * same as gp_schedule_simulate. */
/* How many of the next step's forwards stage 0 can run early (its list's leading forwards, in
 * micro-batch order, each in a slot of its own); 0 for one stage or chunks. */
int gp_schedule_early_forwards(const gp_schedule *s);
gp_status gp_schedule_simulate_overlap(const gp_schedule *s, const gp_stage_cost *cost, int ahead,
                                       gp_sim_result *out);

/* One timed action of the simulation (the optimizer step has no event). A backward with
 * recompute re-runs the forward first, in [rstart, rend), then waits for its gradient if it
 * has not arrived yet: the backward itself is [start, end). Otherwise rstart = rend = start.
 * (A forward's `recompute` says its activations are dropped, to be recomputed later.) */
typedef struct gp_sim_event {
  gp_action_kind kind; /* GP_A_FORWARD, GP_A_BACKWARD or GP_A_WEIGHT */
  int micro, chunk;
  int recompute;
  double rstart, rend; /* the recompute, empty without one */
  double start, end;   /* the action itself */
} gp_sim_event;

typedef struct gp_sim_events {
  int stages;
  int *n;               /* per stage */
  gp_sim_event **event; /* per stage, n[s] entries in time order */
} gp_sim_events;

/* gp_schedule_simulate that also returns every stage's timed actions, for timelines. */
gp_status gp_schedule_simulate_events(const gp_schedule *s, const gp_stage_cost *cost,
                                      gp_sim_result *out, gp_sim_events *events);

/* Stages that share devices: stage s runs on device device[s] of `devices`, which runs at most
 * slots[d] actions at once (its cores, where each stage takes one: the stages of a process
 * with fewer cores than stages take turns on them). The simulation then runs the actions in
 * time order, each at the earliest its inputs, its stage and a free slot of its device allow;
 * a re-materializing backward holds its slot from its recompute on. Costs are each action's
 * time alone on a slot. With a device each and enough slots, the same as
 * gp_schedule_simulate_events. */
typedef struct gp_sim_share {
  const int *device; /* per stage */
  const int *slots;  /* per device, >= 1 */
  int devices;
} gp_sim_share;
gp_status gp_schedule_simulate_shared(const gp_schedule *s, const gp_stage_cost *cost,
                                      const gp_sim_share *share, gp_sim_result *out,
                                      gp_sim_events *events);
void gp_sim_events_free(gp_sim_events *e);

/* Replays a run of schedule s: each action takes its own time, dur[k][a] for stage k's a-th
 * action (a backward's without its recompute, which takes rdur[k][a]; rdur is read only
 * there), and hand-offs take none. *makespan: when the last stage is done; *busy: the sum of
 * all the times. A step measured on real stages takes at least that makespan, since it ran the
 * same actions in the same order under the same dependencies; what it took beyond is the
 * hand-offs and whatever ran outside the timed actions. */
gp_status gp_schedule_replay(const gp_schedule *s, const double *const *dur,
                             const double *const *rdur, double *makespan, double *busy);

#endif
