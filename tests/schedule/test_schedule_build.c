/* Schedule lists: their exact order, recompute flags, slots, and the validator on good lists,
 * malformed lists and lists that deadlock across stages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schedule/schedule.h"
#include "tests/support/check.h"

static int failures, passes;

static const gp_schedule_kind KINDS[] = {GP_SCHED_GPIPE, GP_SCHED_1F1B};
static const char *KIND_NAMES[] = {"gpipe", "1f1b"};
static const gp_remat REMATS[] = {GP_REMAT_ALWAYS, GP_REMAT_EXCEPT_LAST, GP_REMAT_NEVER};

static int imin(int a, int b) {
  return a < b ? a : b;
}

static gp_schedule build(gp_schedule_kind kind, gp_remat remat, int K, int M) {
  gp_schedule s;
  if (gp_schedule_build(kind, remat, K, M, &s) != GP_OK) {
    printf("FAIL: build K=%d M=%d: %s\n", K, M, gp_error_message());
    exit(1);
  }
  return s;
}

static void test_bad_arguments(void) {
  struct {
    int kind, remat, K, M;
  } bad[] = {
      {GP_SCHED_GPIPE, GP_REMAT_NEVER, 0, 4},
      {GP_SCHED_GPIPE, GP_REMAT_NEVER, 4, 0},
      {GP_SCHED_1F1B, GP_REMAT_NEVER, -3, 4},
      {GP_SCHED_1F1B, GP_REMAT_NEVER, 4, -1},
      {GP_SCHED_GPIPE, GP_REMAT_NEVER, (1 << 20) + 1, 1},
      {GP_SCHED_GPIPE, GP_REMAT_NEVER, 1, (1 << 20) + 1},
      {GP_SCHED_GPIPE, GP_REMAT_NEVER, 1 << 20, 1 << 20}, /* each fine, the product absurd */
      {7, GP_REMAT_NEVER, 2, 2},
      {GP_SCHED_GPIPE, 9, 2, 2},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gp_schedule s;
    gp_error_clear();
    gp_status st = gp_schedule_build(bad[i].kind, bad[i].remat, bad[i].K, bad[i].M, &s);
    CHECK(st == GP_ERR_USAGE && gp_error_message()[0] && !s.actions,
          "bad build %zu (kind %d remat %d K %d M %d) gave %s \"%s\"", i, bad[i].kind, bad[i].remat,
          bad[i].K, bad[i].M, gp_status_name(st), gp_error_message());
  }
  CHECK(gp_schedule_build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 2, NULL) == GP_ERR_USAGE,
        "build with no output accepted");
  CHECK(gp_schedule_validate(NULL) != GP_OK, "validate(NULL) accepted");
  gp_schedule_free(NULL); /* must not crash */
}

/* The expected list, written independently of the builder: GPipe by definition; 1F1B from
 * its steady state (after warm-up, forward j + w is followed by backward j). */
static gp_action expected(gp_schedule_kind kind, int K, int M, int s, int i) {
  gp_action a = {GP_A_STEP, 0, 0};
  if (i == 2 * M) return a;
  if (kind == GP_SCHED_GPIPE) {
    a.kind = i < M ? GP_A_FORWARD : GP_A_BACKWARD;
    a.micro = i < M ? i : 2 * M - 1 - i;
    return a;
  }
  int w = imin(K - s - 1, M), steady = 2 * (M - w);
  if (i < w) {
    a.kind = GP_A_FORWARD, a.micro = i;
  } else if (i < w + steady) {
    int j = i - w;
    a.kind = j % 2 ? GP_A_BACKWARD : GP_A_FORWARD;
    a.micro = j % 2 ? j / 2 : w + j / 2;
  } else {
    a.kind = GP_A_BACKWARD, a.micro = (M - w) + (i - w - steady);
  }
  return a;
}

/* except_last keeps (does not re-materialize) the micro-batch the stage backwards first: under
 * GPipe the last (torchgpipe's), under 1F1B the first, so that it is never held beside a
 * recompute; nothing on a stage with one micro-batch in flight at most (in_flight). */
static int want_recompute(gp_remat r, gp_schedule_kind kind, int m, int M, int in_flight) {
  if (r == GP_REMAT_ALWAYS) return 1;
  if (in_flight <= 1) return 0;
  if (r == GP_REMAT_EXCEPT_LAST) return m != (kind == GP_SCHED_1F1B ? 0 : M - 1);
  return 0;
}

/* Gives micro-batch m the activation slot m % slots[s], as the executor will, and fails if a
 * slot is taken by a micro-batch still in flight. */
