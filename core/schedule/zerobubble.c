/* Zero-bubble schedules (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): each backward
 * split into B (the input gradients, which the stage before waits for) and W (the weight
 * gradients, which nothing waits for but the step), W deferred into the time a stage would
 * otherwise idle. The lists are played out at unit costs (F = B = W): every stage runs its
 * forwards and B in 1F1B's order (a warm-up of forwards, then one B, one forward in turn) and
 * runs a pending W whenever that next action cannot start: its input has not arrived, or its
 * forward would hold more micro-batches than the cap (a micro-batch is held from its forward
 * to its W, which still reads its activations). ZB-H1 warms up K - s forwards on stage s and
 * holds at most K, 1F1B's fullest stage; ZB-H2 warms up 2(K - s) - 1 and holds 2K - 1, which
 * fills the warm-up too.
 * Why 1F1B's order rather than "any B that is ready first": that greedy rule is optimal at
 * exactly F = B = W but locks neighbouring stages into step, so a B 30% longer than W made
 * ZB-H1's bubble 1.4x 1F1B's at K = 2, M = 8; in 1F1B's order a stage forwards ahead of its
 * neighbour's need and the bubble stays within 0.35-0.65x 1F1B's for B/F and W/F from 0.5 to
 * 2 (tests/schedule/test_schedule_lists.c, zb_robust). */
#include "core/schedule/lists.h"

#include <stdlib.h>
#include <string.h>

typedef struct zb_stage {
  int nf, nb, nw; /* next forward, backward and weight micro-batch (all in order) */
  int n;          /* actions listed */
} zb_stage;

/* The tick at which each F and B ends (-1: not yet run), [s * M + m]. */
typedef struct zb_clock {
  int *fend, *bend;
} zb_clock;

/* Micro-batches a stage holds at most (forward to W). */
static int cap_of(gp_schedule_kind kind, int K, int M) {
  int c = kind == GP_SCHED_ZB_H2 ? 2 * K - 1 : K;
  return c < M ? c : M;
}
/* Forwards stage s runs before its first B. */
static int warmup_of(gp_schedule_kind kind, int K, int s) {
  return kind == GP_SCHED_ZB_H2 ? 2 * (K - s) - 1 : K - s;
}

gp_status gp_zb_fill(gp_schedule_kind kind, int K, int M, gp_action **lists, int *n_actions) {
  zb_stage *st = calloc((size_t)K, sizeof *st);
  zb_clock ck = {malloc(sizeof(int) * (size_t)K * (size_t)M),
                 malloc(sizeof(int) * (size_t)K * (size_t)M)};
  gp_status s = GP_OK;
  if (!st || !ck.fend || !ck.bend) {
    s = GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for %d stages x %d micro-batches", K, M);
    goto done;
  }
  memset(ck.fend, 0xff, sizeof(int) * (size_t)K * (size_t)M);
  memset(ck.bend, 0xff, sizeof(int) * (size_t)K * (size_t)M);
  /* each tick every stage runs at most one action; an action run at tick t is seen by the
   * others from tick t + 1 */
  for (int t = 0, left = 3 * K * M; left > 0; t++) {
    for (int k = 0; k < K; k++) {
      zb_stage *z = &st[k];
      int m = z->nb, f = z->nf;
      int b_ready =
          m < M && ck.fend[k * M + m] >= 0 && ck.fend[k * M + m] <= t &&
          (k == K - 1 || (ck.bend[(k + 1) * M + m] >= 0 && ck.bend[(k + 1) * M + m] <= t));
      int f_ready = f < M && z->nf - z->nw < cap_of(kind, K, M) &&
                    (k == 0 || (ck.fend[(k - 1) * M + f] >= 0 && ck.fend[(k - 1) * M + f] <= t));
      /* 1F1B's order: a forward while fewer than the warm-up are waiting for their B */
      int want_f = f < M && z->nf - z->nb < warmup_of(kind, K, k);
      gp_action *a = &lists[k][z->n];
      if (want_f ? f_ready : b_ready) {
        *a = (gp_action){.kind = want_f ? GP_A_FORWARD : GP_A_BACKWARD, .micro = want_f ? f : m};
        if (want_f) {
          ck.fend[k * M + f] = t + 1;
          z->nf++;
        } else {
          ck.bend[k * M + m] = t + 1;
          z->nb++;
        }
      } else if (z->nw < z->nb) {
        *a = (gp_action){.kind = GP_A_WEIGHT, .micro = z->nw};
        z->nw++;
      } else {
        continue;
      }
      z->n++;
      left--;
    }
    if (t > 8 * K * M + 8) { /* the heuristic always moves; said, not looped on */
      s = GP_ERR(GP_ERR_RUNTIME, "schedule: internal: the zero-bubble heuristic is stuck");
      goto done;
    }
  }
  for (int k = 0; k < K; k++) {
    lists[k][st[k].n++] = (gp_action){.kind = GP_A_STEP};
    n_actions[k] = st[k].n;
  }
done:
  free(st);
  free(ck.fend);
  free(ck.bend);
  return s;
}
