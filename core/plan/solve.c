/* The exact partitioner: dynamic programs over (stage, cut) that find the split of N units into
 * K contiguous stages with the smallest slowest stage under per-device memory limits, then,
 * among those, the one with the smallest spread; and the evaluation of a split (stage times,
 * memory, simulated bubble and speed-ups). */
#include "core/plan/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/env.h"
#include "core/schedule/schedule.h"

/* Splits whose slowest stage is within this of the optimum count as optimal (summation order
 * alone can move a sum by a few ulps). */
#define TIE_REL 1e-12

typedef struct ctx {
  const gp_unit_costs *c;
  const gp_partition_req *r;
  int n;
} ctx;

static double speed_of(const gp_partition_req *r, int s) {
  return r->speed ? r->speed[s] : 1.0;
}

static double limit_of(const gp_partition_req *r, int s) {
  return r->mem_limit ? r->mem_limit[s] : 0.0;
}

int gp_partition_in_flight(const gp_partition_req *r, int K, int s) {
  if (r->schedule == GP_SCHED_1F1B || r->schedule == GP_SCHED_INTERLEAVED)
    return r->micro < K - s ? r->micro : K - s;
  /* the zero-bubble lists hold a micro-batch from its forward to its W, at most K (ZB-H1) or
   * 2K - 1 (ZB-H2) on any stage (core/schedule/zerobubble.c's caps) */
  int zb = r->schedule == GP_SCHED_ZB_H1 ? K : r->schedule == GP_SCHED_ZB_H2 ? 2 * K - 1 : 0;
  if (zb) return r->micro < zb ? r->micro : zb;
  return r->micro;
}

/* Whether the schedule defers W: each micro-batch in flight then also holds the gradients its
 * B made (the output gradients W reads), until its W. */
static int defers_w(const gp_partition_req *r) {
  return r->schedule == GP_SCHED_ZB_H1 || r->schedule == GP_SCHED_ZB_H2;
}

static double in_flight(const gp_partition_req *r, int K, int s) {
  return gp_partition_in_flight(r, K, s);
}

/* Sums over the units of a stage. Every caller accumulates them from the last unit down to the
 * first, so the DP and the evaluation of the split it returns get bit-identical times. */
typedef struct sums {
  double f, b;  /* balancing weight, forward and backward */
  double w;     /* the backward's weight half (W) where a schedule splits it */
  double p;     /* trainable parameters */
  double act;   /* activation bytes kept for backward */
  double grad;  /* input gradients one micro-batch's backward allocates */
  double wkeep; /* what B leaves for W (gp_unit_costs.wkeep_bytes) */
  double big;   /* the working set: the largest unit's measured scratch, else its activations */
  double cheap; /* of act: what the cheap layers keep (selective re-materialization) */
  double cf;    /* their forward's share of f */
} sums;

/* W's share of a unit's backward, where a schedule splits it: half where the unit has parameters
 * (the input and weight gradients are each a product the size of the forward's), none without
 * (no W). The costs are not measured apart. */
static double unit_wgt(const gp_unit_costs *c, int u) {
  return c->params[u] > 0 ? 0.5 * c->bwd[u] : 0.0;
}

static void sums_add(sums *z, const gp_unit_costs *c, int u) {
  z->f += c->fwd[u];
  z->b += c->bwd[u];
  z->w += unit_wgt(c, u);
  z->p += (double)c->params[u];
  z->act += (double)c->act_bytes[u];
  if (c->grad_bytes) z->grad += (double)c->grad_bytes[u];
  if (c->wkeep_bytes) z->wkeep += (double)c->wkeep_bytes[u];
  if (c->cheap_bytes) z->cheap += (double)c->cheap_bytes[u];
  if (c->cheap_share) z->cf += c->fwd[u] * c->cheap_share[u];
  double w = c->scratch ? (double)c->scratch[u] : (double)c->act_bytes[u];
  if (w > z->big) z->big = w;
}

int gp_partition_remats(const gp_partition_req *r, int K, int s) {
  if (r->remat == GP_REMAT_NEVER || r->remat == GP_REMAT_AUTO) return 0;
  return r->remat == GP_REMAT_ALWAYS || in_flight(r, K, s) > 1;
}

int gp_partition_dropped_micro(int micro, int slots, int drop) {
  if (slots < 1 || drop < 1) return 0;
  if (drop > slots) drop = slots;
  return micro / slots * drop + (micro % slots < drop ? micro % slots : drop);
}

/* Remat auto's choice for a stage of P slots, as one number L = d (P + 1) + sel: d slots
 * drop all their activations (whole: keeping the stage input) and sel others drop their cheap
 * layers' (selective: they recompute those alone, from what the slot keeps). 0: none. */