static int slots_collide(const gp_schedule *sc, int s) {
  int n = sc->slots[s], *owner = malloc(sizeof(int) * (size_t)n), bad = 0;
  for (int k = 0; k < n; k++)
    owner[k] = -1;
  for (int i = 0; i < sc->n_actions[s] && !bad; i++) {
    const gp_action *a = &sc->actions[s][i];
    int slot = a->micro % n;
    if (a->kind == GP_A_FORWARD) {
      if (owner[slot] >= 0) bad = 1;
      owner[slot] = a->micro;
    } else if (a->kind == GP_A_BACKWARD) {
      if (owner[slot] != a->micro) bad = 1;
      owner[slot] = -1;
    }
  }
  free(owner);
  return bad;
}

static void test_lists(void) {
  int bad_order = 0, bad_rc = 0, bad_slots = 0, bad_valid = 0, bad_peak = 0;
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < 3; r++)
      for (int K = 1; K <= 8; K++)
        for (int M = 1; M <= 32; M++) {
          gp_schedule sc = build(KINDS[k], REMATS[r], K, M);
          const char *kn = KIND_NAMES[k];
          if (sc.stages != K || sc.micro != M || sc.kind != KINDS[k] || sc.remat != REMATS[r])
            CHECK(0, "%s K=%d M=%d: header fields wrong", kn, K, M);
          if (gp_schedule_validate(&sc) != GP_OK && bad_valid++ < 5)
            CHECK(0, "%s remat %d K=%d M=%d does not validate: %s", kn, r, K, M,
                  gp_error_message());
          for (int s = 0; s < K; s++) {
            if (sc.n_actions[s] != 2 * M + 1 && bad_order++ < 5) {
              CHECK(0, "%s K=%d M=%d stage %d: %d actions", kn, K, M, s, sc.n_actions[s]);
              continue;
            }
            int peak = KINDS[k] == GP_SCHED_GPIPE ? M : imin(M, K - s);
            for (int i = 0; i < 2 * M + 1; i++) {
              gp_action a = sc.actions[s][i], e = expected(KINDS[k], K, M, s, i);
              if ((a.kind != e.kind || (a.kind != GP_A_STEP && a.micro != e.micro)) &&
                  bad_order++ < 5)
                CHECK(0, "%s K=%d M=%d stage %d action %d: kind %d micro %d, want %d %d", kn, K, M,
                      s, i, a.kind, a.micro, e.kind, e.micro);
              int rc = a.kind == GP_A_STEP ? a.recompute
                                           : want_recompute(REMATS[r], KINDS[k], a.micro, M, peak);
              if (a.recompute != rc && bad_rc++ < 5)
                CHECK(0, "%s remat %d K=%d M=%d stage %d action %d: recompute %d", kn, r, K, M, s,
                      i, a.recompute);
            }
            if ((sc.slots[s] != peak || sc.slots[s] > (KINDS[k] == GP_SCHED_1F1B ? K - s : M)) &&
                bad_peak++ < 5)
              CHECK(0, "%s K=%d M=%d stage %d: slots %d, want %d", kn, K, M, s, sc.slots[s], peak);
            if (slots_collide(&sc, s) && bad_slots++ < 5)
              CHECK(0, "%s K=%d M=%d stage %d: slot m %% %d collides", kn, K, M, s, sc.slots[s]);
          }
          gp_schedule_free(&sc);
          CHECK(sc.actions == NULL && sc.slots == NULL, "free leaves pointers");
        }
  CHECK(!bad_order, "%d list order errors", bad_order);
  CHECK(!bad_rc, "%d recompute flag errors", bad_rc);
  CHECK(!bad_peak, "%d slot count errors", bad_peak);
  CHECK(!bad_slots, "%d slot collisions", bad_slots);
  CHECK(!bad_valid, "%d valid schedules rejected", bad_valid);
}

/* No recompute action on a stage that keeps at most one micro-batch in flight: there the
 * activations a recompute rebuilds are the only ones the stage holds, so dropping them saved
 * nothing (1F1B's last stage under except_last recomputed every micro-batch but the first,
 * right after its forward). The other stages keep theirs; `always` recomputes by request. */
static int list_in_flight(const gp_schedule *sc, int s) {
  int cur = 0, peak = 0;
  for (int i = 0; i < sc->n_actions[s]; i++) {
    if (sc->actions[s][i].kind == GP_A_FORWARD && ++cur > peak) peak = cur;
    if (sc->actions[s][i].kind == GP_A_BACKWARD) cur--;
  }
  return peak;
}

