/* The schedule simulator: the GPipe bubble (K-1)/(M+K-1) for equal costs, peak micro-batches in
 * flight, activation memory under re-materialization, and timelines worked out by hand; the
 * replay of measured action times against it and by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/exec/pipeline.h"
#include "core/schedule/schedule.h"
#include "tests/support/check.h"

/* Costs in these tests are small integers and halves: sums of them are exact in double, so
 * times compare exactly; the bubble is a quotient, so it gets rounding room. */
#define TOL_BUBBLE 1e-12

static int failures, passes;

static const gp_schedule_kind KINDS[] = {GP_SCHED_GPIPE, GP_SCHED_1F1B};
static const char *KIND_NAMES[] = {"gpipe", "1f1b"};

static int imin(int a, int b) {
  return a < b ? a : b;
}

/* Builds and simulates with the same cost on every stage (or the given per-stage costs). */
static gp_sim_result run(gp_schedule_kind kind, gp_remat remat, int K, int M,
                         const gp_stage_cost *per_stage, gp_stage_cost same) {
  gp_schedule sc;
  gp_sim_result r;
  gp_stage_cost *c = malloc(sizeof *c * (size_t)K);
  for (int s = 0; s < K; s++)
    c[s] = per_stage ? per_stage[s] : same;
  if (gp_schedule_build(kind, remat, K, M, &sc) != GP_OK ||
      gp_schedule_simulate(&sc, c, &r) != GP_OK) {
    printf("FAIL: K=%d M=%d: %s\n", K, M, gp_error_message());
    exit(1);
  }
  gp_schedule_free(&sc);
  free(c);
  return r;
}

static void test_equal_costs(void) {
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int K = 1; K <= 8; K++)
      for (int M = 1; M <= 32; M++) {
        const char *kn = KIND_NAMES[k];
        gp_stage_cost c = {.fwd = 1, .bwd = 2, .send = 0, .act_bytes = 1, .input_bytes = 1};
        gp_sim_result r = run(KINDS[k], GP_REMAT_NEVER, K, M, NULL, c);
        double want_bubble = (double)(K - 1) / (M + K - 1);
        if ((r.makespan != (M + K - 1) * 3.0 || fabs(r.bubble - want_bubble) > TOL_BUBBLE) &&
            bad++ < 8)
          CHECK(0, "%s K=%d M=%d: makespan %g bubble %.15g, want %d and %.15g", kn, K, M,
                r.makespan, r.bubble, (M + K - 1) * 3, want_bubble);
        for (int s = 0; s < K; s++) {
          int want = KINDS[k] == GP_SCHED_GPIPE ? M : imin(M, K - s);
          if ((r.stage[s].busy != 3.0 * M || r.stage[s].peak_in_flight != want ||
               (KINDS[k] == GP_SCHED_1F1B && r.stage[s].peak_in_flight > K - s)) &&
              bad++ < 8)
            CHECK(0, "%s K=%d M=%d stage %d: busy %g in flight %d, want %d and %d", kn, K, M, s,
                  r.stage[s].busy, r.stage[s].peak_in_flight, 3 * M, want);
        }
        gp_sim_result_free(&r);
        /* Recompute adds f to every backward, but a stage runs it before its gradient has
         * arrived: on K > 1 stages the first backward's recompute fills the stage's wait, so
         * (M + K - 1) (f + b) + M f, not (M + K - 1) (2 f + b) */
        r = run(KINDS[k], GP_REMAT_ALWAYS, K, M, NULL, c);
        double mk = (M + K - 1) * 3.0 + M, wb = 1.0 - 4.0 * M / mk;
        if ((r.makespan != mk || fabs(r.bubble - wb) > TOL_BUBBLE) && bad++ < 8)
          CHECK(0, "%s remat K=%d M=%d: makespan %g bubble %g, want %g and %g", kn, K, M,
                r.makespan, r.bubble, mk, wb);
        gp_sim_result_free(&r);
        CHECK(r.stage == NULL, "gp_sim_result_free leaves the stages");
      }
  CHECK(!bad, "%d equal-cost results wrong", bad);
}