static int level_drop(int P, int L) {
  return L / (P + 1);
}
static int level_sel(int P, int L) {
  return L % (P + 1);
}

/* The activation slots (of the in_flight ones) of stage s that drop their activations: the
 * fixed modes' (except_last counted as all but one), or remat auto's choice at level `d`. */
static int drops_of(const gp_partition_req *r, int K, int s, int d) {
  if (r->remat == GP_REMAT_AUTO) return level_drop(gp_partition_in_flight(r, K, s), d);
  if (!gp_partition_remats(r, K, s)) return 0;
  int P = gp_partition_in_flight(r, K, s);
  return r->remat == GP_REMAT_ALWAYS ? P : P - 1;
}

/* Forward, backward and the re-materializing forward. except_last recomputes all but one of
 * the M micro-batches; it is counted as a full recompute (the difference is 1/M of it). Under
 * auto, the share of the M micro-batches that the d dropping slots hold recomputes. */
static double compute_time(const ctx *x, const sums *z, int K, int s, int d) {
  double rf = gp_partition_remats(x->r, K, s) ? 1.0 : 0.0, rs = 0.0;
  if (x->r->remat == GP_REMAT_AUTO && d > 0) {
    int P = (int)in_flight(x->r, K, s), whole = level_drop(P, d), sel = level_sel(P, d);
    int M = x->r->micro;
    rf = gp_partition_dropped_micro(M, P, whole) / (double)M;
    rs = (gp_partition_dropped_micro(M, P, whole + sel) - gp_partition_dropped_micro(M, P, whole)) /
         (double)M;
  }
  double comp = z->f + z->b + rf * z->f + rs * z->cf;
  return comp / speed_of(x->r, s);
}

/* Per micro-batch: compute, plus receiving the stage's inputs and sending its outputs. */
static double stage_time(const ctx *x, const sums *z, int K, int s, int a, int b, int d) {
  double t = compute_time(x, z, K, s, d);
  if (x->r->bytes_per_s > 0) {
    double bytes = (double)((a > 0 ? x->c->cut_bytes[a] : 0) + (b < x->n ? x->c->cut_bytes[b] : 0));
    t += bytes / x->r->bytes_per_s;
  }
  return t;
}

/* The activations and the input gradients of one backward (freed after it) a stage holds at
 * once: without re-materialization, every micro-batch in flight's activations; with it, the
 * set re-materialized for a backward, and under except_last (M >= 2) also the kept micro-batch's:
 * its activation slot keeps their size for good, as arenas keep their peak (measured:
 * resnet20-cifar K = 3, M = 4, stage 0 of 6 units, 31.7 MiB against 23.2 with `always`, under
 * GPipe and 1F1B alike). Under auto, d of the P slots drop: the P - d others keep theirs, and
 * the set re-materialized for a backward is one more (so d = 1 saves nothing). A list that
 * defers W holds each micro-batch's activations and what B leaves for W until its W, beside one
 * B's gradients at a time (its scratch). */
static double act_and_grad(const gp_partition_req *r, int K, int s, const sums *z, int d) {
  if (defers_w(r)) return in_flight(r, K, s) * (z->act + z->wkeep) + z->grad;
  if (r->remat == GP_REMAT_AUTO) {
    /* selective slots keep all but the cheap layers' activations; the scratch re-materializes
     * one micro-batch's (all of them where a slot drops all) */
    int P = (int)in_flight(r, K, s), whole = level_drop(P, d), sel = level_sel(P, d);
    double redo = whole > 0 ? z->act : sel > 0 ? z->cheap : 0.0;
    return (P - whole - sel) * z->act + sel * (z->act - z->cheap) + redo + z->grad;
  }
  if (!gp_partition_remats(r, K, s)) return in_flight(r, K, s) * z->act + z->grad;
  return (r->remat == GP_REMAT_EXCEPT_LAST && r->micro > 1 ? 2 : 1) * z->act + z->grad;
}

/* The part of the memory estimate that can only grow as a stage takes more units: f32
 * weights, gradients and optimizer state, the activations and backward gradients
 * (act_and_grad), and a working set for the scratch space (im2col and the like) a layer needs
 * beyond what it keeps: the largest its units took when timed (--by time), else a rough
 * allowance of the largest single unit's activations. Under auto: with every slot that can
 * drop dropping, the least it can be. */