static void test_no_recompute_one_in_flight(void) {
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < 3; r++)
      for (int K = 1; K <= 6; K++)
        for (int M = 1; M <= 12; M++) {
          if (REMATS[r] == GP_REMAT_ALWAYS) continue;
          gp_schedule sc = build(KINDS[k], REMATS[r], K, M);
          for (int s = 0; s < sc.stages; s++) {
            if (list_in_flight(&sc, s) > 1) continue;
            for (int i = 0; i < sc.n_actions[s]; i++)
              if (sc.actions[s][i].recompute && bad++ < 5)
                CHECK(0,
                      "%s remat %d K=%d M=%d stage %d (one micro-batch in flight): action %d "
                      "(%s %d) recomputes",
                      KIND_NAMES[k], r, K, M, s, i,
                      sc.actions[s][i].kind == GP_A_FORWARD ? "forward" : "backward",
                      sc.actions[s][i].micro);
          }
          gp_schedule_free(&sc);
        }
  CHECK(!bad, "%d recompute actions on stages with one micro-batch in flight", bad);
  /* the case of the issue, and that the rule leaves the first stage alone */
  gp_schedule sc = build(GP_SCHED_1F1B, GP_REMAT_EXCEPT_LAST, 2, 2);
  int last = 0, first = 0;
  for (int i = 0; i < sc.n_actions[1]; i++)
    last += sc.actions[1][i].recompute;
  for (int i = 0; i < sc.n_actions[0]; i++)
    first += sc.actions[0][i].kind == GP_A_BACKWARD && sc.actions[0][i].recompute;
  CHECK(last == 0 && first == 1,
        "1f1b except_last K=2 M=2: %d recompute flags on stage 1, %d "
        "recomputing backwards on stage 0 (want 0 and 1)",
        last, first);
  gp_schedule_free(&sc);
}

/* The slot check itself must be able to fail: one slot too few collides. */
static void test_slot_check_can_fail(void) {
  gp_schedule sc = build(GP_SCHED_1F1B, GP_REMAT_NEVER, 4, 8);
  sc.slots[0]--;
  CHECK(slots_collide(&sc, 0), "slot check missed a collision with %d slots", sc.slots[0]);
  gp_schedule_free(&sc);
}

static void expect_reject(gp_schedule *sc, const char *what, const char *needle1,
                          const char *needle2) {
  gp_error_clear();
  gp_status st = gp_schedule_validate(sc);
  const char *msg = gp_error_message();
  CHECK(st == GP_ERR_RUNTIME && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)),
        "%s: got %s \"%s\", want \"%s\"%s%s", what, gp_status_name(st), msg, needle1,
        needle2 ? " and " : "", needle2 ? needle2 : "");
  /* simulate must refuse the same list and leave nothing to free */
  gp_stage_cost c[4] = {{1, 2, 0, 1, 1}, {1, 2, 0, 1, 1}, {1, 2, 0, 1, 1}, {1, 2, 0, 1, 1}};
  gp_sim_result r;
  CHECK(sc->stages > 4 || (gp_schedule_simulate(sc, c, &r) == GP_ERR_RUNTIME && !r.stage),
        "%s: simulate accepted it", what);
}

static void swap(gp_action *a, int i, int j) {
  gp_action t = a[i];
  a[i] = a[j];
  a[j] = t;
}