static void test_memory(void) {
  gp_stage_cost c = {.fwd = 1, .bwd = 2, .send = 0, .act_bytes = 1000, .input_bytes = 10};
  int bad = 0;
  for (int K = 1; K <= 6; K++)
    for (int M = 1; M <= 12; M++) {
      gp_sim_result g[3], f[3]; /* by remat: always, except_last, never */
      gp_remat modes[3] = {GP_REMAT_ALWAYS, GP_REMAT_EXCEPT_LAST, GP_REMAT_NEVER};
      for (int i = 0; i < 3; i++) {
        g[i] = run(GP_SCHED_GPIPE, modes[i], K, M, NULL, c);
        f[i] = run(GP_SCHED_1F1B, modes[i], K, M, NULL, c);
      }
      for (int s = 0; s < K; s++) {
        int inf = imin(M, K - s);
        /* the forms: never keeps every in-flight micro-batch's activations; always keeps
         * their inputs plus one re-materialized set during a backward */
        double want[4] = {M * 1000.0, M * 10.0 + 1000, inf * 1000.0, inf * 10.0 + 1000};
        double got[4] = {g[2].stage[s].peak_bytes, g[0].stage[s].peak_bytes,
                         f[2].stage[s].peak_bytes, f[0].stage[s].peak_bytes};
        for (int j = 0; j < 4; j++)
          if (got[j] != want[j] && bad++ < 8)
            CHECK(0, "K=%d M=%d stage %d case %d: peak bytes %g, want %g", K, M, s, j, got[j],
                  want[j]);
        /* except_last too: both keep the micro-batch they backward first, which never sits
         * beside a re-materialized one (1F1B kept its last until 2026-11-24: K=2 M=2 stage 0
         * held 10 + 1000 + 1000 against GPipe's 1010) */
        for (int i = 0; i < 3; i++)
          if (g[i].stage[s].peak_bytes < f[i].stage[s].peak_bytes && bad++ < 8)
            CHECK(0, "K=%d M=%d stage %d remat %d: gpipe %g < 1f1b %g", K, M, s, i,
                  g[i].stage[s].peak_bytes, f[i].stage[s].peak_bytes);
        /* recompute pays off once two micro-batches are in flight; with one it costs the
         * input on top */
        if (M >= 2 &&
            (g[0].stage[s].peak_bytes >= g[2].stage[s].peak_bytes ||
             g[1].stage[s].peak_bytes >= g[2].stage[s].peak_bytes) &&
            bad++ < 8)
          CHECK(0, "K=%d M=%d stage %d: gpipe recompute does not save (%g %g vs %g)", K, M, s,
                g[0].stage[s].peak_bytes, g[1].stage[s].peak_bytes, g[2].stage[s].peak_bytes);
        if (inf >= 2 &&
            (f[0].stage[s].peak_bytes >= f[2].stage[s].peak_bytes ||
             f[1].stage[s].peak_bytes >= f[2].stage[s].peak_bytes) &&
            bad++ < 8)
          CHECK(0, "K=%d M=%d stage %d: 1f1b recompute does not save (%g %g vs %g)", K, M, s,
                f[0].stage[s].peak_bytes, f[1].stage[s].peak_bytes, f[2].stage[s].peak_bytes);
      }
      /* K=2 M=2 stage 0 under 1F1B except_last: F0 (kept, 1000), F1 (input, 10), B0, then B1
       * re-materializes: 1010 at most */
      if (K == 2 && M == 2 && f[1].stage[0].peak_bytes != 1010 && bad++ < 8)
        CHECK(0, "1f1b except_last K=2 M=2 stage 0: peak %g, want 1010", f[1].stage[0].peak_bytes);
      for (int i = 0; i < 3; i++) {
        gp_sim_result_free(&g[i]);
        gp_sim_result_free(&f[i]);
      }
    }
  CHECK(!bad, "%d memory results wrong", bad);
}