static double mem_floor(const ctx *x, const sums *z, int K, int s) {
  double w = 4.0 * z->p * (2.0 + x->r->optim_slots);
  int P = (int)in_flight(x->r, K, s);
  return w + act_and_grad(x->r, K, s, z, P > 1 ? P * (P + 1) : 0) + z->big;
}

/* Stage [a, b) with d dropping slots (drops_of): each micro-batch in flight holds a buffer for
 * the gradients of the stage's outputs and, with re-materialization, its stage input and a
 * copy of its outputs (the rest of its activations are dropped). Where the scratch was
 * measured, the estimate is that close that each slot's arena chunk for small tensors counts
 * too, its unused tail included (fashion-cnn's 6 MiB second stage: 1 MiB of it at M = 4); the
 * rough allowance of the other bases covers it already. */
static double stage_mem(const ctx *x, const sums *z, int K, int s, int a, int b, int d) {
  double w = 4.0 * z->p * (2.0 + x->r->optim_slots);
  double m = w + act_and_grad(x->r, K, s, z, d) + z->big, fl = in_flight(x->r, K, s);
  if (x->c->scratch) m += fl * (double)GP_ARENA_SMALL_CHUNK;
  double out = b < x->n ? (double)x->c->cut_bytes[b] : 0.0;
  /* a list that defers W: the gradient of the stage's input, handed on at B, stays in the
   * slot until W frees it */
  if (defers_w(x->r) && a > 0) m += fl * (double)x->c->cut_bytes[a];
  if (x->r->remat == GP_REMAT_AUTO) { /* a selective slot's outputs may be cheap: a copy */
    int P = (int)fl;
    m += level_drop(P, d) * ((double)x->c->cut_bytes[a] + out) + level_sel(P, d) * out;
  } else if (gp_partition_remats(x->r, K, s))
    m += fl * ((double)x->c->cut_bytes[a] + out);
  return m + fl * out;
}

/* Remat auto's choice for stage [a, b) under limit lim, as a level (level_drop): the first
 * whose estimate fits, so the fewest slots drop their cheap layers' activations first and
 * whole slots drop only when every slot dropping those is not enough (none without a limit,
 * and none where one micro-batch at most is in flight: dropping the only one saves nothing;
 * no selective level where the stage has no cheap layers or W is deferred: W would read what
 * was recomputed, so the slot holds it anyway); where none fits, or when `least`, the level of
 * the smallest estimate. 0 for the fixed modes (drops_of gives theirs). */
static int choose_drops(const ctx *x, const sums *z, int K, int s, int a, int b, double lim,
                        int least) {
  int P = (int)in_flight(x->r, K, s);
  if (x->r->remat != GP_REMAT_AUTO || P <= 1 || (!least && lim <= 0)) return 0;
  int best = 0, sel = z->cheap > 0 && !defers_w(x->r) && gp_env_get(GP_ENV_REMAT_SELECTIVE, 1);
  double best_mem = stage_mem(x, z, K, s, a, b, 0);
  if (!least && best_mem <= lim) return 0;
  /* selective slots 1..P, then whole ones 2..P (one saves nothing), the rest selective */
  for (int i = sel ? 1 : P + 2; i <= 2 * P; i++) {
    int L = i <= P ? i : (i - P) * (P + 1) + (sel ? 2 * P - i : 0);
    double m = stage_mem(x, z, K, s, a, b, L);
    if (!least && m <= lim) return L;
    if (m < best_mem) best = L, best_mem = m;
  }
  return best;
}

int gp_partition_choose_drops(const gp_unit_costs *c, const gp_partition_req *r, int s, int a,
                              int b) {
  ctx x = {.c = c, .r = r, .n = c->n};
  sums z = {0};
  for (int u = b - 1; u >= a; u--)
    sums_add(&z, c, u);
  return drops_of(r, r->stages, s, choose_drops(&x, &z, r->stages, s, a, b, limit_of(r, s), 0));
}

typedef enum dp_mode {
  DP_MIN_MAX_TIME, /* the smallest slowest stage, under the memory limits */
  DP_MAX_MIN_TIME, /* the largest fastest stage, every stage <= thr, under the memory limits */
  DP_MIN_MAX_MEM,  /* the smallest largest stage memory, every stage <= thr (0: no limit) */
} dp_mode;

/* One DP over (stage s, end of stage b): best[b] is the objective over stages 0..s with stage s
 * ending at b; stage s = [a, b) is found by growing it from b downwards, so the sums update in
 * O(1) and the parts that only grow (compute time, memory floor) end the scan early. Returns 1
 * and the starts in first[] when a split exists. O(K N^2) at worst. */
