/* Multi-process predictions (core/plan/predict.h) on cases worked by hand: the pipeline's
 * makespan with hand-offs on the local or the remote link, the ring all-reduce's time, buckets
 * and the share hidden before the last backward ends, the bytes per link, and the memory a
 * process adds for the inputs it receives. Costs, speeds and links are exact binary fractions,
 * so every figure is exact. Interleaved chunks over two processes, worked by hand. And the
 * planner's assignment of stages to processes, against every other on small cases. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/predict.h"
#include "tests/support/check.h"

static int failures, passes;

typedef struct inst {
  double fwd[2], bwd[2];
  int64_t params[2], act[2], out[2], cut[3];
  gp_unit_costs c;
  gp_partition_req r;
  gp_partition p;
  gp_layout l;
  gp_dist_req q;
  gp_dist_pred e;
} inst;

static inst in; /* a layout is 16 KiB: off the stack */

/* Units: forward 1 and 2, backward 3 and 4 (x 0.5 s), 100 and 200 parameters, 1000 bytes
 * across the cut. Local link: 1000 B/s, 0.25 s; remote: 800 B/s, 0.125 s. */
static gp_status setup(int K, int W, int R, int procs_per_host, gp_remat remat) {
  memset(&in, 0, sizeof in);
  in.fwd[0] = 1, in.fwd[1] = 2, in.bwd[0] = 3, in.bwd[1] = 4;
  in.params[0] = 100, in.params[1] = 200;
  in.act[0] = in.act[1] = 64;
  in.cut[1] = 1000;
  in.c = (gp_unit_costs){.n = 2,
                         .micro_batch = 1,
                         .fwd = in.fwd,
                         .bwd = in.bwd,
                         .fwd_flops = in.fwd,
                         .bwd_flops = in.bwd,
                         .params = in.params,
                         .act_bytes = in.act,
                         .out_bytes = in.out,
                         .cut_bytes = in.cut};
  in.r = (gp_partition_req){.stages = K, .micro = 1, .schedule = GP_SCHED_GPIPE, .remat = remat};
  int first[3] = {0, K == 1 ? 2 : 1, 2};
  GP_TRY(gp_partition_evaluate(&in.c, &in.r, first, &in.p));
  GP_TRY(gp_layout_make(W, 0, R, K, NULL, &in.l));
  in.q = (gp_dist_req){.c = &in.c,
                       .seconds_per_cost = 0.5,
                       .r = &in.r,
                       .p = &in.p,
                       .l = &in.l,
                       .procs_per_host = procs_per_host,
                       .local = {1000, 0.25, ""},
                       .remote = {800, 0.125, ""}};
  return GP_OK;
}

static void handoffs(void) {
  /* F0 [0, 0.5], +1.25 s hand-off, F1 [1.75, 2.75], B1 [2.75, 4.75], +1.25, B0 [6, 7.5] */
  CHECK(setup(2, 2, 1, 2, GP_REMAT_NEVER) == GP_OK, "setup");
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.proc[0].send_s == 1.25 && in.e.proc[0].send_remote == 0, "local hand-off %g",
        in.e.proc[0].send_s);
  CHECK(in.e.pipeline_s == 7.5 && in.e.step_s == 7.5, "local pipeline %g", in.e.pipeline_s);
  /* the received input, kept for the backward without re-materialization */
  CHECK(in.e.proc[1].mem_handoff == 1000, "hand-off memory %g", in.e.proc[1].mem_handoff);
  CHECK(in.e.proc[1].mem_total == in.p.memory[1] + 1000, "memory %g", in.e.proc[1].mem_total);
  CHECK(in.e.proc[0].mem_total == in.p.memory[0], "memory %g", in.e.proc[0].mem_total);
  CHECK(in.e.bytes_local == 2000 && in.e.bytes_remote == 0, "bytes %g %g", in.e.bytes_local,
        in.e.bytes_remote);
  /* one process a host: the hand-off crosses hosts, 0.125 + 1000 / 800 = 1.375 s each way */
  CHECK(setup(2, 2, 1, 1, GP_REMAT_NEVER) == GP_OK, "setup");
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.proc[0].send_s == 1.375 && in.e.proc[0].send_remote == 1, "remote %g",
        in.e.proc[0].send_s);
  CHECK(in.e.pipeline_s == 7.75, "remote pipeline %g", in.e.pipeline_s);
  CHECK(in.e.bytes_remote == 2000 && in.e.bytes_local == 0, "bytes %g %g", in.e.bytes_local,
        in.e.bytes_remote);
  /* re-materializing, the stage keeps its input anyway: nothing more to hold */
  CHECK(setup(2, 2, 1, 2, GP_REMAT_ALWAYS) == GP_OK, "setup");
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.proc[1].mem_handoff == 0, "remat hand-off memory %g", in.e.proc[1].mem_handoff);
}

