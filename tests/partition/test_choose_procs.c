/* schedule: auto across processes (core/plan/choose.h, solve.c's send_cost): every candidate's
 * simulation pays latency + bytes / bandwidth on each boundary between two processes, so a fast
 * link leaves interleaved's win as in one process, a slow one (latency or bandwidth) hands it
 * to a plain schedule, and interleaved's step grows with the link as its K V - 1 hand-offs
 * say. Each step is checked against the simulator run here on the split's own costs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/choose.h"
#include "core/schedule/schedule.h"
#include "tests/support/check.h"

static int failures, passes;

#define N 12
#define CUT 10000.0 /* bytes a boundary hands over a micro-batch */

/* Relative slack of a recomputed step against the chooser's: the same sums in another order. */
#define STEP_TOL 1e-9

typedef struct inst {
  gp_unit_costs c;
  double fwd[N], bwd[N], fwd_flops[N], bwd_flops[N];
  int64_t params[N], act[N], out[N], cut[N + 1];
  gp_partition_req r;
} inst;

/* 12 like units in seconds (1 ms forward, 2 ms backward) on K devices at M: interleaved at
 * V = 4 shrinks 1F1B's fill and drain four times in one process (test_choose's `balanced`). */
static void make(inst *in, int K, int M) {
  memset(in, 0, sizeof *in);
  for (int u = 0; u < N; u++) {
    in->fwd[u] = in->fwd_flops[u] = 1e-3;
    in->bwd[u] = in->bwd_flops[u] = 2e-3;
    in->params[u] = 100, in->act[u] = 1000, in->out[u] = 10, in->cut[u] = (int64_t)CUT;
  }
  in->c = (gp_unit_costs){.n = N,
                          .micro_batch = 4,
                          .by = GP_COST_TIME,
                          .fwd = in->fwd,
                          .bwd = in->bwd,
                          .fwd_flops = in->fwd_flops,
                          .bwd_flops = in->bwd_flops,
                          .params = in->params,
                          .act_bytes = in->act,
                          .out_bytes = in->out,
                          .cut_bytes = in->cut};
  in->r = (gp_partition_req){
      .stages = K, .micro = M, .remat = GP_REMAT_AUTO, .optim_slots = 1, .seconds_per_cost = 1};
}

static void link_set(inst *in, int procs, double latency_s, double bytes_per_s) {
  in->r.procs = procs;
  in->r.link_latency_s = latency_s;
  in->r.link_bytes_per_s = bytes_per_s;
}

static int find(const gp_schedule_choice *ch, gp_schedule_kind k, int v) {
  for (int j = 0; j < ch->n; j++)
    if (ch->kind[j] == k && ch->chunks[j] == v) return j;
  return -1;
}

/* Candidate j's step simulated here: its own partition's stage costs (units of 1 and 2 ms, no
 * re-materialization on this memory), each boundary the `cross` map marks paying the link. */
static double resimulate(const inst *in, const gp_schedule_choice *ch, int j, const int *first,
                         const int *cross) {
  const int V = ch->chunks[j], KV = in->r.stages * V, M = in->r.micro;
  gp_stage_cost cost[GP_MAX_DEVICES];
  for (int s = 0; s < KV; s++) {
    const double units = first[s + 1] - first[s];
    cost[s] =
        (gp_stage_cost){.fwd = units * 1e-3,
                        .bwd = units * 2e-3,
                        .wgt = units * 1e-3, /* every unit has parameters: W is half */
                        .act_bytes = units * 1000,
                        .input_bytes = CUT,
                        .send = cross[s] ? in->r.link_latency_s + CUT / in->r.link_bytes_per_s : 0};
  }
  gp_schedule sc;
  gp_sim_result res = {0};
  gp_status s = V > 1 ? gp_schedule_build_interleaved(in->r.stages, M, V, &sc)
                      : gp_schedule_build(ch->kind[j], GP_REMAT_NEVER, KV, M, &sc);
  if (s == GP_OK) {
    s = gp_schedule_simulate(&sc, cost, &res);
    gp_schedule_free(&sc);
  }
  double mk = s == GP_OK ? res.makespan : -1;
  gp_sim_result_free(&res);
  return mk;
}

static int close_to(double a, double b) {
  return fabs(a - b) <= STEP_TOL * fmax(fabs(a), fabs(b));
}

/* K = 3 processes, M = 3: which link hands interleaved the win, and its step against the
 * simulator's with all K V - 1 of its boundaries (1F1B: K - 1) paying the link. */