static int dp(const ctx *x, int K, dp_mode mode, double thr, int *first, double *value) {
  int n = x->n;
  size_t w = (size_t)n + 1;
  double *prev = malloc(sizeof(double) * w), *cur = malloc(sizeof(double) * w);
  int *choice = malloc(sizeof(int) * w * (size_t)K);
  int found = -1; /* -1: out of memory */
  if (!prev || !cur || !choice) goto done;
  int maximize = mode == DP_MAX_MIN_TIME;
  double none = maximize ? -INFINITY : INFINITY;
  for (size_t b = 0; b < w; b++)
    prev[b] = none;
  for (int s = 0; s < K; s++) {
    for (size_t b = 0; b < w; b++)
      cur[b] = none;
    double lim = mode == DP_MIN_MAX_MEM ? thr : limit_of(x->r, s);
    /* the last stage ends at n: only that end is used */
    for (int b = s == K - 1 ? n : s + 1; b <= n - (K - 1 - s); b++) {
      sums z = {0};
      double best = none;
      int arg = -1;
      for (int a = b - 1; a >= s; a--) {
        sums_add(&z, x->c, a);
        /* the memory DP may try more stages than the request has speeds for */
        double floor_mem = mem_floor(x, &z, K, s);
        if (lim > 0 && floor_mem > lim) break;
        /* remat auto's drops grow with the stage, so its compute time only grows too */
        int d = choose_drops(x, &z, K, s, a, b, lim, mode == DP_MIN_MAX_MEM);
        double comp = mode == DP_MIN_MAX_MEM ? 0.0 : compute_time(x, &z, K, s, d);
        if (mode == DP_MIN_MAX_TIME && comp >= best) break;
        if (mode == DP_MAX_MIN_TIME && comp > thr) break;
        if (mode == DP_MIN_MAX_MEM && floor_mem >= best) break;
        if (s == 0 ? a != 0 : prev[a] == none) continue;
        double mem = stage_mem(x, &z, K, s, a, b, d);
        if (lim > 0 && mem > lim) continue;
        double v = mode == DP_MIN_MAX_MEM ? mem : stage_time(x, &z, K, s, a, b, d);
        if (mode == DP_MAX_MIN_TIME && v > thr) continue;
        double p = s == 0 ? (maximize ? INFINITY : -INFINITY) : prev[a];
        double obj = maximize ? fmin(p, v) : fmax(p, v);
        if (maximize ? obj > best : obj < best) best = obj, arg = a;
      }
      cur[b] = best;
      choice[(size_t)s * w + (size_t)b] = arg;
    }
    double *t = prev;
    prev = cur;
    cur = t;
  }
  found = prev[n] != none;
  if (found) {
    *value = prev[n];
    first[K] = n;
    for (int s = K - 1; s >= 0; s--)
      first[s] = choice[(size_t)s * w + (size_t)first[s + 1]];
  }
done:
  free(prev);
  free(cur);
  free(choice);
  return found;
}

/* ---- checking requests --------------------------------------------------------------- */

static gp_status check_costs(const gp_unit_costs *c) {
  if (!c || c->n < 1 || !c->fwd || !c->bwd || !c->params || !c->act_bytes || !c->cut_bytes)
    return GP_ERR(GP_ERR_USAGE, "partition: no unit costs given");
  for (int u = 0; u < c->n; u++) {
    if (!isfinite(c->fwd[u]) || !isfinite(c->bwd[u]) || c->fwd[u] < 0 || c->bwd[u] < 0 ||
        c->params[u] < 0 || c->act_bytes[u] < 0)
      return GP_ERR(GP_ERR_USAGE, "partition: unit %d has a negative or non-finite cost", u);
  }
  for (int u = 0; u <= c->n; u++)
    if (c->cut_bytes[u] < 0) return GP_ERR(GP_ERR_USAGE, "partition: cut %d has negative bytes", u);
  return GP_OK;
}