/* Timelines by hand, f = 1, b = 2, send = 0.5 between stages.
 * K=2 M=2 GPipe: stage 0 F0 0-1 F1 1-2; stage 1 F0 1.5-2.5 F1 2.5-3.5 B1 3.5-5.5 B0 5.5-7.5;
 *   stage 0 B1 6-8 B0 8-10: makespan 10 (9 without sends), bubble 1 - 12/20.
 * K=2 M=2 1F1B: stage 1 F0 1.5-2.5 B0 2.5-4.5 F1 4.5-5.5 B1 5.5-7.5; stage 0 B0 5-7,
 *   B1 8-10: also 10.
 * K=3 M=1 with sends 0.5, 0.25 and 7 (the last stage sends nothing): F 0-1, 1.5-2.5,
 *   2.75-3.75; B 3.75-5.75, 6-8, 8.5-10.5: makespan 10.5. */
static void test_sends(void) {
  gp_stage_cost c = {.fwd = 1, .bwd = 2, .send = 0.5, .act_bytes = 1, .input_bytes = 1};
  for (int k = 0; k < 2; k++) {
    gp_sim_result r = run(KINDS[k], GP_REMAT_NEVER, 2, 2, NULL, c);
    CHECK(r.makespan == 10 && fabs(r.bubble - 0.4) < TOL_BUBBLE,
          "%s K=2 M=2 send 0.5: makespan %g bubble %g, want 10 and 0.4", KIND_NAMES[k], r.makespan,
          r.bubble);
    gp_sim_result_free(&r);
  }
  gp_stage_cost per[3] = {c, c, c};
  per[1].send = 0.25;
  per[2].send = 7;
  gp_sim_result r = run(GP_SCHED_GPIPE, GP_REMAT_NEVER, 3, 1, per, c);
  CHECK(r.makespan == 10.5, "K=3 M=1 sends 0.5/0.25/7: makespan %g, want 10.5", r.makespan);
  gp_sim_result_free(&r);
}

/* Recompute timing and unequal stages by hand.
 * K=1 M=2 GPipe except_last: F0 F1, B1 (kept, 2), B0 (recompute, 1 + 2): makespan 7.
 * K=2 M=1 with stage 0 f=1 b=1 and stage 1 f=3 b=5: 1 + 3 + 5 + 1 = 10, busy 2 and 8. */
static void test_by_hand(void) {
  gp_stage_cost c = {.fwd = 1, .bwd = 2, .send = 0, .act_bytes = 1, .input_bytes = 1};
  gp_sim_result r = run(GP_SCHED_GPIPE, GP_REMAT_EXCEPT_LAST, 1, 2, NULL, c);
  CHECK(r.makespan == 7 && r.stage[0].busy == 7 && r.bubble == 0,
        "K=1 M=2 except_last: makespan %g busy %g bubble %g, want 7 7 0", r.makespan,
        r.stage[0].busy, r.bubble);
  gp_sim_result_free(&r);
  gp_stage_cost per[2] = {{1, 1, 0, 1, 1}, {3, 5, 0, 1, 1}};
  r = run(GP_SCHED_1F1B, GP_REMAT_NEVER, 2, 1, per, c);
  CHECK(r.makespan == 10 && r.stage[0].busy == 2 && r.stage[1].busy == 8 &&
            fabs(r.bubble - 0.5) < TOL_BUBBLE,
        "K=2 M=1 unequal: makespan %g busy %g %g bubble %g", r.makespan, r.stage[0].busy,
        r.stage[1].busy, r.bubble);
  gp_sim_result_free(&r);
  gp_stage_cost zero = {0};
  r = run(GP_SCHED_1F1B, GP_REMAT_NEVER, 3, 4, NULL, zero);
  CHECK(r.makespan == 0 && r.bubble == 0, "zero costs: makespan %g bubble %g", r.makespan,
        r.bubble);
  gp_sim_result_free(&r);
}

