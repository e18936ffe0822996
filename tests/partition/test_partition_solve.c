/* The partitioner's solver against brute force: on random small instances (N <= 12 units,
 * K <= 5 stages, random costs, uneven device speeds, transfers, memory limits that are often
 * impossible, both schedules and every re-materialization mode) the solver's slowest stage
 * equals the best over all splits, its spread is the best among the optimal splits, it is
 * infeasible exactly when no split fits, and the limit its message names does fit. Plus the
 * evaluation's predictions on hand-checkable cases and the refusals of bad requests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/arena.h"
#include "core/plan/solve.h"
#include "tests/support/check.h"

static int failures, passes;

/* Costs are small integers and speeds and bandwidths are exact binary fractions, so every
 * stage time is computed exactly whatever the summation order: brute force and the solver
 * must then agree to the bit. Spreads may differ by the solver's tie allowance (1e-12 of the
 * optimum) at most. */
#define SPREAD_TOL 1e-11

typedef struct inst {
  gp_unit_costs c;
  double fwd[16], bwd[16], fwd_flops[16], bwd_flops[16];
  int64_t params[16], act[16], out[16], cut[17];
  double speed[8], lim[8];
  gp_partition_req r;
} inst;

static void make(inst *in, gp_rng *g, int n, int k) {
  memset(in, 0, sizeof *in);
  static const double speeds[] = {0.5, 0.75, 1, 1, 1.25, 1.5, 2};
  for (int u = 0; u < n; u++) {
    in->fwd[u] = (double)gp_rng_below(g, 20);
    in->bwd[u] = (double)gp_rng_below(g, 40);
    in->params[u] = (int64_t)gp_rng_below(g, 1000);
    in->act[u] = (int64_t)gp_rng_below(g, 5000);
    in->out[u] = (int64_t)gp_rng_below(g, 500);
  }
  for (int u = 0; u <= n; u++)
    in->cut[u] = u == n ? 0 : (int64_t)gp_rng_below(g, 800);
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
  for (int s = 0; s < k; s++)
    in->speed[s] = speeds[gp_rng_below(g, 7)];
  in->r = (gp_partition_req){.stages = k,
                             .micro = 1 + (int)gp_rng_below(g, 8),
                             .schedule = gp_rng_below(g, 2) ? GP_SCHED_1F1B : GP_SCHED_GPIPE,
                             .remat = (gp_remat)gp_rng_below(g, 3),
                             .speed = gp_rng_below(g, 3) ? in->speed : NULL,
                             .bytes_per_s = gp_rng_below(g, 2) ? 64.0 : 0.0,
                             .optim_slots = (double)gp_rng_below(g, 3)};
  if (gp_rng_below(g, 4)) {
    /* limits around what a stage of a few units needs: from generous to impossible */
    for (int s = 0; s < k; s++)
      in->lim[s] = gp_rng_below(g, 5) ? 2000.0 + (double)gp_rng_below(g, 60000) : 0.0;
    in->r.mem_limit = in->lim;
  }
}

/* The model the solver documents, written out directly: brute force's own arithmetic. */
static void stage_eval(const inst *in, int K, int s, int a, int b, double *time, double *mem) {
  const gp_partition_req *r = &in->r;
  double f = 0, bw = 0, p = 0, act = 0, big = 0;
  for (int u = b - 1; u >= a; u--) {
    f += in->fwd[u];
    bw += in->bwd[u];
    p += (double)in->params[u];
    act += (double)in->act[u];
    big = fmax(big, (double)in->act[u]);
  }
  double sp = r->speed ? r->speed[s] : 1.0;
  double fl = r->schedule == GP_SCHED_1F1B ? fmin(r->micro, K - s) : r->micro;
  /* except_last re-materializes nothing where one micro-batch at most is in flight */
  int rm = r->remat == GP_REMAT_ALWAYS || (r->remat == GP_REMAT_EXCEPT_LAST && fl > 1);
  *time = (f + bw + (rm ? f : 0)) / sp;
  if (r->bytes_per_s > 0)
    *time += (double)((a > 0 ? in->cut[a] : 0) + (b < in->c.n ? in->cut[b] : 0)) / r->bytes_per_s;
  double out = b < in->c.n ? (double)in->cut[b] : 0.0; /* the outputs' gradient buffers */
  /* with re-materialization the recomputed set, and under except_last (M >= 2) the kept
   * micro-batch's too: its slot keeps that size */
  double copies = r->remat == GP_REMAT_EXCEPT_LAST && r->micro > 1 ? 2.0 : 1.0;
  *mem = 4.0 * p * (2.0 + r->optim_slots) + big + fl * out +
         (!rm ? fl * act : fl * ((double)in->cut[a] + out) + copies * act);
}