static void allreduce(void) {
  CHECK(gp_dist_allreduce_s(400, 1, &(gp_link){800, 0.125, ""}) == 0, "R = 1");
  /* R = 4: 2 x 3/4 x 400 / 800 + 2 x 3 x 0.125 */
  CHECK(gp_dist_allreduce_s(400, 4, &(gp_link){800, 0.125, ""}) == 0.75 + 0.75, "R = 4");
  /* W = 4, R = 2, replica r on host r: rings cross hosts, hand-offs stay local. Stage 1's
   * 800 bytes are ready at 4.75 and take 800/800 + 0.25 = 1.25 s, done before the pipeline
   * ends at 7.5 (hidden); stage 0's 400 bytes are ready at 7.5 and take 0.75 s (exposed). */
  CHECK(setup(2, 4, 2, 2, GP_REMAT_NEVER) == GP_OK, "setup");
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  const gp_dist_proc *a = &in.e.proc[0], *b = &in.e.proc[1];
  CHECK(a->ar_bytes == 400 && a->ar_sent == 400 && a->ar_remote == 2 && a->ar_buckets == 1,
        "position 0: %g %g %d %d", a->ar_bytes, a->ar_sent, a->ar_remote, a->ar_buckets);
  CHECK(a->ar_s == 0.75 && a->ar_hidden_s == 0 && a->ar_end == 8.25, "position 0: %g %g %g",
        a->ar_s, a->ar_hidden_s, a->ar_end);
  CHECK(b->ar_s == 1.25 && b->ar_hidden_s == 1.25 && b->ar_end == 6.0, "position 1: %g %g %g",
        b->ar_s, b->ar_hidden_s, b->ar_end);
  CHECK(in.e.step_s == 8.25 && in.e.ar_s == 2.0 && in.e.ar_hidden_s == 1.25, "step %g %g %g",
        in.e.step_s, in.e.ar_s, in.e.ar_hidden_s);
  /* both replicas' hand-offs local (2 x 2000); each ring edge what one process sends */
  CHECK(in.e.bytes_local == 4000 && in.e.bytes_remote == 2 * 400 + 2 * 800, "bytes %g %g",
        in.e.bytes_local, in.e.bytes_remote);
  /* one stage of both units, buckets of 500 bytes: unit 1's 800 bytes are one, ready at 3.5
   * (the backward [1.5, 5] has run unit 1's 2 s), done at 4.75; unit 0's 400 at 5, done at
   * 5.75. One bucket of 1200 instead: 1.5 + 0.25 from 5. */
  CHECK(setup(1, 2, 2, 1, GP_REMAT_NEVER) == GP_OK, "setup");
  in.q.bucket_bytes = 500;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.proc[0].ar_buckets == 2 && in.e.proc[0].ar_end == 5.75 &&
            in.e.proc[0].ar_hidden_s == 1.25 && in.e.pipeline_s == 5.0,
        "buckets %d end %g hidden %g", in.e.proc[0].ar_buckets, in.e.proc[0].ar_end,
        in.e.proc[0].ar_hidden_s);
  in.q.bucket_bytes = 0;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.proc[0].ar_buckets == 1 && in.e.proc[0].ar_end == 6.75, "one bucket %d end %g",
        in.e.proc[0].ar_buckets, in.e.proc[0].ar_end);
}