static gp_status check_req(const gp_unit_costs *c, const gp_partition_req *r) {
  GP_TRY(check_costs(c));
  if (!r) return GP_ERR(GP_ERR_USAGE, "partition: no request given");
  int top = c->n < GP_MAX_DEVICES ? c->n : GP_MAX_DEVICES;
  if (r->stages < 1 || r->stages > top)
    return GP_ERR(GP_ERR_USAGE, "cannot cut %d unit%s into %d stage%s (1..%d)", c->n,
                  c->n == 1 ? "" : "s", r->stages, r->stages == 1 ? "" : "s", top);
  if (r->micro < 1)
    return GP_ERR(GP_ERR_USAGE, "micro-batches must be at least 1, got %d", r->micro);
  const int v = r->chunks > 1 ? r->chunks : 1;
  if (r->schedule == GP_SCHED_INTERLEAVED) {
    if (v < 2 || r->stages % v || r->micro % (r->stages / v) || r->remat != GP_REMAT_NEVER)
      return GP_ERR(GP_ERR_USAGE,
                    "partition: interleaved needs 2 or more chunks a stage, M a multiple of the "
                    "stages and no re-materialization (%d chunks, %d a stage, M = %d)",
                    r->stages, v, r->micro);
  } else if (v > 1 ||
             (r->schedule != GP_SCHED_GPIPE && r->schedule != GP_SCHED_1F1B && !defers_w(r))) {
    return GP_ERR(GP_ERR_USAGE, "partition: unknown schedule %d (%d chunks a stage)",
                  (int)r->schedule, v);
  }
  if (defers_w(r) && r->remat != GP_REMAT_NEVER)
    return GP_ERR(GP_ERR_USAGE, "partition: the zero-bubble schedules re-materialize nothing");
  if (r->remat != GP_REMAT_ALWAYS && r->remat != GP_REMAT_EXCEPT_LAST &&
      r->remat != GP_REMAT_NEVER && r->remat != GP_REMAT_AUTO)
    return GP_ERR(GP_ERR_USAGE, "partition: unknown re-materialization mode %d", (int)r->remat);
  if (!isfinite(r->bytes_per_s) || r->bytes_per_s < 0)
    return GP_ERR(GP_ERR_USAGE, "partition: the transfer bandwidth must be >= 0, got %g",
                  r->bytes_per_s);
  if (r->procs < 0 || !isfinite(r->link_latency_s) || r->link_latency_s < 0 ||
      !isfinite(r->link_bytes_per_s) || r->link_bytes_per_s < 0 || !isfinite(r->seconds_per_cost) ||
      r->seconds_per_cost < 0)
    return GP_ERR(GP_ERR_USAGE,
                  "partition: the link between processes needs latency, bandwidth and seconds "
                  "per cost >= 0 (%d processes, %g s, %g bytes/s, %g s a unit)",
                  r->procs, r->link_latency_s, r->link_bytes_per_s, r->seconds_per_cost);
  for (int d = 0; r->proc_of && d < r->stages / (v > 1 ? v : 1); d++)
    if (r->proc_of[d] < 0 || (d > 0 && r->proc_of[d] < r->proc_of[d - 1]))
      return GP_ERR(GP_ERR_USAGE, "partition: device %d's process %d is out of order", d,
                    r->proc_of[d]);
  if (!isfinite(r->optim_slots) || r->optim_slots < 0)
    return GP_ERR(GP_ERR_USAGE, "partition: optimizer slots must be >= 0, got %g", r->optim_slots);
  for (int s = 0; s < r->stages; s++) {
    double sp = speed_of(r, s), lim = limit_of(r, s);
    if (!isfinite(sp) || sp <= 0)
      return GP_ERR(GP_ERR_USAGE, "partition: stage %d's speed must be > 0, got %g", s, sp);
    if (!isfinite(lim) || lim < 0)
      return GP_ERR(GP_ERR_USAGE, "partition: stage %d's memory limit must be >= 0, got %g", s,
                    lim);
  }
  /* an overflowing stage time (a tiny speed, a huge measured cost) makes every split look
   * alike and no split "fit": say so rather than blame a memory limit */
  double total = 0, slowest = INFINITY;
  for (int u = 0; u < c->n; u++)
    total += 2 * c->fwd[u] + c->bwd[u];
  for (int s = 0; s < r->stages; s++)
    slowest = fmin(slowest, speed_of(r, s));
  if (!isfinite(total / slowest))
    return GP_ERR(GP_ERR_USAGE,
                  "partition: the stage times overflow (costs totalling %g at a speed of %g)",
                  total, slowest);
  return GP_OK;
}

static gp_status check_first(const gp_unit_costs *c, int K, const int *first) {
  if (!first) return GP_ERR(GP_ERR_USAGE, "partition: no split given");
  if (first[0] != 0 || first[K] != c->n)
    return GP_ERR(GP_ERR_USAGE, "partition: a split must start at unit 0 and end at unit %d", c->n);
  for (int s = 0; s < K; s++)
    if (first[s + 1] <= first[s])
      return GP_ERR(GP_ERR_USAGE, "partition: stage %d of the split has no units", s);
  return GP_OK;
}

/* ---- evaluating a split -------------------------------------------------------------- */