typedef struct brute {
  int feasible;
  double opt, spread; /* best max; best spread among splits with max == opt */
  double min_mem_max; /* smallest largest stage memory over all splits (no limits) */
} brute;

static void brute_rec(const inst *in, const double *limits, int K, int s, int a, double mx,
                      double mn, double mm, int ok, double *maxes, double *spreads, double *mems,
                      int *oks, int *cnt) {
  int n = in->c.n;
  if (s == K) {
    maxes[*cnt] = mx;
    spreads[*cnt] = mx - mn;
    mems[*cnt] = mm;
    oks[*cnt] = ok;
    (*cnt)++;
    return;
  }
  int hi = s == K - 1 ? n : n - (K - 1 - s);
  for (int b = s == K - 1 ? n : a + 1; b <= hi; b++) {
    double t, m;
    stage_eval(in, K, s, a, b, &t, &m);
    double lim = limits ? limits[s] : 0;
    brute_rec(in, limits, K, s + 1, b, fmax(mx, t), fmin(mn, t), fmax(mm, m),
              ok && (lim <= 0 || m <= lim), maxes, spreads, mems, oks, cnt);
  }
}

/* Every split of the units into K stages, under limits (NULL: none). */
static brute brute_force(const inst *in, int K, const double *limits) {
  static double maxes[5000], spreads[5000], mems[5000];
  static int oks[5000];
  int cnt = 0;
  brute_rec(in, limits, K, 0, 0, 0, INFINITY, 0, 1, maxes, spreads, mems, oks, &cnt);
  brute br = {0, INFINITY, INFINITY, INFINITY};
  for (int i = 0; i < cnt; i++) {
    br.min_mem_max = fmin(br.min_mem_max, mems[i]);
    if (!oks[i]) continue;
    br.feasible = 1;
    br.opt = fmin(br.opt, maxes[i]);
  }
  for (int i = 0; i < cnt; i++)
    if (oks[i] && maxes[i] == br.opt) br.spread = fmin(br.spread, spreads[i]);
  return br;
}