static void test_deadlocks(void) {
  /* stage 1 runs B0 before F0 */
  gp_schedule sc = build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 1);
  swap(sc.actions[1], 0, 1);
  expect_reject(&sc, "stage 1 B0 before F0", "stage 1: backward(0) at action 0 before its forward",
                NULL);
  gp_schedule_free(&sc);

  /* a cycle across stages: stage 0 wants B0 back before it sends F1 (F0 B0 F1 B1), stage 1
   * needs F1 before it sends B0 (GPipe's F0 F1 B1 B0) */
  sc = build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 2, 2);
  sc.actions[0][1] = (gp_action){GP_A_BACKWARD, 0, 0};
  sc.actions[0][2] = (gp_action){GP_A_FORWARD, 1, 0};
  sc.actions[0][3] = (gp_action){GP_A_BACKWARD, 1, 0};
  expect_reject(&sc, "cross-stage cycle",
                "stage 0 at action 1 backward(0) waits for backward(0) on stage 1",
                "stage 1 at action 1 forward(1) waits for forward(1) on stage 0");
  gp_schedule_free(&sc);

  /* three stages: the middle one runs the last stage's 1F1B order (F0 B0 F1 B1), the last one
   * GPipe's (F0 F1 B1 B0); all three stop */
  sc = build(GP_SCHED_1F1B, GP_REMAT_NEVER, 3, 2);
  sc.actions[1][1] = (gp_action){GP_A_BACKWARD, 0, 0};
  sc.actions[1][2] = (gp_action){GP_A_FORWARD, 1, 0};
  sc.actions[2][1] = (gp_action){GP_A_FORWARD, 1, 0};
  sc.actions[2][2] = (gp_action){GP_A_BACKWARD, 1, 0};
  sc.actions[2][3] = (gp_action){GP_A_BACKWARD, 0, 0};
  expect_reject(&sc, "three-stage cycle",
                "stage 0 at action 2 backward(0) waits for backward(0) on stage 1",
                "stage 2 at action 1 forward(1) waits for forward(1) on stage 1");
  CHECK(strstr(gp_error_message(),
               "stage 1 at action 1 backward(0) waits for backward(0) on stage 2") != NULL,
        "three-stage cycle: stage 1 not named: \"%s\"", gp_error_message());
  gp_schedule_free(&sc);

  /* stage 0 of a 1F1B list consumes B1 before B0 while stage 1 sends them in order: not a
   * deadlock (the gradients are buffered), so it must validate */
  sc = build(GP_SCHED_1F1B, GP_REMAT_NEVER, 2, 2); /* stage 0: F0 F1 B0 B1 */
  swap(sc.actions[0], 2, 3);
  CHECK(gp_schedule_validate(&sc) == GP_OK, "reordered consumer rejected: %s", gp_error_message());
  gp_schedule_free(&sc);
}

static void test_malformed(void) {
  gp_schedule sc = build(GP_SCHED_GPIPE, GP_REMAT_NEVER, 3, 3); /* F0 F1 F2 B2 B1 B0 S */
  sc.actions[2][4].micro = 2;
  expect_reject(&sc, "backward twice", "stage 2: backward(2) appears twice", NULL);
  sc.actions[2][4].micro = 1;

  sc.actions[1][1].micro = 3;
  expect_reject(&sc, "micro out of range", "stage 1: action 1 forward(3): micro-batch out of range",
                NULL);
  sc.actions[1][1].micro = -1;
  expect_reject(&sc, "negative micro", "out of range", NULL);
  sc.actions[1][1].micro = 1;

  swap(sc.actions[0], 5, 6);
  expect_reject(&sc, "step not last", "stage 0: step at action 5 is not last", NULL);
  swap(sc.actions[0], 5, 6);

  sc.n_actions[2]--; /* drops the step */
  expect_reject(&sc, "no step", "stage 2: the last action is not the step", NULL);
  sc.n_actions[2] -= 1; /* and B0: the step back in place at index 5 */
  sc.actions[2][5] = (gp_action){GP_A_STEP, 0, 0};
  sc.n_actions[2] = 6;
  expect_reject(&sc, "missing backward", "stage 2: backward(0) is missing", NULL);
  sc.actions[2][5] = (gp_action){GP_A_BACKWARD, 0, 0};
  sc.n_actions[2] = 7;
  CHECK(gp_schedule_validate(&sc) == GP_OK, "restored list rejected: %s", gp_error_message());

  sc.actions[1][0].recompute = 1; /* drops F0's activations, but B0 does not recompute */
  expect_reject(&sc, "recompute mismatch", "stage 1: forward(0) and backward(0) disagree", NULL);
  sc.actions[1][0].recompute = 0;

  sc.actions[0][2].kind = (gp_action_kind)42;
  expect_reject(&sc, "unknown kind", "stage 0: action 2 has unknown kind 42", NULL);
  sc.actions[0][2].kind = GP_A_WEIGHT; /* a split backward's W needs its B before it */
  expect_reject(&sc, "weight action", "stage 0: weight(2) at action 2 before its backward", NULL);
  sc.actions[0][2].kind = GP_A_RECOMPUTE; /* R and T are the executor's timing, not actions */
  expect_reject(&sc, "recompute action", "stage 0: action 2 is a recompute, which no schedule",
                NULL);
  sc.actions[0][2].kind = GP_A_FORWARD;

  sc.micro = 0;
  expect_reject(&sc, "zero micro", "bad shape", NULL);
  sc.micro = 3;
  CHECK(gp_schedule_validate(&sc) == GP_OK, "restored list rejected: %s", gp_error_message());
  gp_schedule_free(&sc);
}

int main(void) {
  test_bad_arguments();
  test_lists();
  test_no_recompute_one_in_flight();
  test_slot_check_can_fail();
  test_deadlocks();
  test_malformed();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