/* Events by hand with recompute, f = 1, b = 2, send = 0.5, K = 2, M = 2.
 * GPipe: stage 0 F0 0-1 F1 1-2; stage 1 F0 1.5-2.5 F1 2.5-3.5, then R1 3.5-4.5 B1 4.5-6.5
 *   R0 6.5-7.5 B0 7.5-9.5; stage 0 recomputes micro-batch 1 at 2-3, while its gradient is
 *   still on the way, B1 7-9 (the gradient arrives at 6.5 + 0.5), R0 9-10 B0 10-12.
 * 1F1B: stage 1 F0 1.5-2.5 R0 2.5-3.5 B0 3.5-5.5 F1 5.5-6.5 R1 6.5-7.5 B1 7.5-9.5; stage 0
 *   F0 0-1 F1 1-2 R0 2-3 B0 6-8 R1 8-9 B1 10-12.
 * Both: makespan 12 (13 if each recompute waited for its gradient), busy 8 a stage. */
/* The optimizer step, by hand: K=2 M=1 GPipe, f = 1, b = 2, steps 3 and 0.5: stage 1 F 1-2
 * B 2-4 step 4-4.5; stage 0 F 0-1 B 4-6 step 6-9: makespan 9, busy 6 and 3.5. */
static void test_step_cost(void) {
  gp_stage_cost per[2] = {{.fwd = 1, .bwd = 2, .step = 3}, {.fwd = 1, .bwd = 2, .step = 0.5}};
  gp_sim_result r = run(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 1, per, per[0]);
  CHECK(r.makespan == 9 && r.stage[0].busy == 6 && r.stage[1].busy == 3.5 &&
            fabs(r.bubble - (1 - 9.5 / 18)) < TOL_BUBBLE,
        "steps 3 and 0.5: makespan %g busy %g %g bubble %g, want 9 6 3.5", r.makespan,
        r.stage[0].busy, r.stage[1].busy, r.bubble);
  gp_sim_result_free(&r);
}

static void test_recompute_events(void) {
  gp_stage_cost c[2] = {{1, 2, 0.5, 1, 1}, {1, 2, 0.5, 1, 1}};
  static const double want[2][2][4][6] = {
      /* per kind, stage, action: backward?, micro-batch, rstart, rend, start, end */
      {{{0, 0, 0, 0, 0, 1}, {0, 1, 1, 1, 1, 2}, {1, 1, 2, 3, 7, 9}, {1, 0, 9, 10, 10, 12}},
       {{0, 0, 1.5, 1.5, 1.5, 2.5},
        {0, 1, 2.5, 2.5, 2.5, 3.5},
        {1, 1, 3.5, 4.5, 4.5, 6.5},
        {1, 0, 6.5, 7.5, 7.5, 9.5}}},
      {{{0, 0, 0, 0, 0, 1}, {0, 1, 1, 1, 1, 2}, {1, 0, 2, 3, 6, 8}, {1, 1, 8, 9, 10, 12}},
       {{0, 0, 1.5, 1.5, 1.5, 2.5},
        {1, 0, 2.5, 3.5, 3.5, 5.5},
        {0, 1, 5.5, 5.5, 5.5, 6.5},
        {1, 1, 6.5, 7.5, 7.5, 9.5}}}};
  for (int k = 0; k < 2; k++) {
    gp_schedule sc;
    gp_sim_result r;
    gp_sim_events ev;
    if (gp_schedule_build(KINDS[k], GP_REMAT_ALWAYS, 2, 2, &sc) != GP_OK ||
        gp_schedule_simulate_events(&sc, c, &r, &ev) != GP_OK) {
      printf("FAIL: %s events: %s\n", KIND_NAMES[k], gp_error_message());
      exit(1);
    }
    CHECK(r.makespan == 12 && r.stage[0].busy == 8 && r.stage[1].busy == 8,
          "%s K=2 M=2 remat: makespan %g busy %g %g, want 12 8 8", KIND_NAMES[k], r.makespan,
          r.stage[0].busy, r.stage[1].busy);
    for (int s = 0; s < 2; s++) {
      CHECK(ev.n[s] == 4, "%s stage %d: %d events, want 4", KIND_NAMES[k], s, ev.n[s]);
      for (int i = 0; i < 4 && i < ev.n[s]; i++) {
        const gp_sim_event *e = &ev.event[s][i];
        const double *w = want[k][s][i];
        CHECK((e->kind == GP_A_BACKWARD) == (w[0] == 1) && e->micro == (int)w[1] && e->recompute &&
                  e->rstart == w[2] && e->rend == w[3] && e->start == w[4] && e->end == w[5],
              "%s stage %d event %d: %c%d recompute %g-%g action %g-%g, want %c%d %g-%g %g-%g",
              KIND_NAMES[k], s, i, e->kind == GP_A_BACKWARD ? 'B' : 'F', e->micro, e->rstart,
              e->rend, e->start, e->end, w[0] == 1 ? 'B' : 'F', (int)w[1], w[2], w[3], w[4], w[5]);
      }
    }
    gp_sim_events_free(&ev);
    gp_sim_result_free(&r);
    gp_schedule_free(&sc);
  }
}

