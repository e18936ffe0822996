/* schedule: auto (core/plan/choose.h) on random unit costs: the choice is the fastest
 * simulated candidate within the tie allowance, a tie goes to the smaller memory, each
 * candidate's figures are its own partition's (solved, or on a given split), what no
 * candidate can run is refused with the first candidate's reason, and the text names them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/choose.h"
#include "core/plan/plan.h"
#include "core/rng.h"
#include "tests/support/check.h"

static int failures, passes;

typedef struct inst {
  gp_unit_costs c;
  double fwd[12], bwd[12], fwd_flops[12], bwd_flops[12];
  int64_t params[12], act[12], out[12], cut[13];
  double lim[6];
  gp_partition_req r;
} inst;

static void make(inst *in, gp_rng *g, int n, int k) {
  memset(in, 0, sizeof *in);
  for (int u = 0; u < n; u++) {
    in->fwd[u] = 1 + (double)gp_rng_below(g, 20);
    in->bwd[u] = 1 + (double)gp_rng_below(g, 40);
    in->params[u] = (int64_t)gp_rng_below(g, 1000);
    in->act[u] = 1 + (int64_t)gp_rng_below(g, 5000);
    in->out[u] = 1 + (int64_t)gp_rng_below(g, 500);
  }
  for (int u = 0; u <= n; u++)
    in->cut[u] = u == n ? 0 : 1 + (int64_t)gp_rng_below(g, 800);
  in->c = (gp_unit_costs){.n = n,
                          .micro_batch = 4,
                          .by = GP_COST_FLOPS,
                          .fwd = in->fwd,
                          .bwd = in->bwd,
                          .fwd_flops = in->fwd_flops,
                          .bwd_flops = in->bwd_flops,
                          .params = in->params,
                          .act_bytes = in->act,
                          .out_bytes = in->out,
                          .cut_bytes = in->cut};
  in->r = (gp_partition_req){.stages = k,
                             .micro = 1 + (int)gp_rng_below(g, 8),
                             .remat = (gp_remat)gp_rng_below(g, 3),
                             .bytes_per_s = gp_rng_below(g, 2) ? 64.0 : 0.0,
                             .optim_slots = (double)gp_rng_below(g, 3)};
}

/* Every candidate's own figures, recomputed: the choice must be the fastest within 0.5%, and
 * among those within 0.5% of it none may need less memory... as the rule reads: no runnable
 * candidate faster than the choice by more than the allowance. */
static void check_choice(const inst *in, const int *first, const gp_schedule_choice *ch,
                         const gp_partition *got, int i) {
  const char *const *names = gp_schedule_names();
  int named = 0;
  while (names[named])
    named++;
  CHECK(ch->n == named, "instance %d: %d candidates for %d names", i, ch->n, named);
  const int b = ch->chosen;
  for (int j = 0; j < ch->n; j++) {
    gp_partition_req q = in->r;
    q.schedule = ch->kind[j];
    int zb = gp_schedule_keeps_all(q.schedule);
    if (zb && (in->r.remat == GP_REMAT_ALWAYS || in->r.remat == GP_REMAT_EXCEPT_LAST)) {
      CHECK(!ch->runs[j], "instance %d: %s runs under remat %d", i, names[q.schedule], in->r.remat);
      continue;
    }
    q.remat = ch->remat[j];
    CHECK(q.remat == (zb ? GP_REMAT_NEVER : in->r.remat), "instance %d: %s with remat %d", i,
          names[q.schedule], q.remat);
    gp_partition p;
    gp_status s =
        first ? gp_partition_evaluate(&in->c, &q, first, &p) : gp_partition_solve(&in->c, &q, &p);
    gp_error_clear();
    CHECK((s == GP_OK) == ch->runs[j], "instance %d: %s runs %d, solver says %d", i,
          names[ch->kind[j]], ch->runs[j], s == GP_OK);
    if (s != GP_OK || !ch->runs[j]) continue;
    CHECK(p.makespan == ch->step[j], "instance %d: %s step %g, its partition's %g", i,
          names[ch->kind[j]], ch->step[j], p.makespan);
    CHECK(ch->step[j] >= ch->step[b] * (1 - 5e-3) - 1e-12, "instance %d: %s (%g) beats %s (%g)", i,
          names[ch->kind[j]], ch->step[j], names[ch->kind[b]], ch->step[b]);
    if (j == b)
      CHECK(memcmp(p.first, got->first, sizeof p.first) == 0 && p.makespan == got->makespan,
            "instance %d: the partition returned is not the choice's", i);
  }
}

int main(void) {
  gp_rng g;
  gp_rng_seed(&g, 7);
  int with_ties = 0, ran = 0;
  for (int i = 0; i < 300; i++) {
    inst in;
    int n = 3 + (int)gp_rng_below(&g, 8), k = 1 + (int)gp_rng_below(&g, n < 5 ? n : 5);
    make(&in, &g, n, k);
    int first[7], given = (int)gp_rng_below(&g, 3) == 0;
    for (int s = 0; s <= k; s++)
      first[s] = s * n / k; /* an even split, given to a third of the instances */
    gp_schedule_choice ch;
    gp_partition p;
    gp_status s = gp_schedule_choose(&in.c, &in.r, given ? first : NULL, &ch, &p);
    CHECK(s == GP_OK, "instance %d", i);
    if (s != GP_OK) continue;
    ran++;
    check_choice(&in, given ? first : NULL, &ch, &p, i);
    for (int j = 0; j < ch.n; j++) /* a near tie: the choice needs no more memory */
      if (j != ch.chosen && ch.runs[j] &&
          fabs(ch.step[j] - ch.step[ch.chosen]) <= 5e-3 * ch.step[ch.chosen]) {
        with_ties++;
        CHECK(ch.memory[ch.chosen] <= ch.memory[j] || ch.step[ch.chosen] < ch.step[j] * (1 - 5e-3),
              "instance %d: a tie went to the larger memory", i);
      }
  }
  CHECK(ran == 300 && with_ties > 10, "%d instances chosen, %d with near ties", ran, with_ties);

  /* a limit no candidate fits: the first candidate's reason, one line */
  inst in;
  make(&in, &g, 6, 2);
  in.lim[0] = in.lim[1] = 10;
  in.r.mem_limit = in.lim;
  gp_schedule_choice ch;
  gp_partition p;
  gp_error_clear();
  gp_status s = gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p);
  CHECK(s != GP_OK && strstr(gp_error_message(), "fits the limit") && ch.chosen < 0,
        "nothing fits: %d", s);

  /* the text: the choice, then the others relative to it */
  in.r.mem_limit = NULL;
  in.r.micro = 8;
  in.r.remat = GP_REMAT_EXCEPT_LAST;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p) == GP_OK, "text");
  char buf[320];
  gp_schedule_choice_str(&ch, buf, sizeof buf);
  const char *chosen = gp_schedule_names()[ch.kind[ch.chosen]];
  CHECK(strncmp(buf, chosen, strlen(chosen)) == 0 && strstr(buf, "(simulated step 1.00") &&
            buf[strlen(buf) - 1] == ')',
        "text '%s'", buf);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