static void devices(void) {
  /* 2 processes of one host on one device: it holds both */
  CHECK(setup(2, 2, 1, 2, GP_REMAT_NEVER) == GP_OK, "setup");
  in.q.devices_per_host = 1;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.dev_share == 2 && in.e.dev_mem_max == in.e.proc[0].mem_total + in.e.proc[1].mem_total,
        "device %g", in.e.dev_mem_max);
  in.q.devices_per_host = 0;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_OK, "predict");
  CHECK(in.e.dev_share == 1 && in.e.dev_mem_max == in.e.mem_max, "own devices %g",
        in.e.dev_mem_max);
}

static void refusals(void) {
  CHECK(setup(2, 2, 1, 2, GP_REMAT_NEVER) == GP_OK, "setup");
  in.q.local.bytes_per_s = 0;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_ERR_USAGE, "a link without bandwidth");
  CHECK(setup(2, 2, 1, 2, GP_REMAT_NEVER) == GP_OK, "setup");
  in.q.seconds_per_cost = NAN;
  CHECK(gp_dist_predict(&in.q, &in.e) == GP_ERR_USAGE, "no time scale");
  gp_error_clear();
}

/* The most a position costs when stages go to positions as procs_of says. */
static double worst_of(const double *cost, int K, const int *procs_of) {
  double sum[GP_MAX_DEVICES] = {0}, w = 0;
  for (int s = 0; s < K; s++)
    if ((sum[procs_of[s]] += cost[s]) > w) w = sum[procs_of[s]];
  return w;
}

/* gp_layout_balance: a layout gp_layout_make takes (every position used, contiguous), and no
 * other contiguous assignment has a cheaper costliest position (all of them tried, K <= 8). */
static void balance(void) {
  const double even[5] = {1, 1, 1, 1, 1}, front[6] = {5, 1, 1, 1, 1, 1}, back[4] = {1, 1, 1, 10};
  int got[GP_MAX_DEVICES];
  gp_layout_balance(even, 5, 2, got);
  CHECK(got[0] == 0 && got[2] == 0 && got[3] == 1 && got[4] == 1, "even: %d %d %d %d %d", got[0],
        got[1], got[2], got[3], got[4]);
  gp_layout_balance(front, 6, 2, got);
  CHECK(got[0] == 0 && got[1] == 1 && got[5] == 1, "front-heavy: stage 1 on %d", got[1]);
  gp_layout_balance(back, 4, 3, got);
  CHECK(got[0] == 0 && got[1] == 0 && got[2] == 1 && got[3] == 2, "back-heavy: %d %d %d %d", got[0],
        got[1], got[2], got[3]);
  uint64_t x = 12345;
  int bad = 0;
  for (int trial = 0; trial < 400; trial++) {
    int K = 1 + trial % 8, P = 1 + (trial / 8) % K;
    double cost[8];
    for (int s = 0; s < K; s++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      cost[s] = (double)(x >> 40 & 1023) / 64.0;
    }
    gp_layout_balance(cost, K, P, got);
    gp_layout l;
    if (gp_layout_make(P, 0, 1, K, got, &l) != GP_OK) {
      bad++;
      continue;
    }
    double best = INFINITY;
    for (unsigned cuts = 0; cuts < 1u << (K - 1); cuts++) { /* bit s: a new position at s + 1 */
      if (__builtin_popcount(cuts) != P - 1) continue;
      int mine[8] = {0};
      for (int s = 1; s < K; s++)
        mine[s] = mine[s - 1] + (int)(cuts >> (s - 1) & 1);
      double w = worst_of(cost, K, mine);
      if (w < best) best = w;
    }
    if (worst_of(cost, K, got) > best * (1 + 1e-9)) bad++;
  }
  CHECK(bad == 0, "balance: %d of 400 random assignments not the best (or not a layout)", bad);
}

/* Interleaved over processes: K = 2 devices x V = 2 chunks of one unit each (forward 1,
 * backward 2, 100 parameters, 1000 bytes across every cut), M = 2, a device a process: process
 * 0 holds chunks 0 and 2, process 1 chunks 1 and 3, so all three chunk boundaries cross
 * processes. With free links the step is the one-process simulation's; each hand-off on the
 * local link (0.25 s + 1000 / 1000 B/s) lengthens it. */