/* K stages (interleaved: chunks, V a device; costs per chunk); drop: remat auto's per stage. */
static gp_status makespan(gp_schedule_kind kind, gp_remat remat, int K, int M, int V,
                          const int *drop, const gp_stage_cost *cost, double *out, double *bubble) {
  gp_schedule sc;
  gp_sim_result res;
  if (kind == GP_SCHED_INTERLEAVED)
    GP_TRY(gp_schedule_build_interleaved(K / V, M, V, &sc));
  else if (remat == GP_REMAT_AUTO)
    GP_TRY(gp_schedule_build_drops(kind, K, M, drop, &sc));
  else
    GP_TRY(gp_schedule_build(kind, remat, K, M, &sc));
  gp_status s = gp_schedule_simulate(&sc, cost, &res);
  gp_schedule_free(&sc);
  GP_TRY(s);
  *out = res.makespan;
  if (bubble) *bubble = res.bubble;
  gp_sim_result_free(&res);
  return GP_OK;
}

/* ---- hand-offs between processes ----------------------------------------------------- */

static int proc_of_device(const gp_partition_req *r, int devs, int d) {
  if (r->proc_of) return r->proc_of[d];
  const int P = r->procs < devs ? r->procs : devs, q = devs / P, big = devs % P;
  return d < big * (q + 1) ? d / (q + 1) : big + (d - big * (q + 1)) / q;
}

int gp_partition_crosses(const gp_partition_req *r, int s) {
  const int K = r->stages, devs = r->chunks > 1 ? K / r->chunks : K;
  if (r->procs < 2 || s < 0 || s + 1 >= K || devs < 1) return 0;
  return proc_of_device(r, devs, s % devs) != proc_of_device(r, devs, (s + 1) % devs);
}

int gp_partition_charges_handoffs(const gp_partition_req *r) {
  return r->procs > 1 && r->link_bytes_per_s > 0 && r->seconds_per_cost > 0;
}

/* What handing n micro-batches of `bytes` across the boundary after stage s costs (in the
 * costs' unit): the in-process transfer (bytes_per_s), and where the boundary joins two
 * processes one message on their link. The one place hand-offs are charged, every schedule's
 * simulation alike: interleaved's K V - 1 chunk boundaries (each to another device) against
 * the plain schedules' K - 1. */
static double send_cost(const gp_partition_req *r, int s, double bytes, int n) {
  double t = r->bytes_per_s > 0 ? n * bytes / r->bytes_per_s : 0.0;
  if (gp_partition_charges_handoffs(r) && gp_partition_crosses(r, s))
    t += (r->link_latency_s + n * bytes / r->link_bytes_per_s) / r->seconds_per_cost;
  return t;
}

/* The predictions: the schedule simulated with this split's stage costs (the recompute is the
 * simulator's: fwd more before each re-materializing backward, run while the stage waits for
 * the gradient), against the same split with the whole mini-batch as one micro-batch, and
 * against the whole model on one device. */
static gp_status predict(const ctx *x, const int *first, gp_partition *out) {
  const gp_partition_req *r = x->r;
  const gp_unit_costs *c = x->c;
  int K = r->stages, M = r->micro;
  gp_stage_cost cost[GP_MAX_DEVICES], naive[GP_MAX_DEVICES], one;
  sums all = {0};
  for (int s = K - 1; s >= 0; s--) {
    sums z = {0};
    for (int u = first[s + 1] - 1; u >= first[s]; u--) {
      sums_add(&z, c, u);
      sums_add(&all, c, u);
    }
    double sp = speed_of(r, s);
    const double cut = s < K - 1 ? (double)c->cut_bytes[first[s + 1]] : 0.0;
    double send = send_cost(r, s, cut, 1);
    /* selective recompute runs before the backward: its share of the micro-batches' */
    int P = (int)in_flight(r, K, s);
    double rs = (gp_partition_dropped_micro(M, P, out->drop[s] + out->sel[s]) -
                 gp_partition_dropped_micro(M, P, out->drop[s])) /
                (double)M;
    cost[s] = (gp_stage_cost){.fwd = z.f / sp,
                              .bwd = (z.b + rs * z.cf) / sp,
                              .send = send,
                              .act_bytes = z.act,
                              .input_bytes = (double)c->cut_bytes[first[s]],
                              .wgt = z.w / sp,
                              .w_bytes = z.wkeep + (s > 0 ? (double)c->cut_bytes[first[s]] : 0)};
    naive[s] = (gp_stage_cost){.fwd = M * cost[s].fwd,
                               .bwd = M * cost[s].bwd,
                               .send = send_cost(r, s, cut, M), /* one message */
                               .act_bytes = M * cost[s].act_bytes,
                               .input_bytes = M * cost[s].input_bytes};
  }
  double sp0 = speed_of(r, 0);
  one = (gp_stage_cost){.fwd = M * all.f / sp0,
                        .bwd = M * all.b / sp0,
                        .wgt = M * all.w / sp0,
                        .act_bytes = M * all.act,
                        .input_bytes = M * (double)c->cut_bytes[0]};
  /* the baselines are gpipe-bench's: the whole mini-batch at once, no re-materialization */
  double mk, mk_naive, mk_one;
  /* (the baselines run one micro-batch through the stages in turn: any schedule's, GPipe's) */
  const gp_schedule_kind base = r->schedule == GP_SCHED_INTERLEAVED ? GP_SCHED_GPIPE : r->schedule;
  GP_TRY(makespan(r->schedule, r->remat, K, M, r->chunks, out->drop, cost, &mk, &out->bubble));
  out->makespan = mk;
  GP_TRY(makespan(base, GP_REMAT_NEVER, K, 1, 1, NULL, naive, &mk_naive, NULL));
  GP_TRY(makespan(base, GP_REMAT_NEVER, 1, 1, 1, NULL, &one, &mk_one, NULL));
  out->speedup_naive = mk > 0 ? mk_naive / mk : 1.0;
  out->speedup_k1 = mk > 0 ? mk_one / mk : 1.0;
  return GP_OK;
}