/* gp_bubble_sim from stage statistics, K = 2, M = 2, GPipe without recompute, by hand:
 * - 2 steps, F 4 s on each stage, B 8 s on the first, B 6 s and T (handing gradients back)
 *   2 s on the second: f = 1, b = 2 a micro-batch, equal stages, the theory's 1/3 (makespan
 *   9, 6 busy a stage);
 * - optimizer steps of 1 and 4 s a step: each stage's after its own last backward, stage 0
 *   at 9-10, stage 1 at 7-11 (its backwards end at 7): busy 12 + 5, span 11: 1 - 17 / 22;
 * - 1 step, stage 1 twice as slow (f = 2, b = 4): F 0-1 1-2 | 1-3 3-5, B 5-9 9-13 | 9-11 13-15,
 *   1 - 18 / 30 = 0.4: the unequal stages' cost on top of 1/3;
 * - one stage: 0; a stage that timed no step: NAN. */
static void test_bubble_from_stats(void) {
  gp_schedule sc;
  if (gp_schedule_build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 2, &sc) != GP_OK) exit(1);
  gp_stage_stats ss[2] = {{.steps = 2}, {.steps = 2}};
  for (int s = 0; s < 2; s++)
    ss[s].wall_s[GP_A_FORWARD] = 4;
  ss[0].wall_s[GP_A_BACKWARD] = 8; /* the first stage hands no gradient back */
  ss[1].wall_s[GP_A_BACKWARD] = 6;
  ss[1].wall_s[GP_A_TRANSFER] = 2;
  double b = -1;
  CHECK(gp_bubble_sim(&sc, ss, &b) == GP_OK && fabs(b - 1.0 / 3) < TOL_BUBBLE,
        "equal stages: bubble %.15g, want 1/3", b);
  ss[0].wall_s[GP_A_STEP] = 2;
  ss[1].wall_s[GP_A_STEP] = 8;
  CHECK(gp_bubble_sim(&sc, ss, &b) == GP_OK && fabs(b - (1 - 17.0 / 22)) < TOL_BUBBLE,
        "with optimizer steps: bubble %.15g, want 5/22", b);
  gp_stage_stats un[2] = {{.steps = 1}, {.steps = 1}};
  un[0].wall_s[GP_A_FORWARD] = 2;
  un[0].wall_s[GP_A_BACKWARD] = 4;
  un[1].wall_s[GP_A_FORWARD] = 4;
  un[1].wall_s[GP_A_BACKWARD] = 8;
  CHECK(gp_bubble_sim(&sc, un, &b) == GP_OK && fabs(b - 0.4) < TOL_BUBBLE,
        "unequal stages: bubble %.15g, want 0.4", b);
  un[1].steps = 0;
  CHECK(gp_bubble_sim(&sc, un, &b) == GP_OK && isnan(b), "no step timed: bubble %g, want NAN", b);
  gp_schedule_free(&sc);
  if (gp_schedule_build(GP_SCHED_1F1B, GP_REMAT_ALWAYS, 1, 4, &sc) != GP_OK) exit(1);
  CHECK(gp_bubble_sim(&sc, ss, &b) == GP_OK && b == 0, "one stage: bubble %g, want 0", b);
  gp_schedule_free(&sc);
}

