/* remat auto's choice per stage: under a limit between a stage's never and always estimates it
 * drops some but not all of its in-flight micro-batches, and as few as fit; without a limit
 * none; never on 1F1B's last stage (one micro-batch in flight); and the schedule it builds
 * marks exactly those micro-batches, so the simulated memory follows the estimate. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/solve.h"
#include "core/schedule/schedule.h"
#include "tests/support/check.h"

static int failures, passes;

#define N 8
static double fwd[N], bwd[N], ff[N], bf[N];
static int64_t params[N], act[N], out[N], cut[N + 1];
static gp_unit_costs costs;

/* Eight alike units: activations 1 MB a micro-batch each, boundaries of 64 KB. */
static void setup(void) {
  for (int u = 0; u < N; u++) {
    fwd[u] = 1, bwd[u] = 2, params[u] = 1000, act[u] = 1 << 20, out[u] = 1 << 16;
    cut[u] = 1 << 16;
  }
  cut[N] = 0;
  costs = (gp_unit_costs){.n = N,
                          .micro_batch = 4,
                          .by = GP_COST_FLOPS,
                          .fwd = fwd,
                          .bwd = bwd,
                          .fwd_flops = ff,
                          .bwd_flops = bf,
                          .params = params,
                          .act_bytes = act,
                          .out_bytes = out,
                          .cut_bytes = cut};
}

static const int split2[] = {0, 4, N};

static gp_partition eval(gp_schedule_kind kind, gp_remat remat, int M, const double *lim) {
  gp_partition_req r = {
      .stages = 2, .micro = M, .schedule = kind, .remat = remat, .mem_limit = lim};
  gp_partition p;
  if (gp_partition_evaluate(&costs, &r, split2, &p) != GP_OK) gp_t_die("evaluate");
  return p;
}

/* GPipe, K = 2, M = 8: every stage holds 8 micro-batches. */
static void between(void) {
  const int M = 8;
  gp_partition nv = eval(GP_SCHED_GPIPE, GP_REMAT_NEVER, M, NULL);
  gp_partition al = eval(GP_SCHED_GPIPE, GP_REMAT_ALWAYS, M, NULL);
  gp_partition none = eval(GP_SCHED_GPIPE, GP_REMAT_AUTO, M, NULL);
  for (int s = 0; s < 2; s++) {
    CHECK(none.drop[s] == 0 && none.recomputed[s] == 0 && none.memory[s] == nv.memory[s] &&
              none.time[s] == nv.time[s],
          "no limit: stage %d drops %d, recomputes %d, %g bytes (never: %g)", s, none.drop[s],
          none.recomputed[s], none.memory[s], nv.memory[s]);
    CHECK(al.memory[s] < nv.memory[s], "stage %d: always %g, never %g", s, al.memory[s],
          nv.memory[s]);
  }
  /* limits from just above always's peak to just below never's: the choice fits, drops some
   * but not all, and drops fewer as the limit grows */
  int prev = M + 1, seen_mid = 0;
  for (int i = 0; i <= 20; i++) {
    double l = al.memory[0] + (nv.memory[0] - al.memory[0]) * (0.001 + 0.998 * i / 20.0);
    double lim[2] = {l, l};
    gp_partition a = eval(GP_SCHED_GPIPE, GP_REMAT_AUTO, M, lim);
    CHECK(a.memory[0] <= l, "limit %g: stage 0 estimated at %g", l, a.memory[0]);
    CHECK(a.drop[0] >= 2 && a.drop[0] <= M && a.recomputed[0] == a.drop[0],
          "limit %g: stage 0 drops %d slots, recomputes %d of %d", l, a.drop[0], a.recomputed[0],
          M);
    CHECK(a.drop[0] <= prev, "limit %g: %d dropping, more than %d under a smaller limit", l,
          a.drop[0], prev);
    seen_mid |= a.drop[0] > 2 && a.drop[0] < M;
    /* the fewest: one slot fewer (and none at all) would not fit */
    if (a.drop[0] > 2) {
      double tight[2] = {a.memory[0] + 1, a.memory[0] + 1};
      gp_partition t = eval(GP_SCHED_GPIPE, GP_REMAT_AUTO, M, tight);
      CHECK(t.drop[0] == a.drop[0], "a limit just above %g bytes: %d, want %d", a.memory[0],
            t.drop[0], a.drop[0]);
    }
    /* a stage that drops is faster than `always` and slower than `never` where it keeps any */
    if (a.drop[0] < M)
      CHECK(a.time[0] < al.time[0] && a.time[0] > nv.time[0], "limit %g: time %g (%g..%g)", l,
            a.time[0], nv.time[0], al.time[0]);
    prev = a.drop[0];
  }
  CHECK(seen_mid, "no limit between the peaks gave a count strictly between 2 and %d", M);
  double mid = (al.memory[0] + nv.memory[0]) / 2, lim[2] = {mid, mid};
  gp_partition a = eval(GP_SCHED_GPIPE, GP_REMAT_AUTO, M, lim);
  CHECK(a.recomputed[0] > 0 && a.recomputed[0] < M,
        "halfway between never (%g) and always (%g): %d of %d recompute", nv.memory[0],
        al.memory[0], a.recomputed[0], M);

  /* the schedule built from the choice: those micro-batches recompute, and the simulated
   * activation peak lies between never's and always's */
  gp_schedule sc, sn, sa;
  if (gp_schedule_build_drops(GP_SCHED_GPIPE, 2, M, a.drop, &sc) != GP_OK ||
      gp_schedule_build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, M, &sn) != GP_OK ||
      gp_schedule_build(GP_SCHED_GPIPE, GP_REMAT_ALWAYS, 2, M, &sa) != GP_OK)
    gp_t_die("build");
  CHECK(gp_schedule_validate(&sc) == GP_OK, "the list validates");
  for (int s = 0; s < 2; s++) {
    int f = 0, b = 0;
    for (int i = 0; i < sc.n_actions[s]; i++) {
      const gp_action *x = &sc.actions[s][i];
      f += x->kind == GP_A_FORWARD && x->recompute;
      b += x->kind == GP_A_BACKWARD && x->recompute;
      if (x->kind == GP_A_FORWARD)
        CHECK(x->recompute == (x->micro % sc.slots[s] < a.drop[s]), "stage %d micro %d: %d", s,
              x->micro, x->recompute);
    }
    CHECK(f == a.recomputed[s] && b == a.recomputed[s],
          "stage %d: %d forwards and %d backwards recompute, the choice says %d", s, f, b,
          a.recomputed[s]);
  }
  gp_stage_cost cost[2];
  for (int s = 0; s < 2; s++)
    cost[s] = (gp_stage_cost){.fwd = 4, .bwd = 8, .act_bytes = 4 << 20, .input_bytes = 1 << 16};
  gp_sim_result rc, rn, ra;
  if (gp_schedule_simulate(&sc, cost, &rc) != GP_OK ||
      gp_schedule_simulate(&sn, cost, &rn) != GP_OK ||
      gp_schedule_simulate(&sa, cost, &ra) != GP_OK)
    gp_t_die("simulate");
  CHECK(rc.stage[0].peak_bytes < rn.stage[0].peak_bytes &&
            rc.stage[0].peak_bytes > ra.stage[0].peak_bytes,
        "simulated peak %g, never %g, always %g", rc.stage[0].peak_bytes, rn.stage[0].peak_bytes,
        ra.stage[0].peak_bytes);
  CHECK(rc.makespan < ra.makespan && rc.makespan > rn.makespan,
        "simulated step %g, never %g, always %g", rc.makespan, rn.makespan, ra.makespan);
  gp_sim_result_free(&rc);
  gp_sim_result_free(&rn);
  gp_sim_result_free(&ra);
  gp_schedule_free(&sc);
  gp_schedule_free(&sn);
  gp_schedule_free(&sa);
}

