/* Stage plans: a given balance, or the partitioner's exact split of estimated or measured
 * costs. */
#include "core/plan/plan.h"

#include "core/plan/choose.h"
#include "core/plan/cluster.h"
#include "core/plan/solve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The automatic split: the partitioner's exact solution on the layers' analytic costs for a
 * micro-batch of the model's batch size / M, under the plan's schedule and re-materialization. */
void gp_plan_partition_req(const gp_model *m, const gp_pipeline_spec *ps, gp_partition_req *r) {
  /* interleaved: K V chunks balanced alike, which balances each device's V of them too */
  const int v = ps->virtual_stages > 1 ? ps->virtual_stages : 1;
  *r = (gp_partition_req){.stages = ps->stages * v,
                          .micro = ps->micro_batches,
                          .schedule = v > 1 ? GP_SCHED_INTERLEAVED : ps->schedule,
                          .chunks = v,
                          .remat = ps->remat,
                          .optim_slots = gp_optimizer_slots(&m->train)};
}

/* The automatic split (given = 0), and under schedule: auto the schedule (on the given split
 * when given = 1): first[] and out's schedule. c: the per-unit costs to weigh (gp_split_costs),
 * NULL for the analytic FLOPs. */
static gp_status auto_plan(const gp_model *m, const gp_pipeline_spec *ps, const gp_unit_costs *c,
                           int given, int *first, gp_plan *out) {
  int64_t micro = (m->train.batch_size + ps->micro_batches - 1) / ps->micro_batches;
  gp_unit_costs own = {0};
  if (!c) GP_TRY(gp_unit_costs_compute(m, micro > 0 ? micro : 1, GP_COST_FLOPS, 1, NULL, &own));
  if (c && c->n != m->n_units)
    return GP_ERR(GP_ERR_USAGE, "the split's costs are of %d units, the model has %d", c->n,
                  m->n_units);
  gp_partition_req req;
  gp_plan_partition_req(m, ps, &req);
  req.remat = out->remat; /* never for the zero-bubble lists (gp_plan_make) */
  /* across processes every candidate pays its hand-offs between them, in seconds: on measured
   * times, or on FLOPs at a known rate (without one interleaved is left out) */
  const int plan_procs = ps->across_procs > 1 && ps->n_procs > 0; /* a plan's processes: */
  req.procs = plan_procs ? ps->n_procs : ps->across_procs;
  req.proc_of = plan_procs ? ps->procs : NULL;
  const int given_link = ps->link_bytes_per_s > 0;
  req.link_latency_s = given_link ? ps->link_latency_s : gp_link_local_default.latency_s;
  req.link_bytes_per_s = given_link ? ps->link_bytes_per_s : gp_link_local_default.bytes_per_s;
  /* remat auto: the split that is fastest with what fits recomputed (one stage has no choice:
   * gp_pipeline_check_fit names what does not fit); a limit a device (interleaved: its chunks
   * together) */
  double lim[GP_MAX_DEVICES];
  for (int s = 0; s < ps->stages && ps->stages > 1 && ps->remat == GP_REMAT_AUTO && ps->mem_limit;
       s++)
    lim[s] = (double)ps->mem_limit, req.mem_limit = lim;
  gp_partition part;
  const gp_unit_costs *uc = c ? c : &own;
  req.seconds_per_cost = uc->by == GP_COST_TIME    ? 1.0
                         : uc->by == GP_COST_FLOPS ? ps->seconds_per_flop
                                                   : 0.0;
  gp_status s;
  if (ps->schedule == GP_SCHED_AUTO) {
    gp_schedule_choice ch;
    s = gp_schedule_choose(uc, &req, given ? first : NULL, &ch, &part);
    if (s == GP_OK) { /* interleaved: the chosen V's K V chunks */
      out->schedule = ch.kind[ch.chosen];
      out->remat = ch.remat[ch.chosen];
      out->virtual_stages = ch.chunks[ch.chosen];
      out->stages = ps->stages * ch.chunks[ch.chosen];
      gp_schedule_choice_str(&ch, out->chosen, sizeof out->chosen);
    }
  } else if (req.chunks > 1) {
    const double *dev = req.mem_limit;
    req.mem_limit = NULL;
    s = gp_partition_solve_devices(uc, &req, dev, &part);
  } else {
    s = gp_partition_solve(uc, &req, &part);
  }
  gp_unit_costs_free(&own);
  GP_TRY(s);
  for (int i = 0; !given && i <= out->stages; i++)
    first[i] = part.first[i];
  return GP_OK;
}