static void test_bad_costs(void) {
  gp_schedule sc;
  if (gp_schedule_build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 2, &sc) != GP_OK) exit(1);
  gp_stage_cost c[2] = {{1, 2, 0, 1, 1}, {1, 2, 0, 1, 1}};
  double *fields[6] = {&c[1].fwd,       &c[1].bwd,         &c[1].send,
                       &c[1].act_bytes, &c[1].input_bytes, &c[1].step};
  for (int i = 0; i < 6; i++) {
    for (int bad = 0; bad < 2; bad++) {
      double keep = *fields[i];
      *fields[i] = bad ? NAN : -1;
      gp_sim_result r;
      gp_status st = gp_schedule_simulate(&sc, c, &r);
      CHECK(st == GP_ERR_USAGE && r.stage == NULL, "cost field %d = %g accepted (%s)", i,
            *fields[i], gp_status_name(st));
      *fields[i] = keep;
    }
  }
  gp_sim_result r;
  CHECK(gp_schedule_simulate(&sc, NULL, &r) == GP_ERR_USAGE, "no costs accepted");
  CHECK(gp_schedule_simulate(&sc, c, &r) == GP_OK, "good costs rejected: %s", gp_error_message());
  gp_sim_result_free(&r);
  gp_schedule_free(&sc);
}

/* Fills every action's time for gp_schedule_replay: stage k's forwards fwd[k], backwards
 * bwd[k] (recompute: fwd[k]), its step step[k], or, where per is given, per[k][kind][micro]
 * (kind 0 forward, 1 backward, 2 recompute; the step: per[k][0][M]). */
static void replay_times(const gp_schedule *sc, const gp_stage_cost *c, double per[][3][4],
                         double **dur, double **rdur) {
  for (int k = 0; k < sc->stages; k++) {
    dur[k] = calloc((size_t)sc->n_actions[k], sizeof **dur);
    rdur[k] = calloc((size_t)sc->n_actions[k], sizeof **rdur);
    for (int a = 0; a < sc->n_actions[k]; a++) {
      const gp_action *ac = &sc->actions[k][a];
      const int m = ac->micro;
      if (ac->kind == GP_A_FORWARD) dur[k][a] = per ? per[k][0][m] : c[k].fwd;
      if (ac->kind == GP_A_BACKWARD) {
        dur[k][a] = per ? per[k][1][m] : c[k].bwd;
        rdur[k][a] = ac->recompute ? (per ? per[k][2][m] : c[k].fwd) : 0;
      }
      if (ac->kind == GP_A_STEP) dur[k][a] = per ? per[k][0][sc->micro] : c[k].step;
    }
  }
}

static void replay_free(int K, double **dur, double **rdur) {
  for (int k = 0; k < K; k++) {
    free(dur[k]);
    free(rdur[k]);
  }
}

/* Replaying with every action at its stage's cost (and no sends) is the simulation, for both
 * schedules, every re-materialization and uneven stages. */
static void test_replay_is_simulation(void) {
  const gp_remat REMATS[] = {GP_REMAT_ALWAYS, GP_REMAT_EXCEPT_LAST, GP_REMAT_NEVER};
  int bad = 0, runs = 0;
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < 3; r++)
      for (int K = 1; K <= 5; K++)
        for (int M = 1; M <= 9; M += 4) {
          gp_stage_cost c[5];
          for (int s = 0; s < K; s++)
            c[s] = (gp_stage_cost){.fwd = 1 + s % 3, .bwd = 2 + (s * 7) % 4, .step = 0.5 * s};
          gp_schedule sc;
          gp_sim_result sim;
          double *dur[5], *rdur[5], span, busy;
          if (gp_schedule_build(KINDS[k], REMATS[r], K, M, &sc) != GP_OK) exit(1);
          replay_times(&sc, c, NULL, dur, rdur);
          gp_status st1 = gp_schedule_simulate(&sc, c, &sim);
          gp_status st2 = gp_schedule_replay(&sc, (const double *const *)dur,
                                             (const double *const *)rdur, &span, &busy);
          double sum = 0;
          for (int s = 0; st1 == GP_OK && s < K; s++)
            sum += sim.stage[s].busy;
          if (st1 != GP_OK || st2 != GP_OK || span != sim.makespan || busy != sum) {
            if (bad++ < 5)
              printf("  %s remat %d K=%d M=%d: replay %g (busy %g), simulation %g (busy %g)\n",
                     KIND_NAMES[k], r, K, M, span, busy, sim.makespan, sum);
          }
          runs++;
          gp_sim_result_free(&sim);
          replay_free(K, dur, rdur);
          gp_schedule_free(&sc);
        }
  CHECK(!bad, "%d of %d replays differ from the simulation", bad, runs);
}