static void interleaved(void) {
  static double f[4] = {1, 1, 1, 1}, b[4] = {2, 2, 2, 2};
  static int64_t params[4] = {100, 100, 100, 100}, act[4] = {64, 64, 64, 64}, out[4] = {0};
  static int64_t cut[5] = {0, 1000, 1000, 1000, 0};
  gp_unit_costs c = {.n = 4,
                     .micro_batch = 1,
                     .fwd = f,
                     .bwd = b,
                     .fwd_flops = f,
                     .bwd_flops = b,
                     .params = params,
                     .act_bytes = act,
                     .out_bytes = out,
                     .cut_bytes = cut};
  gp_partition_req r = {.stages = 4,
                        .micro = 2,
                        .schedule = GP_SCHED_INTERLEAVED,
                        .remat = GP_REMAT_NEVER,
                        .chunks = 2};
  static gp_partition p;
  static gp_layout l;
  int first[5] = {0, 1, 2, 3, 4};
  if (gp_partition_evaluate(&c, &r, first, &p) != GP_OK ||
      gp_layout_make(2, 0, 1, 2, NULL, &l) != GP_OK) {
    CHECK(0, "interleaved: setup [%s]", gp_error_message());
    return;
  }
  gp_layout_interleave(&l, 2);
  CHECK(gp_layout_local(&l, 0) && !gp_layout_local(&l, 1) && gp_layout_local(&l, 2) &&
            gp_layout_owner(&l, 3) == 1 && gp_layout_held(&l, 1) == 2,
        "interleaved layout: chunk c on position c mod 2");
  gp_dist_req q = {.c = &c,
                   .seconds_per_cost = 1,
                   .r = &r,
                   .p = &p,
                   .l = &l,
                   .procs_per_host = 2,
                   .local = {1e30, 0, ""},
                   .remote = {1e30, 0, ""}};
  static gp_dist_pred e;
  CHECK(gp_dist_predict(&q, &e) == GP_OK, "interleaved predict [%s]", gp_error_message());
  CHECK(e.pipeline_s == p.makespan, "free links: %g, one process %g", e.pipeline_s, p.makespan);
  CHECK(e.proc[0].params == 200 && e.proc[1].params == 200, "params %g %g", e.proc[0].params,
        e.proc[1].params);
  /* sends: process 0 chunk 0 -> 1 and 2 -> 3, process 1 chunk 1 -> 2 (back to device 0) */
  CHECK(e.proc[0].send_bytes == 2000 && e.proc[1].send_bytes == 1000, "send bytes %g %g",
        e.proc[0].send_bytes, e.proc[1].send_bytes);
  /* M micro-batches forward and back over each boundary */
  CHECK(e.bytes_local == 3 * 2 * 2 * 1000.0 && e.bytes_remote == 0, "bytes %g %g", e.bytes_local,
        e.bytes_remote);
  /* received inputs kept for the backward: chunk 2 (min(M, K V - 2) = 2 in flight) on process
   * 0, chunks 1 (2) and 3 (1) on process 1 */
  CHECK(e.proc[0].mem_handoff == 2000 && e.proc[1].mem_handoff == 3000, "hand-off memory %g %g",
        e.proc[0].mem_handoff, e.proc[1].mem_handoff);
  const double free_s = e.pipeline_s;
  q.local = (gp_link){1000, 0.25, ""};
  CHECK(gp_dist_predict(&q, &e) == GP_OK, "interleaved predict");
  CHECK(e.proc[0].send_s == 2 * 1.25 && e.proc[1].send_s == 1.25, "send time %g %g",
        e.proc[0].send_s, e.proc[1].send_s);
  /* at least the critical path's three forward and three backward hand-offs */
  /* device 0 runs F(c0, m0..1) F(c2, m0..1) B(c2, m0..1) B(c0, m0..1), device 1 F(c1, m0..1)
   * F(c3, m0) B(c3, m0) F(c3, m1) B(c3, m1) B(c1, m0..1): free, B(c0, m1) ends at 15; with
   * the hand-offs F(c3, m0) starts at 6.75, B(c3, m1) ends at 12.75, B(c2, m1) at 16,
   * B(c1, m1) at 19.25, B(c0, m1) runs [20.5, 22.5] */
  CHECK(free_s == 15 && e.pipeline_s == 22.5, "local hand-offs: %g, free %g", e.pipeline_s, free_s);
}

int main(void) {
  interleaved();
  handoffs();
  allreduce();
  devices();
  refusals();
  balance();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