static void three_processes(void) {
  static const struct {
    const char *what;
    double lat, bw;
    int interleaved_wins;
  } links[] = {
      {"shared memory (2 us, 10 GB/s)", 2e-6, 10e9, 1},
      {"TCP between hosts (50 us, 1.25 GB/s)", 50e-6, 1.25e9, 1},
      {"slow latency (5 ms, 10 GB/s)", 5e-3, 10e9, 0},
      {"slow bandwidth (2 us, 2 MB/s: 5 ms a hand-off)", 2e-6, 2e6, 0},
  };
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    inst in;
    make(&in, 3, 3);
    link_set(&in, 3, links[i].lat, links[i].bw);
    gp_schedule_choice ch;
    gp_partition p;
    char buf[400];
    gp_status s = gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p);
    CHECK(s == GP_OK, "%s: chose nothing", links[i].what);
    if (s != GP_OK) continue;
    gp_schedule_choice_str(&ch, buf, sizeof buf);
    printf("3 processes, %s: %s\n", links[i].what, buf);
    const int inter = ch.kind[ch.chosen] == GP_SCHED_INTERLEAVED;
    CHECK(inter == links[i].interleaved_wins, "%s: interleaved chosen %d, expected %d (%s)",
          links[i].what, inter, links[i].interleaved_wins, buf);
    for (int v = 2; v <= GP_CHOOSE_V; v++) { /* every V runs: charged, not refused */
      const int j = find(&ch, GP_SCHED_INTERLEAVED, v);
      CHECK(j >= 0 && ch.runs[j], "%s: interleaved V=%d does not run: %s", links[i].what, v,
            j >= 0 ? ch.why[j] : "not a candidate");
    }
    /* the chosen partition's step, simulated here with every process boundary paying */
    int cross[GP_MAX_DEVICES] = {0};
    for (int c = 0; c + 1 < p.stages; c++)
      cross[c] = 1; /* a device a process: every chunk boundary changes device, so process */
    double mk = resimulate(&in, &ch, ch.chosen, p.first, cross);
    CHECK(close_to(mk, ch.step[ch.chosen]) && close_to(mk, p.makespan),
          "%s: the choice's step %.9g, simulated here %.9g", links[i].what, ch.step[ch.chosen], mk);
  }
}

/* Interleaved V = 2's step against the link's latency: it grows, faster than 1F1B's (7 hand-offs
 * on its critical path per round trip against 1F1B's 2 at K = 4), and at no cost equals the
 * one-process step. */
static void grows_with_link(void) {
  static const double lat[] = {0, 1e-4, 3e-4, 1e-3, 3e-3};
  double prev_i = -1, prev_gap = -INFINITY, one_proc_i = -1;
  inst in;
  make(&in, 4, 4);
  gp_schedule_choice ch;
  gp_partition p;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p) == GP_OK, "one process");
  int j2 = find(&ch, GP_SCHED_INTERLEAVED, 2);
  if (j2 >= 0 && ch.runs[j2]) one_proc_i = ch.step[j2];
  for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) {
    make(&in, 4, 4);
    link_set(&in, 4, lat[i], 1e15); /* the latency alone */
    gp_status s = gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p);
    const int ji = find(&ch, GP_SCHED_INTERLEAVED, 2), jp = find(&ch, GP_SCHED_1F1B, 1);
    CHECK(s == GP_OK && ji >= 0 && jp >= 0 && ch.runs[ji] && ch.runs[jp],
          "latency %g: interleaved V=2 and 1f1b do not both run (%s)", lat[i],
          ji >= 0 ? ch.why[ji] : "");
    if (s != GP_OK || ji < 0 || jp < 0 || !ch.runs[ji] || !ch.runs[jp]) continue;
    const double si = ch.step[ji], gap = si - ch.step[jp];
    printf("4 processes, latency %4.0f us: interleaved V=2 step %.3f ms, 1f1b %.3f ms\n",
           lat[i] * 1e6, si * 1e3, ch.step[jp] * 1e3);
    if (i == 0)
      CHECK(fabs(si - one_proc_i) <= 1e-6 * one_proc_i,
            "a free link: interleaved V=2 %.9g, in one process %.9g", si, one_proc_i);
    else
      CHECK(si > prev_i * (1 + 1e-9) && gap > prev_gap,
            "latency %g: interleaved V=2 step %.9g after %.9g, its lead over 1f1b %.9g after %.9g",
            lat[i], si, prev_i, gap, prev_gap);
    prev_i = si, prev_gap = gap;
  }
}

/* K = 4 devices on 2 processes (0 1 | 2 3): 1F1B crosses once, interleaved V = 2's 8 chunks
 * at 1 -> 2, 3 -> 4 (device 3 back to 0) and 5 -> 6; a plan's own map likewise; and one
 * process, or costs of no known time, cross nothing that is charged. */
