/* The launch's layout: which process holds which stages of which replica. */
#include "core/dist/layout.h"

#include <string.h>

void gp_layout_single(int stages, gp_layout *out) {
  memset(out, 0, sizeof *out);
  out->world = out->replicas = out->procs = 1;
  out->stages = stages;
  out->first[1] = stages;
}

gp_status gp_layout_make(int world, int rank, int replicas, int stages, const int *procs_of,
                         gp_layout *out) {
  if (world < 1 || world > GP_MAX_PROCESSES)
    return GP_ERR(GP_ERR_USAGE, "%d processes: gpipe runs 1 to %d", world, GP_MAX_PROCESSES);
  if (replicas < 1 || replicas > world)
    return GP_ERR(GP_ERR_USAGE,
                  "--replicas %d with %d processes: each replica needs a process "
                  "of its own (use --replicas 1 to %d)",
                  replicas, world, world);
  if (world % replicas)
    return GP_ERR(GP_ERR_USAGE,
                  "--replicas %d does not divide %d processes: every replica has "
                  "as many processes (launch a multiple of %d, or use a --replicas that divides "
                  "%d)",
                  replicas, world, replicas, world);
  int P = world / replicas;
  if (stages < P)
    return GP_ERR(GP_ERR_USAGE,
                  "%d processes a replica (%d processes / %d replicas) but %d "
                  "stage%s: each process needs a stage of its own (use --stages %d or more, more "
                  "--replicas, or fewer processes)",
                  P, world, replicas, stages, stages == 1 ? "" : "s", P);
  if (rank < 0 || rank >= world)
    return GP_ERR(GP_ERR_USAGE, "internal: rank %d of %d", rank, world);
  memset(out, 0, sizeof *out);
  out->world = world;
  out->rank = rank;
  out->replicas = replicas;
  out->replica = rank / P;
  out->procs = P;
  out->pos = rank % P;
  out->stages = stages;
  if (!procs_of) {
    for (int p = 0; p <= P; p++)
      out->first[p] = (stages / P) * p + (p < stages % P ? p : stages % P);
    return GP_OK;
  }
  int p = 0;
  out->first[0] = 0;
  for (int s = 0; s < stages; s++) {
    int q = procs_of[s];
    if (q < p || q > p + 1 || (s == 0 && q != 0) || q >= P)
      return GP_ERR(GP_ERR_USAGE,
                    "processes: stage %d is on process %d: stages go to "
                    "processes 0 to %d in order, each process taking a contiguous run",
                    s, q, P - 1);
    if (q == p + 1) out->first[++p] = s;
  }
  if (p != P - 1)
    return GP_ERR(GP_ERR_USAGE,
                  "processes: only %d of a replica's %d processes hold a stage "
                  "(every process needs one)",
                  p + 1, P);
  out->first[P] = stages;
  return GP_OK;
}

void gp_layout_interleave(gp_layout *l, int chunks) {
  if (chunks <= 1) return;
  l->stages *= chunks;
  l->chunks = chunks;
}

int gp_layout_owner(const gp_layout *l, int s) {
  s = gp_layout_device(l, s);
  int lo = 0, hi = l->procs - 1;
  while (lo < hi) { /* the last p with first[p] <= s */
    int mid = (lo + hi + 1) / 2;
    if (l->first[mid] <= s)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Stages [0, K) into at most P runs of at most `cap` each, greedily from the front; the
 * number of runs needed (P + 1 when P do not do). */
static int runs_within(const double *cost, int K, int P, double cap, int *procs_of) {
  int p = 0;
  double sum = 0;
  for (int s = 0; s < K; s++) {
    if (s > 0 && sum + cost[s] > cap) {
      if (++p >= P) return P + 1;
      sum = 0;
    }
    sum += cost[s];
    if (procs_of) procs_of[s] = p;
  }
  return p + 1;
}

void gp_layout_balance(const double *cost, int stages, int procs, int *procs_of) {
  int K = stages, P = procs < 1 ? 1 : procs > K ? K : procs;
  double lo = 0, hi = 0;
  for (int s = 0; s < K; s++) {
    if (cost[s] > lo) lo = cost[s];
    hi += cost[s];
  }
  /* the least cap that P runs meet: bisect between the largest stage and the whole */
  for (int it = 0; it < 100 && hi - lo > 1e-12 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (runs_within(cost, K, P, mid, NULL) <= P)
      hi = mid;
    else
      lo = mid;
  }
  runs_within(cost, K, P, hi, procs_of);
  /* fewer runs than positions: the last stages move on, one position each, until every
   * position holds one (stage s at least at P - K + s); no run grows, positions still rise by
   * 0 or 1 from one stage to the next */
  for (int s = 0; s < K; s++)
    if (s - (K - P) > procs_of[s]) procs_of[s] = s - (K - P);
}