/* Interleaved 1F1B and V >= 2 go together; it takes micro-batches in groups of the stages. */
static gp_status check_chunks(const gp_model *m, const gp_pipeline_spec *ps, int v) {
  const int k = ps->stages, mb = ps->micro_batches;
  if (v < 1 || (long long)k * v > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "virtual stages must be in [1, %d], got %d", GP_MAX_DEVICES / k, v);
  if (v > 1 && ps->schedule != GP_SCHED_INTERLEAVED)
    return GP_ERR(GP_ERR_USAGE,
                  "%d virtual stages need the interleaved schedule (--schedule interleaved), "
                  "not %s",
                  v, gp_schedule_names()[ps->schedule]);
  if (v == 1 && ps->schedule == GP_SCHED_INTERLEAVED)
    return GP_ERR(GP_ERR_USAGE,
                  "the interleaved schedule needs 2 or more virtual stages (--virtual-stages V)");
  if (v > 1 && ps->remat != GP_REMAT_NEVER && ps->remat != GP_REMAT_AUTO)
    return GP_ERR(GP_ERR_USAGE, "the interleaved schedule re-materializes nothing yet: use "
                                "--remat never (pipeline.remat: never)");
  if (k * v > m->n_units)
    return GP_ERR(GP_ERR_USAGE, "cannot cut %d unit%s into %d stages x %d chunks (at most %d)",
                  m->n_units, m->n_units == 1 ? "" : "s", k, v, m->n_units);
  if (v > 1 && mb % k)
    return GP_ERR(GP_ERR_USAGE,
                  "interleaved takes micro-batches in groups of the %d stages: %d micro-batches "
                  "is not a multiple of %d (%d would do)",
                  k, mb, k, (mb + k - 1) / k * k);
  return GP_OK;
}

gp_status gp_plan_make(const gp_model *m, const gp_pipeline_spec *ps, gp_plan *out) {
  return gp_plan_make_from(m, ps, NULL, out);
}

gp_status gp_plan_make_from(const gp_model *m, const gp_pipeline_spec *ps, const gp_unit_costs *c,
                            gp_plan *out) {
  memset(out, 0, sizeof *out);
  const int devs = ps->stages, v = ps->virtual_stages > 1 ? ps->virtual_stages : 1;
  if (devs < 1 || devs > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "stages must be in [1, %d], got %d", GP_MAX_DEVICES, devs);
  if (devs > m->n_units)
    return GP_ERR(GP_ERR_USAGE, "cannot cut %d unit%s into %d stages (at most %d)", m->n_units,
                  m->n_units == 1 ? "" : "s", devs, m->n_units);
  if (ps->micro_batches < 1)
    return GP_ERR(GP_ERR_USAGE, "micro-batches must be >= 1, got %d", ps->micro_batches);
  GP_TRY(check_chunks(m, ps, v));
  int k = devs * v; /* the chunks (schedule auto may choose interleaved's) */
  out->stages = k;
  out->virtual_stages = v;
  out->micro = ps->micro_batches;
  out->schedule = ps->schedule;
  out->remat = ps->remat;
  /* the zero-bubble and interleaved lists re-materialize nothing: auto chooses never there */
  if (ps->schedule >= 0 && gp_schedule_keeps_all(ps->schedule) && ps->remat == GP_REMAT_AUTO)
    out->remat = GP_REMAT_NEVER;
  if (ps->n_procs > 0) {
    out->n_procs = ps->n_procs;
    memcpy(out->procs, ps->procs, sizeof out->procs);
  }
  int first[GP_MAX_DEVICES + 1];
  if (ps->n_balance) {
    if (ps->n_balance != k)
      return GP_ERR(GP_ERR_USAGE, "balance has %d entr%s for %d %s%s", ps->n_balance,
                    ps->n_balance == 1 ? "y" : "ies", k, v > 1 ? "chunk" : "stage",
                    k == 1 ? "" : "s");
    int u = 0;
    for (int s = 0; s < k; s++) {
      if (ps->balance[s] < 1)
        return GP_ERR(GP_ERR_USAGE, "balance entry %d is %d; every stage needs a unit", s + 1,
                      ps->balance[s]);
      first[s] = u;
      u += ps->balance[s];
    }
    if (u != m->n_units)
      return GP_ERR(GP_ERR_USAGE, "balance sums to %d unit%s, the model has %d", u,
                    u == 1 ? "" : "s", m->n_units);
    first[k] = m->n_units;
    if (ps->schedule == GP_SCHED_AUTO) GP_TRY(auto_plan(m, ps, c, 1, first, out));
  } else {
    GP_TRY(auto_plan(m, ps, c, 0, first, out));
    k = out->stages;
  }
  first[k] = m->n_units;
  if (ps->n_devices != 1 && ps->n_devices != devs)
    return GP_ERR(GP_ERR_USAGE, "%d devices for %d stage%s (give one, or one per stage)",
                  ps->n_devices, devs, devs == 1 ? "" : "s");
  for (int s = 0; s < k; s++) {
    gp_stage_range *r = &out->st[s];
    r->first_unit = first[s];
    r->end_unit = first[s + 1];
    r->first_node = m->unit_first[r->first_unit];
    r->end_node = m->unit_first[r->end_unit];
    const char *dev = ps->n_devices ? ps->devices[ps->n_devices == 1 ? 0 : s % devs] : "cpu";
    snprintf(r->device, sizeof r->device, "%s", dev);
  }
  GP_TRY(gp_devices_check(k, out->st[0].device, sizeof out->st[0]));
  return gp_plan_choose_remat(m, ps, out);
}

