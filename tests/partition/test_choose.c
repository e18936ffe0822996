/* schedule: auto (core/plan/choose.h) on random unit costs: the choice is the fastest
 * simulated candidate within the tie allowance, a tie goes to the smaller memory, each
 * candidate's figures are its own partition's (solved, or on a given split; interleaved at each
 * V on its own split of K V chunks, a device's chunks within its limit together), what no
 * candidate can run is refused with the first candidate's reason, and the text names them.
 * Then a balanced model whose bubble interleaved shrinks (it wins), the same under a limit its
 * devices' chunks pass (it is left out), and across processes on FLOPs (left out). */
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

/* Device d of K's chunks (d, d + K, ..) together. */
static double device_mem(const gp_partition *p, int K, int d) {
  double m = 0;
  for (int s = d; s < p->stages; s += K)
    m += p->memory[s];
  return m;
}

static int devices_fit(const gp_partition *p, int K, const double *lim) {
  for (int d = 0; lim && d < K; d++)
    if (lim[d] > 0 && device_mem(p, K, d) > lim[d]) return 0;
  return 1;
}

/* Interleaved candidate j (V = ch->chunks[j]), recomputed: it runs where V, M and the request
 * allow, on the partitioner's split of K V chunks: the fastest when each device's chunks fit
 * its limit together, else the fastest with each chunk in a V-th of it; its figures those. */
static void check_interleaved(const inst *in, const int *first, const gp_schedule_choice *ch,
                              const gp_partition *got, int i, int j) {
  const int K = in->r.stages, V = ch->chunks[j], n = in->c.n;
  CHECK(ch->kind[j] == GP_SCHED_INTERLEAVED && V >= 2 && V <= GP_CHOOSE_V,
        "instance %d: candidate %d has %d chunks", i, j, V);
  int can = !first && K >= 2 && K * V <= n && in->r.micro % K == 0 &&
            in->r.remat != GP_REMAT_ALWAYS && in->r.remat != GP_REMAT_EXCEPT_LAST &&
            (in->r.procs < 2 || gp_partition_charges_handoffs(&in->r));
  gp_partition_req q = {.stages = K * V,
                        .micro = in->r.micro,
                        .schedule = GP_SCHED_INTERLEAVED,
                        .remat = GP_REMAT_NEVER,
                        .bytes_per_s = in->r.bytes_per_s,
                        .optim_slots = in->r.optim_slots,
                        .chunks = V};
  gp_partition p;
  double lim[12];
  if (can) can = gp_partition_solve(&in->c, &q, &p) == GP_OK;
  if (can && !devices_fit(&p, K, in->r.mem_limit)) {
    for (int s = 0; s < K * V; s++)
      lim[s] = in->r.mem_limit[s % K] / V;
    q.mem_limit = lim;
    can = gp_partition_solve(&in->c, &q, &p) == GP_OK && devices_fit(&p, K, in->r.mem_limit);
  }
  gp_error_clear();
  CHECK(can == ch->runs[j], "instance %d: interleaved V=%d runs %d, its partition says %d", i, V,
        ch->runs[j], can);
  if (!can || !ch->runs[j]) {
    CHECK(ch->chosen != j && ch->why[j][0], "instance %d: interleaved V=%d refused, no reason", i,
          V);
    return;
  }
  double most = 0;
  for (int d = 0; d < K; d++)
    most = fmax(most, device_mem(&p, K, d));
  CHECK(p.makespan == ch->step[j] && most == ch->memory[j],
        "instance %d: interleaved V=%d step %g memory %g, its partition's %g, %g", i, V,
        ch->step[j], ch->memory[j], p.makespan, most);
  CHECK(ch->step[j] >= ch->step[ch->chosen] * (1 - 5e-3) - 1e-12,
        "instance %d: interleaved V=%d (%g) beats the choice (%g)", i, V, ch->step[j],
        ch->step[ch->chosen]);
  if (j == ch->chosen)
    CHECK(got->stages == K * V && memcmp(p.first, got->first, sizeof p.first) == 0,
          "instance %d: the partition returned is not interleaved V=%d's", i, V);
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
  CHECK(ch->n == named - 1 + GP_CHOOSE_V - 1, "instance %d: %d candidates for %d names", i, ch->n,
        named);
  const int b = ch->chosen, K = in->r.stages;
  for (int j = 0; j < ch->n; j++) {
    gp_partition_req q = in->r;
    q.schedule = ch->kind[j];
    if (ch->chunks[j] > 1) {
      check_interleaved(in, first, ch, got, i, j);
      continue;
    }
    CHECK(q.schedule != GP_SCHED_INTERLEAVED, "instance %d: interleaved at V = %d", i,
          ch->chunks[j]);
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
    for (int k = 0; s == GP_OK && first && in->r.mem_limit && k < K; k++) /* not fitted: checked */
      if (in->r.mem_limit[k] > 0 && p.memory[k] > in->r.mem_limit[k]) s = GP_ERR_USAGE;
    gp_error_clear();
    CHECK((s == GP_OK) == ch->runs[j], "instance %d: %s runs %d, solver says %d", i,
          names[ch->kind[j]], ch->runs[j], s == GP_OK);
    if (s != GP_OK || !ch->runs[j]) continue;
    double most = 0;
    for (int k = 0; k < K; k++)
      most = fmax(most, p.memory[k]);
    CHECK(p.makespan == ch->step[j] && most == ch->memory[j],
          "instance %d: %s step %g memory %g, its partition's %g, %g", i, names[ch->kind[j]],
          ch->step[j], ch->memory[j], p.makespan, most);
    CHECK(ch->step[j] >= ch->step[b] * (1 - 5e-3) - 1e-12, "instance %d: %s (%g) beats %s (%g)", i,
          names[ch->kind[j]], ch->step[j], names[ch->kind[b]], ch->step[b]);
    if (j == b)
      CHECK(memcmp(p.first, got->first, sizeof p.first) == 0 && p.makespan == got->makespan,
            "instance %d: the partition returned is not the choice's", i);
  }
}