/* A replay by hand, K=2 M=2 GPipe, each action its own time:
 * never: stage 0 F0 0-1 F1 1-4; stage 1 F0 1-3 F1 4-5 B1 5-6 B0 6-10 step 10-11; stage 0
 *   B1 6-8 (its gradient at 6) B0 10-12 step 12-12.5: makespan 12.5, busy 8.5 + 9.
 * always, recomputes 1 (stage 0) and 0.5 (stage 1): stage 1 R1 5-5.5 B1 5.5-6.5 R0 6.5-7
 *   B0 7-11 step 11-12; stage 0 R1 4-5 B1 6.5-8.5 R0 8.5-9.5 B0 11-13 step 13-13.5: makespan
 *   13.5, busy 10.5 + 10. A negative time is refused. */
static void test_replay_by_hand(void) {
  double per[2][3][4] = {{{1, 3, 0.5}, {2, 2}, {1, 1}}, {{2, 1, 1}, {4, 1}, {0.5, 0.5}}};
  const gp_remat remat[2] = {GP_REMAT_NEVER, GP_REMAT_ALWAYS};
  const double want_span[2] = {12.5, 13.5}, want_busy[2] = {17.5, 20.5};
  for (int i = 0; i < 2; i++) {
    gp_schedule sc;
    double *dur[2], *rdur[2], span, busy;
    if (gp_schedule_build(GP_SCHED_GPIPE, remat[i], 2, 2, &sc) != GP_OK) exit(1);
    replay_times(&sc, NULL, per, dur, rdur);
    gp_status st = gp_schedule_replay(&sc, (const double *const *)dur, (const double *const *)rdur,
                                      &span, &busy);
    CHECK(st == GP_OK && span == want_span[i] && busy == want_busy[i],
          "replay by hand %d: makespan %g busy %g, want %g %g", i, span, busy, want_span[i],
          want_busy[i]);
    dur[1][2] = -1;
    CHECK(gp_schedule_replay(&sc, (const double *const *)dur, (const double *const *)rdur, &span,
                             &busy) == GP_ERR_USAGE,
          "a negative action time was accepted");
    replay_free(2, dur, rdur);
    gp_schedule_free(&sc);
  }
}

/* Stages sharing devices: a device each (or as many slots as stages) is the plain simulation,
 * event for event; two stages on one core take turns, so nothing overlaps on it and, with no
 * hand-off time, the core never idles: the makespan is all the work; a shared device also
 * serializes a re-materializing backward's recompute. */
