/* Multi-process predictions: the pipeline simulated with hand-off times on the links between
 * processes, bucketed ring all-reduces queued behind each process's last backwards, memory
 * per process from the stages' estimates, and bytes per link. */
#include "core/plan/predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/schedule/schedule.h"

double gp_dist_allreduce_s(double bytes, int replicas, const gp_link *k) {
  if (replicas <= 1 || bytes <= 0) return 0;
  double R = replicas;
  return 2 * (R - 1) / R * bytes / k->bytes_per_s + 2 * (R - 1) * k->latency_s;
}

static int host_of(const gp_dist_req *q, int rank) {
  return rank / q->procs_per_host;
}

typedef struct bucket {
  double ready, bytes;
} bucket;

static int by_ready(const void *a, const void *b) {
  double x = ((const bucket *)a)->ready, y = ((const bucket *)b)->ready;
  return (x > y) - (x < y);
}

/* The end of stage s's last backward, and its start (after any recompute). Interleaved: the
 * events are the devices' (ev->stages of them), stage s being chunk s / devices of device
 * s % devices. */
static void last_backward(const gp_sim_events *ev, int s, double *start, double *end) {
  const int dev = s % ev->stages, chunk = s / ev->stages;
  *start = *end = 0;
  for (int i = 0; i < ev->n[dev]; i++) {
    const gp_sim_event *e = &ev->event[dev][i];
    if (e->kind == GP_A_BACKWARD && e->chunk == chunk && e->end >= *end)
      *start = e->start, *end = e->end;
  }
}

/* Position p's buckets: each stage's units from the last down (the order its backward
 * completes their gradients), grouped to at least the bucket size, ready when the last
 * micro-batch's backward has passed the bucket's first unit. */
static int buckets_of(const gp_dist_req *q, const gp_sim_events *ev, int p, bucket *out) {
  const gp_unit_costs *c = q->c;
  const gp_partition *pt = q->p;
  double size = q->bucket_bytes > 0 ? q->bucket_bytes : GP_DIST_BUCKET_BYTES;
  int n = 0;
  for (int s = 0; s < pt->stages; s++) {
    if (gp_layout_owner(q->l, s) != p) continue;
    double start, end, t, acc = 0;
    last_backward(ev, s, &start, &end);
    double speed = q->r->speed ? q->r->speed[s] : 1.0;
    t = start;
    for (int u = pt->first[s + 1] - 1; u >= pt->first[s]; u--) {
      t += c->bwd[u] * q->seconds_per_cost / speed;
      acc += 4.0 * (double)c->params[u];
      if (acc > 0 && (acc >= size || u == pt->first[s])) {
        out[n++] = (bucket){fmin(t, end), acc};
        acc = 0;
      }
    }
  }
  qsort(out, (size_t)n, sizeof *out, by_ready);
  return n;
}

static gp_status check(const gp_dist_req *q) {
  if (!q || !q->c || !q->r || !q->p || !q->l || q->seconds_per_cost <= 0 ||
      !isfinite(q->seconds_per_cost))
    return GP_ERR(GP_ERR_USAGE, "predict: incomplete request");
  if (q->l->stages != q->p->stages || q->r->stages != q->p->stages)
    return GP_ERR(GP_ERR_USAGE, "predict: the layout has %d stages, the split %d", q->l->stages,
                  q->p->stages);
  if ((q->l->chunks > 1 ? q->l->chunks : 1) != (q->r->chunks > 1 ? q->r->chunks : 1))
    return GP_ERR(GP_ERR_USAGE, "predict: the layout has %d chunks a device, the split %d",
                  q->l->chunks, q->r->chunks);
  if (q->procs_per_host < 1) return GP_ERR(GP_ERR_USAGE, "predict: no processes per host");
  if (!(q->local.bytes_per_s > 0) || !(q->remote.bytes_per_s > 0) || !(q->local.latency_s >= 0) ||
      !(q->remote.latency_s >= 0))
    return GP_ERR(GP_ERR_USAGE, "predict: a link needs a bandwidth > 0 and a latency >= 0");
  return GP_OK;
}

/* Which pairs cross hosts, what each process holds, the stage costs with hand-offs, and the
 * hand-offs' bytes on each kind of link. A process holds a run of stages, or under interleaved
 * schedules its devices' chunks (gp_layout_owner says which), each chunk handing its output to
 * the next chunk's process (the last device's back to the first's). */