/* The least memory any split of n units into K V chunks (interleaved) needs on its fullest
 * device, all splits tried: first[] the starts of chunks 0 .. at - 1 so far. */
static double least_device_mem(const inst *in, const gp_partition_req *q, int *first, int at,
                               double best) {
  const int KV = q->stages, K = KV / q->chunks, n = in->c.n;
  if (at == KV) {
    gp_partition p;
    first[KV] = n;
    if (gp_partition_evaluate(&in->c, q, first, &p) != GP_OK) return best;
    double most = 0;
    for (int d = 0; d < K; d++)
      most = fmax(most, device_mem(&p, K, d));
    return fmin(best, most);
  }
  for (int u = first[at - 1] + 1; u <= n - (KV - at); u++) {
    first[at] = u;
    best = least_device_mem(in, q, first, at + 1, best);
  }
  return best;
}

/* 12 like units on K = 3 stages, M = 3: 1F1B idles 40% of the step, the zero-bubble lists
 * fill all but about 5% of it (W is a third of a unit's work), interleaved at V = 4 (a unit a
 * chunk) shrinks the fill and drain 4 times: it wins. Unless a limit below what any split
 * of its chunks needs on a device, or a run across processes whose hand-offs cannot be charged
 * (costs of no known seconds), leaves it out. */
static void balanced(gp_schedule_choice *ch) {
  inst in;
  gp_rng g;
  gp_rng_seed(&g, 1);
  make(&in, &g, 12, 3);
  for (int u = 0; u < 12; u++) {
    in.fwd[u] = 1, in.bwd[u] = 2, in.params[u] = 100, in.act[u] = 1000, in.out[u] = 10;
    in.cut[u] = 10;
  }
  in.r = (gp_partition_req){.stages = 3, .micro = 3, .remat = GP_REMAT_AUTO, .optim_slots = 1};
  gp_partition p;
  char buf[320];
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, ch, &p) == GP_OK, "balanced");
  gp_schedule_choice_str(ch, buf, sizeof buf);
  printf("balanced, K = 3, M = 3: %s\n", buf);
  const int won = ch->chosen;
  CHECK(ch->kind[won] == GP_SCHED_INTERLEAVED && ch->chunks[won] == 4 && p.stages == 12 &&
            strncmp(buf, "interleaved V=4 (simulated step 1.00;", 37) == 0,
        "balanced: %s", buf);
  for (int j = 0; j < ch->n; j++)
    CHECK(ch->runs[j] && (j == won || ch->step[j] > ch->step[won] * (1 + 5e-3)),
          "balanced: candidate %d (%d chunks) runs %d at %g against %g", j, ch->chunks[j],
          ch->runs[j], ch->step[j], ch->step[won]);

  /* a limit under the least any split of interleaved's chunks needs on a device, at each V */
  double least = INFINITY;
  for (int v = 2; v <= GP_CHOOSE_V; v++) {
    gp_partition_req q = {.stages = 3 * v,
                          .micro = 3,
                          .schedule = GP_SCHED_INTERLEAVED,
                          .remat = GP_REMAT_NEVER,
                          .optim_slots = 1,
                          .chunks = v};
    int first[13] = {0};
    least = fmin(least, least_device_mem(&in, &q, first, 1, INFINITY));
  }
  in.lim[0] = in.lim[1] = in.lim[2] = least * 0.999;
  in.r.mem_limit = in.lim;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, ch, &p) == GP_OK, "balanced, limited");
  gp_schedule_choice_str(ch, buf, sizeof buf);
  printf("balanced, limit %.0f bytes a stage: %s\n", in.lim[0], buf);
  CHECK(ch->kind[ch->chosen] != GP_SCHED_INTERLEAVED && p.stages == 3 &&
            strstr(buf, "; interleaved cannot run"),
        "balanced, limited: %s", buf);
  for (int d = 0; d < 3; d++)
    CHECK(p.memory[d] <= in.lim[d], "balanced, limited: stage %d needs %g", d, p.memory[d]);
  for (int j = 0; j < ch->n; j++)
    CHECK(ch->chunks[j] == 1 || (!ch->runs[j] && strstr(ch->why[j], "fits")),
          "balanced, limited: interleaved V=%d runs (%s)", ch->chunks[j], ch->why[j]);

  /* across processes on costs whose seconds are not known (FLOPs): the hand-offs cannot be
   * charged, so interleaved is left out (test_choose_procs: charged on measured times) */
  in.r.mem_limit = NULL;
  in.r.procs = 3;
  in.r.link_latency_s = 2e-6, in.r.link_bytes_per_s = 10e9;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, ch, &p) == GP_OK, "balanced, processes");
  gp_schedule_choice_str(ch, buf, sizeof buf);
  CHECK(ch->kind[ch->chosen] != GP_SCHED_INTERLEAVED && strstr(buf, "; interleaved cannot run") &&
            !strstr(buf, "V="),
        "balanced, processes: %s", buf);
  for (int j = 0; j < ch->n; j++)
    CHECK(ch->chunks[j] == 1 ||
              strstr(ch->why[j], "interleaved across processes is weighed on unit times"),
          "balanced, processes: '%s'", ch->why[j]);
}