static void test_shared_devices(void) {
  const gp_remat remat[] = {GP_REMAT_NEVER, GP_REMAT_ALWAYS, GP_REMAT_EXCEPT_LAST};
  gp_stage_cost c[3] = {{.fwd = 1, .bwd = 2, .send = 0.5},
                        {.fwd = 3, .bwd = 5, .send = 0.5},
                        {.fwd = 1.5, .bwd = 1, .send = 0}};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++) {
      gp_schedule sc;
      if (gp_schedule_build(KINDS[k], remat[i], 3, 5, &sc) != GP_OK) exit(1);
      int own[3] = {0, 1, 2}, one[3] = {0, 0, 0}, slots1[3] = {1, 1, 1}, slots3[1] = {3};
      gp_sim_share apart = {own, slots1, 3}, roomy = {one, slots3, 1}, turns = {one, slots1, 1};
      gp_sim_result r0, r1, r2, r3;
      gp_sim_events e0, e1, e2, e3;
      int ok = gp_schedule_simulate_events(&sc, c, &r0, &e0) == GP_OK &&
               gp_schedule_simulate_shared(&sc, c, &apart, &r1, &e1) == GP_OK &&
               gp_schedule_simulate_shared(&sc, c, &roomy, &r2, &e2) == GP_OK &&
               gp_schedule_simulate_shared(&sc, c, &turns, &r3, &e3) == GP_OK;
      CHECK(ok, "%s remat %d: shared simulation failed: %s", KIND_NAMES[k], i, gp_error_message());
      if (!ok) exit(1);
      int same = r0.makespan == r1.makespan && r0.makespan == r2.makespan;
      for (int s = 0; s < 3; s++)
        for (int a = 0; a < e0.n[s]; a++)
          same = same && e0.event[s][a].start == e1.event[s][a].start &&
                 e0.event[s][a].end == e2.event[s][a].end &&
                 e0.event[s][a].rstart == e2.event[s][a].rstart;
      CHECK(same, "%s remat %d: a device each differs from the plain simulation (%g %g %g)",
            KIND_NAMES[k], i, r0.makespan, r1.makespan, r2.makespan);
      /* one slot: intervals (recompute to end) never overlap across the stages */
      double work = 0;
      int overlap = 0;
      for (int s = 0; s < 3; s++) {
        work += r3.stage[s].busy;
        for (int a = 0; a < e3.n[s]; a++)
          for (int t = s + 1; t < 3; t++)
            for (int b = 0; b < e3.n[t]; b++) {
              const gp_sim_event *x = &e3.event[s][a], *y = &e3.event[t][b];
              overlap |= x->rstart < y->end && y->rstart < x->end;
            }
      }
      CHECK(!overlap, "%s remat %d: two stages ran at once on a one-core device", KIND_NAMES[k], i);
      CHECK(r3.makespan >= work && r3.makespan > r0.makespan,
            "%s remat %d: one core: makespan %g, work %g, apart %g", KIND_NAMES[k], i, r3.makespan,
            work, r0.makespan);
      gp_sim_result_free(&r0), gp_sim_result_free(&r1), gp_sim_result_free(&r2);
      gp_sim_result_free(&r3);
      gp_sim_events_free(&e0), gp_sim_events_free(&e1), gp_sim_events_free(&e2);
      gp_sim_events_free(&e3);
      gp_schedule_free(&sc);
    }
  /* no sends: the one core is never idle, K = 2, M = 4 takes M x (f0 + b0 + f1 + b1) */
  gp_schedule sc;
  gp_stage_cost d[2] = {{.fwd = 2, .bwd = 3}, {.fwd = 1, .bwd = 0.5}};
  int one[2] = {0, 0}, slots[1] = {1}, bad[1] = {0};
  gp_sim_share turns = {one, slots, 1}, none = {one, bad, 1};
  gp_sim_result r;
  gp_sim_events e;
  for (int k = 0; k < 2; k++) {
    if (gp_schedule_build(KINDS[k], GP_REMAT_NEVER, 2, 4, &sc) != GP_OK) exit(1);
    CHECK(gp_schedule_simulate_shared(&sc, d, &turns, &r, &e) == GP_OK && r.makespan == 26,
          "%s: two stages on one core: makespan %g, want 26", KIND_NAMES[k], r.makespan);
    gp_sim_result_free(&r);
    gp_sim_events_free(&e);
    CHECK(gp_schedule_simulate_shared(&sc, d, &none, &r, &e) == GP_ERR_USAGE,
          "%s: a device with no slot was accepted", KIND_NAMES[k]);
    gp_schedule_free(&sc);
  }
}

int main(void) {
  test_equal_costs();
  test_memory();
  test_sends();
  test_by_hand();
  test_step_cost();
  test_recompute_events();
  test_bubble_from_stats();
  test_bad_costs();
  test_replay_is_simulation();
  test_replay_by_hand();
  test_shared_devices();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