gp_status gp_devices_check(int n, const char *first, size_t stride) {
  int n_cuda = 0;
  for (int s = 0; s < n; s++) {
    const char *dev = first + (size_t)s * stride;
    GP_TRY(gp_device_check(dev));
    n_cuda += strncmp(dev, "cuda:", 5) == 0;
  }
  if (n_cuda && n_cuda != n)
    return GP_ERR(GP_ERR_USAGE,
                  "devices: %d of the %d stages are on CUDA devices and the others on the CPU; "
                  "put every stage on the CPU, or every stage on a CUDA device",
                  n_cuda, n);
  return GP_OK;
}

void gp_device_canonical(char *dev) {
  if (strcmp(dev, "cuda") == 0) strcpy(dev, "cuda:0");
}

gp_status gp_device_check(const char *dev) {
  if (strcmp(dev, "cpu") == 0 || strcmp(dev, "cuda") == 0) return GP_OK;
  /* cuda:N, N in 0..999 written one way: "cuda:01" (or "cuda:000...1", cut to cuda:0 in a
   * 16-byte name) is not cuda:1 */
  if (strncmp(dev, "cuda:", 5) == 0) { /* dev + 5 only past the prefix: "gpu" is shorter */
    const char *d = dev + 5;
    size_t nd = strspn(d, "0123456789");
    if (nd >= 1 && nd <= 3 && d[nd] == 0 && (d[0] != '0' || nd == 1)) return GP_OK;
  }
  return GP_ERR(GP_ERR_USAGE, "unknown device '%s' (cpu, cuda or cuda:N)", dev);
}

int64_t gp_plan_micro_hint(int stages, int64_t batch) {
  int64_t m = 4 * (int64_t)stages;
  return m < batch ? m : batch;
}

size_t gp_plan_balance_str(const gp_plan *p, char *buf, size_t n) {
  size_t k = 0; /* the whole text's length so far; buf holds its first min(k, n - 1) bytes */
  if (n) buf[0] = 0;
  for (int s = 0; s < p->stages; s++) {
    char one[16];
    int len = snprintf(one, sizeof one, s ? ",%d" : "%d", p->st[s].end_unit - p->st[s].first_unit);
    if (k < n) snprintf(buf + k, n - k, "%s", one);
    k += (size_t)len;
  }
  if (k >= n && n >= 4) memcpy(buf + n - 4, "...", 4);
  return k;
}

const char *const *gp_schedule_names(void) {
  static const char *const names[] = {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved", NULL};
  _Static_assert(GP_SCHED_INTERLEAVED == 4, "schedule names");
  return names;
}

const char *const *gp_remat_names(void) {
  static const char *const names[] = {"always", "except_last", "never", "auto", NULL};
  _Static_assert(GP_REMAT_AUTO == 3, "re-materialization names");
  return names;
}