static void place(const gp_dist_req *q, gp_dist_pred *out, gp_stage_cost *cost) {
  const gp_layout *l = q->l;
  const gp_unit_costs *c = q->c;
  const gp_partition *pt = q->p;
  const gp_partition_req *r = q->r;
  int K = pt->stages, P = l->procs, R = l->replicas;
  out->procs = P;
  for (int s = 0; s < K; s++) {
    double f = 0, b = 0, w = 0, speed = r->speed ? r->speed[s] : 1.0;
    for (int u = pt->first[s]; u < pt->first[s + 1]; u++) /* W: solve.c's share, half */
      f += c->fwd[u], b += c->bwd[u], w += c->params[u] > 0 ? 0.5 * c->bwd[u] : 0.0;
    cost[s] = (gp_stage_cost){.fwd = f * q->seconds_per_cost / speed,
                              .bwd = b * q->seconds_per_cost / speed,
                              .wgt = w * q->seconds_per_cost / speed,
                              .input_bytes = (double)c->cut_bytes[pt->first[s]]};
  }
  for (int p = 0; p < P; p++) {
    gp_dist_proc *d = &out->proc[p];
    memset(d, 0, sizeof *d);
    d->first_stage = l->first[p];
    d->end_stage = l->first[p + 1];
    for (int s = 0; s < K; s++) {
      if (gp_layout_owner(l, s) != p) continue;
      double params = 0;
      for (int u = pt->first[s]; u < pt->first[s + 1]; u++)
        params += (double)c->params[u];
      double state = 4.0 * params * (2.0 + r->optim_slots);
      d->params += params;
      d->mem_state += state;
      d->mem_act += pt->memory[s] - state;
      double rf = r->remat == GP_REMAT_AUTO      ? pt->recomputed[s] / (double)r->micro
                  : gp_partition_remats(r, K, s) ? 1.0
                                                 : 0.0;
      d->compute_s += cost[s].fwd + cost[s].bwd + rf * cost[s].fwd;
      /* an input received from another process is a copy (remat auto: the slots that keep
       * their activations want it) */
      if (s > 0 && gp_layout_owner(l, s - 1) != p && !gp_partition_remats(r, K, s))
        d->mem_handoff +=
            (gp_partition_in_flight(r, K, s) - pt->drop[s] * (r->remat == GP_REMAT_AUTO)) *
            (double)c->cut_bytes[pt->first[s]];
      /* the hand-off to the next stage's process: per micro-batch, its sum over the process's
       * boundaries (one without chunks) */
      const int to = s + 1 < K ? gp_layout_owner(l, s + 1) : p;
      if (to == p) continue;
      int remote = 0;
      for (int rep = 0; rep < R; rep++)
        remote += host_of(q, gp_layout_rank(l, rep, p)) != host_of(q, gp_layout_rank(l, rep, to));
      const gp_link *k = remote ? &q->remote : &q->local;
      const double bytes = (double)c->cut_bytes[pt->first[s + 1]];
      cost[s].send = k->latency_s + bytes / k->bytes_per_s;
      d->send_bytes += bytes;
      d->send_s += cost[s].send;
      if (remote > d->send_remote) d->send_remote = remote;
      if (cost[s].send > out->handoff_s_max) out->handoff_s_max = cost[s].send;
      /* each pair: M activations forward, M gradients back */
      out->bytes_remote += remote * 2.0 * r->micro * bytes;
      out->bytes_local += (R - remote) * 2.0 * r->micro * bytes;
    }
    d->mem_total = d->mem_state + d->mem_act + d->mem_handoff;
    if (d->mem_total > out->mem_max) out->mem_max = d->mem_total;
    d->ar_bytes = 4.0 * d->params;
    if (R > 1) {
      for (int rep = 0; rep < R; rep++)
        d->ar_remote += host_of(q, gp_layout_rank(l, rep, p)) !=
                        host_of(q, gp_layout_rank(l, (rep + 1) % R, p));
      d->ar_sent = 2.0 * (R - 1) / R * d->ar_bytes;
    }
  }
}

/* Each position's buckets queued on its ring in the order they become ready. */
static gp_status allreduce(const gp_dist_req *q, const gp_sim_events *ev, gp_dist_pred *out) {
  const gp_layout *l = q->l;
  bucket *bk = malloc(sizeof *bk * (size_t)(q->c->n > 0 ? q->c->n : 1));
  if (!bk) return GP_ERR(GP_ERR_NOMEM, "predict: out of memory");
  for (int p = 0; p < l->procs; p++) {
    gp_dist_proc *d = &out->proc[p];
    for (int s = 0; s < l->stages; s++) {
      if (gp_layout_owner(l, s) != p) continue;
      double st, en;
      last_backward(ev, s, &st, &en);
      d->bwd_end = fmax(d->bwd_end, en);
    }
    if (l->replicas < 2) continue;
    const gp_link *k = d->ar_remote ? &q->remote : &q->local;
    int n = buckets_of(q, ev, p, bk);
    double t = 0;
    for (int i = 0; i < n; i++) {
      double t0 = fmax(t, bk[i].ready), dt = gp_dist_allreduce_s(bk[i].bytes, l->replicas, k);
      t = t0 + dt;
      d->ar_s += dt;
      d->ar_hidden_s += fmax(0.0, fmin(t, out->pipeline_s) - t0);
    }
    d->ar_buckets = n;
    d->ar_end = t;
    out->ar_s += d->ar_s;
    out->ar_hidden_s += d->ar_hidden_s;
  }
  free(bk);
  return GP_OK;
}

