/* pipeline.schedule auto: every named schedule simulated on its split (interleaved at each V
 * it can take), hand-offs between processes charged alike (solve.c), the fastest that fits. */
#include "core/plan/choose.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/plan.h"

/* Whether device d's chunks (d, d + K, ..) fit its limit together, for every d of K. */
static int devices_fit(const gp_partition *p, int K, const double *dev_limit) {
  for (int d = 0; dev_limit && d < K; d++)
    if (dev_limit[d] > 0 && gp_partition_device_memory(p, K, d) > dev_limit[d]) return 0;
  return 1;
}

double gp_partition_device_memory(const gp_partition *p, int K, int d) {
  double m = 0;
  for (int s = d; s < p->stages; s += K)
    m += p->memory[s];
  return m;
}

gp_status gp_partition_solve_devices(const gp_unit_costs *c, const gp_partition_req *r,
                                     const double *dev_limit, gp_partition *out) {
  const int V = r->chunks > 1 ? r->chunks : 1, K = r->stages / V;
  gp_partition_req q = *r;
  q.mem_limit = NULL;
  GP_TRY(gp_partition_solve(c, &q, out));
  int any = 0;
  for (int d = 0; dev_limit && d < K; d++)
    any |= dev_limit[d] > 0;
  if (!any || devices_fit(out, K, dev_limit)) return GP_OK;
  /* the fastest split does not fit: one that does, each chunk held to a V-th of its device
   * (chunk 0 holds more micro-batches than chunk K, so this is safe rather than tight) */
  double lim[GP_MAX_DEVICES];
  for (int s = 0; s < r->stages; s++)
    lim[s] = dev_limit[s % K] / V;
  q.mem_limit = lim;
  gp_status s = gp_partition_solve(c, &q, out);
  if (s == GP_OK && !devices_fit(out, K, dev_limit)) /* a V-th's rounding, at most */
    s = GP_ERR(GP_ERR_USAGE, "interleaved: no split into %d chunks fits the memory limit",
               r->stages);
  if (s != GP_OK) {
    char why[400];
    snprintf(why, sizeof why, "%s", gp_error_message());
    gp_error_clear();
    return GP_ERR(s, "interleaved, %d chunks a stage (each in a %d-th of the limit): %s", V, V,
                  why);
  }
  return GP_OK;
}

/* Interleaved at V chunks a stage, on the partitioner's own split of the K V chunks: why it
 * cannot run (in why, non-GP_OK), else its partition. */
static gp_status interleaved(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                             int V, gp_partition *p, char *why, size_t n) {
  const int K = r->stages;
  if (r->procs > 1 && !gp_partition_charges_handoffs(r)) {
    /* its K V - 1 hand-offs against the others' K - 1 cannot be weighed in these units */
    snprintf(why, n,
             "interleaved across processes is weighed on unit times (--by time) or a device "
             "rate, in which its hand-offs are charged");
  } else if (first) {
    snprintf(why, n, "the split given is of %d stages; interleaved V=%d needs %d chunks", K, V,
             K * V);
  } else if (K < 2) {
    snprintf(why, n, "interleaved needs 2 or more stages");
  } else if (K * V > c->n || K * V > GP_MAX_DEVICES) {
    snprintf(why, n, "cannot cut %d units into %d stages x %d chunks", c->n, K, V);
  } else if (r->micro % K) {
    snprintf(why, n, "interleaved takes micro-batches in groups of the %d stages (M = %d)", K,
             r->micro);
  } else {
    double speed[GP_MAX_DEVICES];
    gp_partition_req q = *r;
    q.schedule = GP_SCHED_INTERLEAVED;
    q.remat = GP_REMAT_NEVER;
    q.stages = K * V;
    q.chunks = V;
    q.mem_limit = NULL;
    for (int s = 0; r->speed && s < K * V; s++) /* a chunk runs at its device's speed */
      speed[s] = r->speed[s % K];
    if (r->speed) q.speed = speed;
    gp_status s = gp_partition_solve_devices(c, &q, r->mem_limit, p);
    if (s == GP_OK) return GP_OK;
    snprintf(why, n, "%s", gp_error_message());
    gp_error_clear();
    return s;
  }
  return GP_ERR_USAGE;
}