/* "... 3 stages need at least 12.34 KiB per device ..." (1 stage needs) -> bytes. */
static double needed_from_message(const char *msg) {
  const char *p = strstr(msg, " at least ");
  if (!p) return -1;
  double v;
  char unit[16];
  if (sscanf(p + strlen(" at least "), "%lf %15s", &v, unit) != 2) return -1;
  static const char *const names[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double scale = 1;
  for (int i = 0; i < 5; i++, scale *= 1024)
    if (strcmp(unit, names[i]) == 0) return v * scale;
  return -1;
}

static void random_instances(void) {
  gp_rng g;
  gp_rng_seed(&g, 7);
  int infeasible = 0, feasible = 0;
  for (int it = 0; it < 3000; it++) {
    int n = 1 + (int)gp_rng_below(&g, 12);
    int k = 1 + (int)gp_rng_below(&g, n < 5 ? (uint64_t)n : 5);
    inst in;
    make(&in, &g, n, k);
    brute br = brute_force(&in, k, in.r.mem_limit);
    gp_partition p;
    gp_error_clear();
    gp_status s = gp_partition_solve(&in.c, &in.r, &p);
    CHECK((s == GP_OK) == br.feasible, "instance %d (n=%d k=%d): solver %s, brute force %s", it, n,
          k, s == GP_OK ? "found a split" : "found none", br.feasible ? "did" : "did not");
    if (s == GP_OK && br.feasible) {
      feasible++;
      CHECK(p.max_time == br.opt, "instance %d: max %.17g, brute force %.17g", it, p.max_time,
            br.opt);
      CHECK(fabs(p.spread - br.spread) <= SPREAD_TOL * fmax(1.0, br.opt),
            "instance %d: spread %.17g, best among optimal %.17g", it, p.spread, br.spread);
      /* the split it reports is the one it was scored on, and meets the limits */
      int okf = p.stages == k && p.first[0] == 0 && p.first[k] == n;
      double mx = 0;
      for (int st = 0; st < k && okf; st++) {
        okf = p.first[st + 1] > p.first[st];
        double t, m;
        if (!okf) break;
        stage_eval(&in, k, st, p.first[st], p.first[st + 1], &t, &m);
        okf = t == p.time[st] && m == p.memory[st] &&
              (!in.r.mem_limit || in.lim[st] <= 0 || m <= in.lim[st]);
        mx = fmax(mx, t);
      }
      CHECK(okf && mx == p.max_time, "instance %d: the split's own times/memory disagree", it);
    } else if (s != GP_OK && !br.feasible) {
      infeasible++;
      CHECK(s == GP_ERR_USAGE, "instance %d: infeasible is a usage error, got %d", it, (int)s);
      double need = needed_from_message(gp_error_message());
      CHECK(need >= br.min_mem_max, "instance %d: message names %.17g, smallest fitting %.17g", it,
            need, br.min_mem_max);
      /* feed it back: the limit named must fit on every device */
      double lim2[8];
      for (int st = 0; st < k; st++)
        lim2[st] = need;
      gp_partition_req r2 = in.r;
      r2.mem_limit = lim2;
      gp_partition p2;
      CHECK(gp_partition_solve(&in.c, &r2, &p2) == GP_OK, "instance %d: named limit %.17g fails",
            it, need);
      /* rounded up to 0.01 of its unit (KiB here: 10.24 bytes) at most */
      CHECK(need <= br.min_mem_max * 1.01 + 11,
            "instance %d: named limit %.17g is far above the smallest %.17g", it, need,
            br.min_mem_max);
      /* the smallest K that fits the tightest limit on every device, or none */
      double tight = INFINITY;
      for (int st = 0; st < k; st++)
        if (in.lim[st] > 0) tight = fmin(tight, in.lim[st]);
      int smallest = 0;
      for (int k2 = 1; k2 <= n && !smallest; k2++) {
        double lim3[16];
        for (int st = 0; st < k2; st++)
          lim3[st] = tight;
        gp_partition_req r3 = in.r;
        r3.stages = k2;
        r3.speed = NULL; /* only k entries; memory does not depend on speed */
        inst in3 = in;
        in3.r = r3;
        if (brute_force(&in3, k2, lim3).feasible) smallest = k2;
      }
      const char *msg = gp_error_message();
      char want[64];
      if (smallest)
        snprintf(want, sizeof want, "; %d stage%s fit ", smallest, smallest > 1 ? "s" : "");
      else
        snprintf(want, sizeof want, "; no number of stages up to %d fits ", n);
      CHECK(strstr(msg, want) != NULL, "instance %d: message lacks '%s'", it, want);
    }
  }
  CHECK(infeasible > 100 && feasible > 1000, "too few of a kind: %d infeasible, %d feasible",
        infeasible, feasible);
}

static void refusals(void) {
  inst in;
  gp_rng g;
  gp_rng_seed(&g, 3);
  make(&in, &g, 6, 3);
  in.r.mem_limit = NULL;
  gp_partition p;
  in.r.stages = 7;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE &&
            strstr(gp_error_message(), "cannot cut 6 units into 7 stages (1..6)"),
        "K > N");
  in.r.stages = 0;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE &&
            strstr(gp_error_message(), "cannot cut 6 units into 0 stages"),
        "K = 0");
  in.r.stages = 3;
  in.r.micro = 0;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE, "M = 0");
  in.r.micro = 2;
  double bad_speed[3] = {1, 0, 1};
  in.r.speed = bad_speed;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE, "zero speed");
  /* a stage time that overflows is named, not reported as a memory limit no split meets */
  double tiny_speed[3] = {1, 1e-300, 1};
  in.r.speed = tiny_speed;
  in.fwd[2] = 1e10;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE &&
            strstr(gp_error_message(), "stage times overflow"),
        "overflowing stage time");
  in.fwd[2] = 1;
  in.r.speed = NULL;
  in.fwd[2] = NAN;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE, "NaN cost");
  in.fwd[2] = 1;
  int bad_first[4] = {0, 3, 3, 6};
  CHECK(gp_partition_evaluate(&in.c, &in.r, bad_first, &p) == GP_ERR_USAGE, "empty stage");
  int good_first[4] = {0, 2, 4, 6};
  CHECK(gp_partition_evaluate(&in.c, &in.r, good_first, &p) == GP_OK, "valid split");
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_OK, "valid request");
}