int main(void) {
  gp_rng g;
  gp_rng_seed(&g, 7);
  int with_ties = 0, ran = 0, limited = 0, inter_ran = 0, inter_won = 0;
  for (int i = 0; i < 300; i++) {
    inst in;
    int n = 3 + (int)gp_rng_below(&g, 8), k = 1 + (int)gp_rng_below(&g, n < 5 ? n : 5);
    make(&in, &g, n, k);
    if (gp_rng_below(&g, 2)) { /* what interleaved takes */
      in.r.micro = k * (1 + (int)gp_rng_below(&g, 3));
      in.r.remat = GP_REMAT_NEVER;
    }
    int first[7], given = (int)gp_rng_below(&g, 3) == 0;
    for (int s = 0; s <= k; s++)
      first[s] = s * n / k; /* an even split, given to a third of the instances */
    gp_schedule_choice ch;
    gp_partition p;
    gp_status s = gp_schedule_choose(&in.c, &in.r, given ? first : NULL, &ch, &p);
    if (s == GP_OK && gp_rng_below(&g, 2)) { /* a limit some candidates fit: the least does */
      double lo = INFINITY, hi = 0;
      for (int j = 0; j < ch.n; j++)
        if (ch.runs[j]) lo = fmin(lo, ch.memory[j]), hi = fmax(hi, ch.memory[j]);
      for (int d = 0; d < k; d++)
        in.lim[d] = lo + (hi - lo) * (double)gp_rng_below(&g, 100) / 100;
      in.r.mem_limit = in.lim;
      limited++;
      s = gp_schedule_choose(&in.c, &in.r, given ? first : NULL, &ch, &p);
    }
    CHECK(s == GP_OK, "instance %d", i);
    if (s != GP_OK) continue;
    ran++;
    for (int j = 0; j < ch.n; j++)
      inter_ran += ch.chunks[j] > 1 && ch.runs[j], inter_won += ch.chunks[j] > 1 && j == ch.chosen;
    check_choice(&in, given ? first : NULL, &ch, &p, i);
    for (int j = 0; j < ch.n; j++) /* a near tie: the choice needs no more memory */
      if (j != ch.chosen && ch.runs[j] &&
          fabs(ch.step[j] - ch.step[ch.chosen]) <= 5e-3 * ch.step[ch.chosen]) {
        with_ties++;
        CHECK(ch.memory[ch.chosen] <= ch.memory[j] || ch.step[ch.chosen] < ch.step[j] * (1 - 5e-3),
              "instance %d: a tie went to the larger memory", i);
      }
  }
  CHECK(ran == 300 && with_ties > 10 && limited > 50 && inter_ran > 50 && inter_won > 0,
        "%d instances chosen, %d with near ties, %d limited; interleaved ran %d times, won %d", ran,
        with_ties, limited, inter_ran, inter_won);

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
  balanced(&ch);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