gp_status gp_schedule_choose(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                             gp_schedule_choice *ch, gp_partition *out) {
  memset(ch, 0, sizeof *ch);
  ch->chosen = -1;
  const char *const *names = gp_schedule_names();
  gp_status first_err = GP_OK;
  char first_msg[512] = "";
  /* the candidates: each named schedule, interleaved once a V (2 .. GP_CHOOSE_V) */
  for (int i = 0; names[i]; i++)
    for (int v = 1 + (i == GP_SCHED_INTERLEAVED);
         ch->n < GP_CHOOSE_MAX && v <= (i == GP_SCHED_INTERLEAVED ? GP_CHOOSE_V : 1); v++) {
      ch->kind[ch->n] = (gp_schedule_kind)i;
      ch->chunks[ch->n++] = v;
    }
  for (int at = 0; at < ch->n; at++) {
    const int i = (int)ch->kind[at], v = ch->chunks[at];
    gp_partition_req q = *r;
    q.schedule = ch->kind[at];
    if (gp_schedule_keeps_all(q.schedule)) { /* they re-materialize nothing */
      if (q.remat == GP_REMAT_ALWAYS || q.remat == GP_REMAT_EXCEPT_LAST) {
        snprintf(ch->why[at], sizeof ch->why[at], "%s re-materializes nothing (remat %s asked)",
                 names[i], gp_remat_names()[q.remat]);
        continue;
      }
      q.remat = GP_REMAT_NEVER;
    }
    ch->remat[at] = q.remat;
    gp_partition p;
    gp_status s;
    if (v > 1) {
      s = interleaved(c, r, first, v, &p, ch->why[at], sizeof ch->why[at]);
      if (s != GP_OK) continue; /* first_err: the others' (gpipe's), whose split is K stages */
    } else {
      s = first ? gp_partition_evaluate(c, &q, first, &p) : gp_partition_solve(c, &q, &p);
    }
    /* a given split is evaluated, not fitted: a stage past its limit rules the schedule out */
    for (int k = 0; s == GP_OK && first && r->mem_limit && k < p.stages; k++)
      if (r->mem_limit[k] > 0 && p.memory[k] > r->mem_limit[k])
        s = GP_ERR(GP_ERR_USAGE,
                   "%s: stage %d's estimate (%.2f MiB) passes its limit of %.2f MiB on this split",
                   names[i], k, p.memory[k] / 1048576.0, r->mem_limit[k] / 1048576.0);
    if (s != GP_OK) {
      snprintf(ch->why[at], sizeof ch->why[at], "%s", gp_error_message());
      if (first_err == GP_OK) {
        first_err = s;
        snprintf(first_msg, sizeof first_msg, "%s", gp_error_message());
      }
      gp_error_clear();
      continue;
    }
    ch->runs[at] = 1;
    ch->step[at] = p.makespan;
    ch->bubble[at] = p.bubble;
    for (int d = 0; d < r->stages; d++) /* interleaved: a device's chunks together */
      ch->memory[at] = fmax(ch->memory[at], gp_partition_device_memory(&p, r->stages, d));
    int b = ch->chosen;
    int better = b < 0 || p.makespan < ch->step[b] * (1 - 5e-3) ||
                 (p.makespan <= ch->step[b] * (1 + 5e-3) && ch->memory[at] < ch->memory[b]);
    if (better) {
      ch->chosen = at;
      *out = p;
    }
  }
  if (ch->chosen < 0)
    return GP_ERR(first_err ? first_err : GP_ERR_USAGE, "%s",
                  first_msg[0] ? first_msg : "schedule auto: no schedule is named");
  return GP_OK;
}

const char *gp_schedule_choice_name(const gp_schedule_choice *ch, int i, char *buf, size_t n) {
  const char *name = gp_schedule_names()[ch->kind[i]];
  if (ch->chunks[i] > 1)
    snprintf(buf, n, "%s V=%d", name, ch->chunks[i]);
  else
    snprintf(buf, n, "%s", name);
  return buf;
}

void gp_schedule_choice_str(const gp_schedule_choice *ch, char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  if (ch->chosen < 0) return;
  const double best = ch->step[ch->chosen];
  char name[48];
  size_t k = (size_t)snprintf(buf, n, "%s (simulated step 1.00",
                              gp_schedule_choice_name(ch, ch->chosen, name, sizeof name));
  /* interleaved at no V: once, by its name alone */
  int inter_runs = 0, inter_said = 0;
  for (int i = 0; i < ch->n; i++)
    inter_runs |= ch->chunks[i] > 1 && ch->runs[i];
  for (int i = 0; i < ch->n && k < n; i++) {
    if (i == ch->chosen) continue;
    gp_schedule_choice_name(ch, i, name, sizeof name);
    if (!ch->runs[i] && ch->chunks[i] > 1 && !inter_runs) {
      if (!inter_said++)
        k += (size_t)snprintf(buf + k, n - k, "; %s cannot run", gp_schedule_names()[ch->kind[i]]);
    } else if (!ch->runs[i]) {
      k += (size_t)snprintf(buf + k, n - k, "; %s cannot run", name);
    } else {
      k += (size_t)snprintf(
          buf + k, n - k, "; %s %.2f, memory %.2fx", name, best > 0 ? ch->step[i] / best : 1.0,
          ch->memory[ch->chosen] > 0 ? ch->memory[i] / ch->memory[ch->chosen] : 1.0);
    }
  }
  if (k < n) snprintf(buf + k, n - k, ")");
}
