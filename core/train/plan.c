/* Stage plans: a given balance, or the exact min-max split of estimated FLOPs. */
#include "core/train/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double gp_unit_flops(const gp_model *m, int u) {
  double f = 0;
  for (int i = m->unit_first[u]; i < m->unit_first[u + 1]; i++) {
    gp_cost c = {0};
    m->nodes[i].layer.type->cost(&m->nodes[i].layer, &c);
    f += c.fwd_flops + c.bwd_flops;
  }
  return f;
}

/* Cuts w[0..n) into exactly k non-empty runs, each at most cap if it can; returns the
 * number of runs whose sum exceeded cap (0 = feasible), and the run starts in first[]. */
static int cut(const double *w, int n, int k, double cap, int *first) {
  int over = 0, u = 0;
  for (int s = 0; s < k; s++) {
    first[s] = u;
    double sum = w[u++];
    int last = s == k - 1;
    /* greedy: as much as fits, leaving one unit for each stage still to come */
    while (u < n && (last || (n - u > k - s - 1 && sum + w[u] <= cap)))
      sum += w[u++];
    over += sum > cap;
  }
  return over;
}

static gp_status even_split(const gp_model *m, int k, int *first) {
  int n = m->n_units;
  double *w = malloc(sizeof(double) * (size_t)n), lo = 0, hi = 0;
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory planning stages");
  for (int u = 0; u < n; u++) {
    w[u] = gp_unit_flops(m, u) + 1.0; /* +1: a unit of no FLOPs still counts a little */
    hi += w[u];
    if (w[u] > lo) lo = w[u];
  }
  for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (cut(w, n, k, mid, first) == 0)
      hi = mid;
    else
      lo = mid;
  }
  cut(w, n, k, hi, first);
  free(w);
  return GP_OK;
}

gp_status gp_plan_make(const gp_model *m, const gp_pipeline_spec *ps, gp_plan *out) {
  memset(out, 0, sizeof *out);
  int k = ps->stages;
  if (k < 1 || k > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "stages must be in [1, %d], got %d", GP_MAX_DEVICES, k);
  if (k > m->n_units)
    return GP_ERR(GP_ERR_USAGE, "cannot cut %d units into %d stages (at most %d)", m->n_units, k,
                  m->n_units);
  if (ps->micro_batches < 1)
    return GP_ERR(GP_ERR_USAGE, "micro-batches must be >= 1, got %d", ps->micro_batches);
  out->stages = k;
  out->micro = ps->micro_batches;
  out->schedule = ps->schedule;
  out->remat = ps->remat;
  int first[GP_MAX_DEVICES + 1];
  if (ps->n_balance) {
    if (ps->n_balance != k)
      return GP_ERR(GP_ERR_USAGE, "balance has %d entries for %d stages", ps->n_balance, k);
    int u = 0;
    for (int s = 0; s < k; s++) {
      if (ps->balance[s] < 1)
        return GP_ERR(GP_ERR_USAGE, "balance entry %d is %d; every stage needs a unit", s + 1,
                      ps->balance[s]);
      first[s] = u;
      u += ps->balance[s];
    }
    if (u != m->n_units)
      return GP_ERR(GP_ERR_USAGE, "balance sums to %d units, the model has %d", u, m->n_units);
  } else {
    GP_TRY(even_split(m, k, first));
  }
  first[k] = m->n_units;
  if (ps->n_devices != 1 && ps->n_devices != k)
    return GP_ERR(GP_ERR_USAGE, "%d devices for %d stages (give one, or one per stage)",
                  ps->n_devices, k);
  for (int s = 0; s < k; s++) {
    gp_stage_range *r = &out->st[s];
    r->first_unit = first[s];
    r->end_unit = first[s + 1];
    r->first_node = m->unit_first[r->first_unit];
    r->end_node = m->unit_first[r->end_unit];
    const char *dev = ps->n_devices ? ps->devices[ps->n_devices == 1 ? 0 : s] : "cpu";
    if (strcmp(dev, "cpu") != 0)
      return GP_ERR(GP_ERR_UNSUPPORTED,
                    "device '%s': only 'cpu' stages are supported by this build so far", dev);
    snprintf(r->device, sizeof r->device, "%s", dev);
  }
  return GP_OK;
}

void gp_plan_balance_str(const gp_plan *p, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int s = 0; s < p->stages && k < n; s++)
    k +=
        (size_t)snprintf(buf + k, n - k, s ? ",%d" : "%d", p->st[s].end_unit - p->st[s].first_unit);
}