gp_status gp_partition_evaluate(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                                gp_partition *out) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "partition: no output given");
  memset(out, 0, sizeof *out);
  GP_TRY(check_req(c, r));
  int K = r->stages;
  GP_TRY(check_first(c, K, first));
  ctx x = {.c = c, .r = r, .n = c->n};
  out->stages = K;
  double lo = INFINITY, hi = 0, total = 0;
  for (int s = 0; s < K; s++) {
    int a = first[s], b = first[s + 1];
    sums z = {0};
    for (int u = b - 1; u >= a; u--)
      sums_add(&z, c, u);
    int d = choose_drops(&x, &z, K, s, a, b, limit_of(r, s), 0);
    out->first[s] = a;
    out->drop[s] = drops_of(r, K, s, d);
    out->sel[s] = r->remat == GP_REMAT_AUTO ? level_sel((int)in_flight(r, K, s), d) : 0;
    out->sel_micro[s] =
        gp_partition_dropped_micro(r->micro, (int)in_flight(r, K, s), out->drop[s] + out->sel[s]) -
        gp_partition_dropped_micro(r->micro, (int)in_flight(r, K, s), out->drop[s]);
    out->cheap_bytes[s] = z.cheap;
    out->recomputed[s] =
        !gp_partition_remats(r, K, s)
            ? gp_partition_dropped_micro(r->micro, (int)in_flight(r, K, s), out->drop[s])
        : r->remat == GP_REMAT_ALWAYS ? r->micro
                                      : r->micro - 1;
    out->time[s] = stage_time(&x, &z, K, s, a, b, d);
    out->memory[s] = stage_mem(&x, &z, K, s, a, b, d);
    lo = fmin(lo, out->time[s]);
    hi = fmax(hi, out->time[s]);
    total += out->time[s];
  }
  out->first[K] = c->n;
  out->max_time = hi;
  out->spread = hi - lo;
  out->imbalance = total > 0 ? hi / (total / K) : 1.0;
  gp_status s = predict(&x, first, out);
  if (s != GP_OK) memset(out, 0, sizeof *out);
  return s;
}

/* ---- solving --------------------------------------------------------------------------- */

/* "1.50 GiB": bytes in the largest unit that keeps the number >= 1; rounded up when asked, so
 * that the printed limit, read back, still fits. */
static void fmt_bytes(double v, int up, char *buf, size_t n) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double scale = 1;
  while (i < 4 && v >= scale * 1024)
    scale *= 1024, i++;
  if (i == 0) {
    snprintf(buf, n, "%.0f bytes", up ? ceil(v) : v);
    return;
  }
  double x = v / scale;
  if (up) {
    x = ceil(x * 100) / 100;
    while (x * scale < v)
      x += 0.01;
  }
  snprintf(buf, n, "%.2f %s", x, unit[i]);
}