/* Hand-checkable predictions: equal units, no transfers, no recompute. */
static void predictions(void) {
  inst in;
  gp_rng g;
  gp_rng_seed(&g, 5);
  make(&in, &g, 8, 4);
  for (int u = 0; u < 8; u++)
    in.fwd[u] = 1, in.bwd[u] = 2;
  in.r = (gp_partition_req){
      .stages = 4, .micro = 8, .schedule = GP_SCHED_GPIPE, .remat = GP_REMAT_NEVER};
  gp_partition p;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_OK, "solve equal units");
  int even = 1;
  for (int s = 0; s < 4; s++)
    even &= p.first[s] == 2 * s && p.time[s] == 6;
  CHECK(even && p.spread == 0 && p.imbalance == 1, "equal units split evenly");
  /* GPipe, K stages of time (f, b) = (2, 4), M micro-batches: (M + K - 1) (f + b) */
  double mk = (8 + 4 - 1) * 6.0;
  CHECK(fabs(p.bubble - (1 - 4 * 8 * 6.0 / (4 * mk))) < 1e-12, "bubble %.17g", p.bubble);
  CHECK(fabs(p.speedup_k1 - 8 * 24.0 / mk) < 1e-12, "speedup over one stage %.17g", p.speedup_k1);
  /* M = 1 with the whole batch: K (8 f + 8 b) one stage after another */
  CHECK(fabs(p.speedup_naive - 4 * 8 * 6.0 / mk) < 1e-12, "speedup over naive %.17g",
        p.speedup_naive);
  /* the baselines never re-materialize (gpipe-bench's): the recompute lowers both speed-ups,
   * and with equal speeds and free transfers naive-K and one stage take the same time */
  double plain = p.speedup_naive;
  for (int mode = 0; mode < 2; mode++) {
    in.r.remat = mode ? GP_REMAT_EXCEPT_LAST : GP_REMAT_ALWAYS;
    in.r.stages = mode ? 1 : 4;
    CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_OK, "solve with re-materialization");
    CHECK(fabs(p.speedup_naive - p.speedup_k1) < 1e-12 &&
              p.speedup_naive < (mode ? 1.0 : plain) - 0.05,
          "K=%d %s: %.4gx over naive, %.4gx over one stage (without recompute %.4gx)", in.r.stages,
          mode ? "except_last" : "always", p.speedup_naive, p.speedup_k1, mode ? 1.0 : plain);
  }
  in.r.remat = GP_REMAT_NEVER;
  in.r.stages = 4;
  /* a twice-as-fast device takes twice the work */
  double sp[2] = {2, 1};
  in.r.stages = 2;
  in.r.speed = sp;
  in.r.micro = 1;
  in.c.n = 6;
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_OK && p.first[1] == 4 && p.time[0] == 6 &&
            p.time[1] == 6,
        "speed 2 stage takes 4 of 6 units (got first[1] = %d)", p.first[1]);
  /* 1F1B memory: stage s holds min(M, K - s) micro-batches of activations, and as many
   * buffers for its outputs' gradients (the 50 bytes crossing the cut; the last stage has
   * none) */
  in.r = (gp_partition_req){
      .stages = 2, .micro = 4, .schedule = GP_SCHED_1F1B, .remat = GP_REMAT_NEVER};
  for (int u = 0; u < 6; u++)
    in.params[u] = 0, in.act[u] = 100, in.cut[u] = u == 3 ? 50 : 0;
  int f2[3] = {0, 3, 6};
  CHECK(gp_partition_evaluate(&in.c, &in.r, f2, &p) == GP_OK &&
            p.memory[0] == 2 * 300 + 100 + 2 * 50 && p.memory[1] == 1 * 300 + 100,
        "1f1b memory %.17g %.17g", p.memory[0], p.memory[1]);
  /* measured scratch (--by time): a stage's working set is its units' largest scratch, not an
   * activation's size, and each micro-batch slot's arena chunk counts */
  int64_t scratch[6] = {0, 7000, 300, 0, 0, 0};
  in.c.scratch = scratch;
  CHECK(gp_partition_evaluate(&in.c, &in.r, f2, &p) == GP_OK &&
            p.memory[0] == 2 * 300 + 7000 + 2 * 50 + 2 * (double)GP_ARENA_SMALL_CHUNK &&
            p.memory[1] == 1 * 300 + 0 + (double)GP_ARENA_SMALL_CHUNK,
        "1f1b memory, scratch measured: %.17g %.17g", p.memory[0], p.memory[1]);
  in.c.scratch = NULL;
}

int main(void) {
  random_instances();
  refusals();
  predictions();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