static void which_boundaries(void) {
  inst in;
  make(&in, 4, 4);
  link_set(&in, 2, 1e-3, 1e9);
  int got[GP_MAX_DEVICES], want_plain[GP_MAX_DEVICES] = {0, 1, 0},
                           want_inter[GP_MAX_DEVICES] = {0, 1, 0, 1, 0, 1, 0};
  for (int s = 0; s < 3; s++)
    got[s] = gp_partition_crosses(&in.r, s);
  CHECK(memcmp(got, want_plain, 3 * sizeof *got) == 0, "plain, 2 processes: %d %d %d", got[0],
        got[1], got[2]);
  gp_partition_req q = in.r;
  q.stages = 8, q.chunks = 2, q.schedule = GP_SCHED_INTERLEAVED;
  for (int s = 0; s < 7; s++)
    got[s] = gp_partition_crosses(&q, s);
  CHECK(memcmp(got, want_inter, 7 * sizeof *got) == 0,
        "interleaved V=2, 2 processes: %d %d %d %d %d %d %d", got[0], got[1], got[2], got[3],
        got[4], got[5], got[6]);
  /* 5 devices on 2 processes as gp_layout_make puts them: 0 1 2 | 3 4 */
  q = in.r;
  q.stages = 5;
  for (int s = 0; s < 4; s++)
    got[s] = gp_partition_crosses(&q, s);
  CHECK(!got[0] && !got[1] && got[2] && !got[3], "5 on 2: %d %d %d %d", got[0], got[1], got[2],
        got[3]);
  /* a plan's processes: 0 | 1 2 3 */
  const int own[4] = {0, 1, 1, 1};
  q = in.r;
  q.proc_of = own;
  for (int s = 0; s < 3; s++)
    got[s] = gp_partition_crosses(&q, s);
  CHECK(got[0] && !got[1] && !got[2], "a plan's map: %d %d %d", got[0], got[1], got[2]);

  /* the 1F1B step on 2 processes, simulated here with its one crossing paying */
  gp_schedule_choice ch;
  gp_partition p;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p) == GP_OK, "2 processes");
  const int jp = find(&ch, GP_SCHED_1F1B, 1), ji = find(&ch, GP_SCHED_INTERLEAVED, 2);
  gp_partition_req r1 = in.r;
  r1.schedule = GP_SCHED_1F1B;
  gp_partition p1, pi;
  CHECK(gp_partition_solve(&in.c, &r1, &p1) == GP_OK, "1f1b's split");
  CHECK(close_to(resimulate(&in, &ch, jp, p1.first, want_plain), ch.step[jp]),
        "1f1b on 2 processes: step %.9g", ch.step[jp]);
  q = in.r;
  q.stages = 8, q.chunks = 2, q.schedule = GP_SCHED_INTERLEAVED, q.remat = GP_REMAT_NEVER;
  CHECK(gp_partition_solve_devices(&in.c, &q, NULL, &pi) == GP_OK, "interleaved's split");
  CHECK(close_to(resimulate(&in, &ch, ji, pi.first, want_inter), ch.step[ji]),
        "interleaved V=2 on 2 processes: step %.9g", ch.step[ji]);

  /* one process: nothing crosses; FLOP costs (no seconds): interleaved left out, saying why */
  link_set(&in, 1, 1e-3, 1e9);
  CHECK(!gp_partition_crosses(&in.r, 1), "one process crosses");
  make(&in, 4, 4);
  link_set(&in, 4, 1e-3, 1e9);
  in.r.seconds_per_cost = 0;
  in.c.by = GP_COST_FLOPS;
  CHECK(gp_schedule_choose(&in.c, &in.r, NULL, &ch, &p) == GP_OK, "FLOPs across processes");
  const int jf = find(&ch, GP_SCHED_INTERLEAVED, 2);
  CHECK(jf >= 0 && !ch.runs[jf] && strstr(ch.why[jf], "unit times (--by time)") &&
            ch.kind[ch.chosen] != GP_SCHED_INTERLEAVED,
        "FLOPs across processes: interleaved runs %d (%s)", jf >= 0 ? ch.runs[jf] : -1,
        jf >= 0 ? ch.why[jf] : "");
  /* a bad link is one line */
  make(&in, 4, 4);
  link_set(&in, 4, -1, 1e9);
  gp_error_clear();
  CHECK(gp_partition_solve(&in.c, &in.r, &p) == GP_ERR_USAGE &&
            strstr(gp_error_message(), "link between processes"),
        "a negative latency is taken");
  gp_error_clear();
}

int main(void) {
  three_processes();
  grows_with_link();
  which_boundaries();
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