/* 1F1B at K = 2: the last stage keeps one micro-batch in flight and never recomputes, however
 * tight the limit; the first (two in flight) drops both or none. */
static void last_stage(void) {
  double lim[2] = {1, 1}; /* fits nothing */
  gp_partition a = eval(GP_SCHED_1F1B, GP_REMAT_AUTO, 8, lim);
  CHECK(a.drop[1] == 0 && a.recomputed[1] == 0, "1F1B's last stage drops %d, recomputes %d",
        a.drop[1], a.recomputed[1]);
  CHECK(a.drop[0] == 2 && a.recomputed[0] == 8, "1F1B's first stage under 1 byte: %d, %d",
        a.drop[0], a.recomputed[0]);
  int drop[2] = {2, 1};
  gp_schedule sc;
  if (gp_schedule_build_drops(GP_SCHED_1F1B, 2, 8, drop, &sc) != GP_OK) gp_t_die("build 1f1b");
  int last = 0;
  for (int i = 0; i < sc.n_actions[1]; i++)
    last += sc.actions[1][i].recompute;
  CHECK(last == 0 && sc.slots[1] == 1, "1F1B's last stage: %d actions recompute (%d slots)", last,
        sc.slots[1]);
  gp_schedule_free(&sc);
  int bad[2] = {3, 0};
  CHECK(gp_schedule_build_drops(GP_SCHED_1F1B, 2, 8, bad, &sc) == GP_ERR_USAGE,
        "3 dropping slots of 2 are refused");
  /* remat auto without drops: never's lists, the existing modes unchanged */
  gp_schedule x, y;
  if (gp_schedule_build(GP_SCHED_1F1B, GP_REMAT_AUTO, 3, 5, &x) != GP_OK ||
      gp_schedule_build(GP_SCHED_1F1B, GP_REMAT_NEVER, 3, 5, &y) != GP_OK)
    gp_t_die("build auto");
  int same = 1;
  for (int s = 0; s < 3; s++)
    same &= x.n_actions[s] == y.n_actions[s] &&
            !memcmp(x.actions[s], y.actions[s], sizeof *x.actions[s] * (size_t)x.n_actions[s]);
  CHECK(same, "remat auto without a choice lists what never lists");
  gp_schedule_free(&x);
  gp_schedule_free(&y);
}

int main(void) {
  setup();
  between();
  last_stage();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