/* Why no split fits: the limits, what this K would need, and which K would do. */
static gp_status memory_error(const ctx *x) {
  const gp_partition_req *r = x->r;
  int K = r->stages, n = x->n, top = n < GP_MAX_DEVICES ? n : GP_MAX_DEVICES;
  int *first = malloc(sizeof(int) * (GP_MAX_DEVICES + 1));
  if (!first) return GP_ERR(GP_ERR_NOMEM, "partition: out of memory");
  /* the tightest limit stands for every device when another K is tried */
  double tight = INFINITY;
  int uniform = 1;
  for (int s = 0; s < K; s++) {
    double l = limit_of(r, s);
    if (l > 0) tight = fmin(tight, l);
    if (l != limit_of(r, 0)) uniform = 0;
  }
  char lim[256] = "", need[64], tb[64];
  fmt_bytes(tight, 0, tb, sizeof tb);
  if (uniform) {
    snprintf(lim, sizeof lim, "the limit of %s per device", tb);
  } else {
    size_t len = (size_t)snprintf(lim, sizeof lim, "the limits [");
    for (int s = 0; s < K && len < sizeof lim; s++) {
      char one[64];
      if (limit_of(r, s) > 0)
        fmt_bytes(limit_of(r, s), 0, one, sizeof one);
      else
        snprintf(one, sizeof one, "none");
      len += (size_t)snprintf(lim + len, sizeof lim - len, "%s%s", s ? ", " : "", one);
    }
    if (len < sizeof lim) snprintf(lim + len, sizeof lim - len, "]");
  }
  double v = 0;
  int ok = dp(x, K, DP_MIN_MAX_MEM, 0, first, &v);
  fmt_bytes(v, 1, need, sizeof need);
  int fits = 0;
  /* under the limit, so the scans stop where a stage outgrows it: quick when it is tight */
  for (int k = 1; k <= top && ok >= 0 && !fits; k++) {
    double vk = 0;
    ok = dp(x, k, DP_MIN_MAX_MEM, tight, first, &vk);
    if (ok > 0) fits = k;
  }
  free(first);
  if (ok < 0) return GP_ERR(GP_ERR_NOMEM, "partition: out of memory");
  char tail[160];
  if (fits)
    snprintf(tail, sizeof tail, "%d stage%s fit %s per device", fits, fits > 1 ? "s" : "", tb);
  else
    snprintf(tail, sizeof tail, "no number of stages up to %d fits %s per device", top, tb);
  const char *st = K == 1 ? "" : "s";
  return GP_ERR(GP_ERR_USAGE,
                "no split of %d units into %d stage%s fits %s (estimated weights, gradients, "
                "optimizer state and activations); %d stage%s need%s at least %s per device; %s%s",
                n, K, st, lim, K, st, K == 1 ? "s" : "", need, tail,
                r->remat == GP_REMAT_AUTO ? " (re-materializing what it must); or a smaller "
                                            "micro-batch (more --micro-batches or a smaller "
                                            "--batch-size)"
                                          : "");
}

gp_status gp_partition_solve(const gp_unit_costs *c, const gp_partition_req *r, gp_partition *out) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "partition: no output given");
  memset(out, 0, sizeof *out);
  GP_TRY(check_req(c, r));
  ctx x = {.c = c, .r = r, .n = c->n};
  int K = r->stages, first[GP_MAX_DEVICES + 1];
  double opt = 0, low = 0;
  if (K > 1 && c->n > GP_PARTITION_MAX_UNITS)
    return GP_ERR(GP_ERR_USAGE,
                  "%d units are too many to split into %d stages automatically (the search "
                  "grows as the square of the units; at most %d): give each stage's unit count "
                  "(pipeline.balance, gpipe-train --balance), or make the units fewer with "
                  "blocks (a block instance is one unit)",
                  c->n, K, GP_PARTITION_MAX_UNITS);
  if (K == 1) { /* one split: no search (the DP costs N^2 steps); its memory checked as there */
    first[0] = 0;
    first[1] = c->n;
    sums z = {0};
    for (int u = c->n - 1; u >= 0; u--)
      sums_add(&z, c, u);
    double lim = limit_of(r, 0);
    int d = choose_drops(&x, &z, 1, 0, 0, c->n, lim, 0);
    if (lim > 0 && stage_mem(&x, &z, 1, 0, 0, c->n, d) > lim) return memory_error(&x);
    return gp_partition_evaluate(c, r, first, out);
  }
  int ok = dp(&x, K, DP_MIN_MAX_TIME, 0, first, &opt);
  if (ok < 0) return GP_ERR(GP_ERR_NOMEM, "partition: out of memory for %d units", c->n);
  if (!ok) return memory_error(&x);
  /* the optimal split found is itself a candidate, so this pass always succeeds */
  int again = dp(&x, K, DP_MAX_MIN_TIME, opt + TIE_REL * fabs(opt), first, &low);
  if (again < 0) return GP_ERR(GP_ERR_NOMEM, "partition: out of memory for %d units", c->n);
  return gp_partition_evaluate(c, r, first, out);
}