/* Processes of a host beyond its devices share them, local rank l on device l mod D: a device
 * holds the memory of every process on it. */
static gp_status devices(const gp_dist_req *q, gp_dist_pred *out) {
  int G = q->procs_per_host, W = q->l->world, P = q->l->procs;
  int D = q->devices_per_host > 0 && q->devices_per_host < G ? q->devices_per_host : G;
  double *mem = malloc(sizeof *mem * (size_t)D);
  if (!mem) return GP_ERR(GP_ERR_NOMEM, "predict: out of memory");
  for (int h = 0; h * G < W; h++) {
    memset(mem, 0, sizeof *mem * (size_t)D);
    for (int l = 0; l < G && h * G + l < W; l++) {
      int dev = l % D;
      mem[dev] += out->proc[(h * G + l) % P].mem_total;
      if (mem[dev] > out->dev_mem_max) out->dev_mem_max = mem[dev];
    }
  }
  free(mem);
  out->dev_share = (G + D - 1) / D;
  return GP_OK;
}

/* The devices the simulation shares: a process's CPU stages share its cores, one each when
 * there are fewer cores than stages; every other stage has a device of its own. Returns the
 * most CPU stages that take turns on one process's cores (0: none do). */
static int cpu_turns(const gp_dist_req *q, const gp_dist_pred *out, int *device, int *slots,
                     int *devices) {
  int most = 0, n = 0;
  for (int p = 0; p < out->procs; p++) {
    const gp_dist_proc *d = &out->proc[p];
    int cpus = 0, dev = n++;
    for (int s = d->first_stage; s < d->end_stage; s++) {
      if (q->cpu && !q->cpu[s]) {
        device[s] = n;
        slots[n++] = 1;
        continue;
      }
      device[s] = dev;
      cpus++;
    }
    slots[dev] = q->cores > 0 ? q->cores : cpus > 0 ? cpus : 1;
    if (q->cores > 0 && cpus > q->cores && cpus > most) most = cpus;
  }
  *devices = n;
  return most;
}

gp_status gp_dist_predict(const gp_dist_req *q, gp_dist_pred *out) {
  GP_TRY(check(q));
  memset(out, 0, sizeof *out);
  int K = q->p->stages, M = q->r->micro, R = q->l->replicas;
  gp_stage_cost cost[GP_MAX_DEVICES];
  place(q, out, cost);
  GP_TRY(devices(q, out));
  gp_schedule sc;
  if (q->r->schedule == GP_SCHED_INTERLEAVED) /* the devices' lists, over their chunks */
    GP_TRY(gp_schedule_build_interleaved(K / q->r->chunks, M, q->r->chunks, &sc));
  else if (q->r->remat == GP_REMAT_AUTO)
    GP_TRY(gp_schedule_build_drops(q->r->schedule, K, M, q->p->drop, &sc));
  else
    GP_TRY(gp_schedule_build(q->r->schedule, q->r->remat, K, M, &sc));
  gp_sim_result res = {0};
  gp_sim_events ev = {0};
  int device[GP_MAX_DEVICES], slots[2 * GP_MAX_DEVICES]; /* a device a process, one a GPU stage */
  int n_dev = 0, turns = cpu_turns(q, out, device, slots, &n_dev);
  gp_sim_share share = {device, slots, n_dev};
  gp_status st = gp_schedule_simulate_shared(&sc, cost, turns ? &share : NULL, &res, &ev);
  gp_schedule_free(&sc);
  if (st == GP_OK) {
    out->pipeline_s = res.makespan;
    out->bubble = res.bubble;
    st = allreduce(q, &ev, out);
  }
  gp_sim_result_free(&res);
  gp_sim_events_free(&ev);
  GP_TRY(st);
  out->step_s = out->pipeline_s;
  out->turns = turns;
  for (int p = 0; p < out->procs; p++) {
    const gp_dist_proc *d = &out->proc[p];
    out->step_s = fmax(out->step_s, d->ar_end);
    /* each ring edge carries what one process sends (the hand-offs: place) */
    double edge = d->ar_sent;
    out->bytes_remote += d->ar_remote * edge;
    out->bytes_local += (R > 1 ? R - d->ar_remote : 0) * edge;
  }
  return GP_OK;
}
