/* gpipe-partition past one process: the launch (--processes, --replicas) and the machines
 * (--hosts, --procs-per-host, --link-local, --link-remote, --device-tflops, --cluster), each
 * figure with where it came from, and the per-process predictions as a table or JSON. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/machine.h"
#include "cli/partition.h"
#include "core/decimal.h"
#include "core/io/json.h"
#include "core/plan/plan.h"

/* A decimal from lo to hi: no sign, no space, nothing after it. */
static int decimal(const char *s, double lo, double hi, double *out) {
  char *end;
  if (!(isdigit((unsigned char)s[0]) || s[0] == '.')) return 0;
  double v = gp_decimal(s, &end);
  if (end == s || *end || !isfinite(v) || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* "GB/s" or "GB/s,latency-us". */
static gp_status link_flag(const gp_flag *f, gp_link *out) {
  char a[64] = "", b[64] = "";
  const char *comma = strchr(f->s, ',');
  size_t n = comma ? (size_t)(comma - f->s) : strlen(f->s);
  int ok = n < sizeof a && (!comma || strlen(comma + 1) < sizeof b);
  double bw = 0, lat = 0;
  if (ok) {
    memcpy(a, f->s, n);
    if (comma) snprintf(b, sizeof b, "%s", comma + 1);
    ok = decimal(a, 1e-6, 1e5, &bw) && bw > 0 && (!comma || decimal(b, 0, 1e7, &lat));
  }
  if (!ok)
    return GP_ERR(GP_ERR_USAGE,
                  "%s: expected GB/s[,latency in microseconds] (like 12.5 or 12.5,10), got '%s'",
                  f->name, f->s);
  *out = (gp_link){bw * 1e9, comma ? lat * 1e-6 : -1, ""};
  snprintf(out->source, sizeof out->source, "%s", f->name);
  return GP_OK;
}

/* A link the flags or the file gave in part or not at all: the default fills in, and says so. */
static void link_fill(gp_link *k, const gp_link *dflt) {
  if (!(k->bytes_per_s > 0)) {
    *k = *dflt;
  } else if (k->latency_s < 0) {
    char src[sizeof k->source];
    snprintf(src, sizeof src, "%s", k->source);
    k->latency_s = dflt->latency_s;
    snprintf(k->source, sizeof k->source, "%.100s; latency %g us by default", src,
             dflt->latency_s * 1e6);
  }
}

static gp_status int_flag(const gp_flag *f, int *v, char *src, size_t n) {
  if (!f->given) return GP_OK;
  *v = (int)f->i;
  snprintf(src, n, "%s", f->name);
  return GP_OK;
}

gp_status gp_part_dist_setup(const gp_part_dist_flags *f, gp_part_request *q, gp_part_dist *d) {
  memset(d, 0, sizeof *d);
  const gp_flag *all[] = {f->processes, f->replicas, f->hosts,  f->pph,
                          f->local,     f->remote,   f->tflops, f->cluster};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    d->on |= all[i]->given;
  d->on |= q->replicas > 1; /* the model file's pipeline.replicas */
  d->world = 1;
  d->replicas = f->replicas->given ? (int)f->replicas->i : q->replicas;
  snprintf(d->src_replicas, sizeof d->src_replicas, "%s",
           f->replicas->given ? "--replicas"
           : q->replicas > 1  ? "the model file's pipeline.replicas"
                              : "default");
  if (!d->on) return GP_OK;
  gp_cluster *cl = &d->cl;
  if (f->cluster->given) GP_TRY(gp_cluster_read(f->cluster->s, cl));
  GP_TRY(int_flag(f->hosts, &cl->hosts, cl->src_hosts, sizeof cl->src_hosts));
  GP_TRY(int_flag(f->pph, &cl->procs_per_host, cl->src_procs, sizeof cl->src_procs));
  if (f->local->given) GP_TRY(link_flag(f->local, &cl->local));
  if (f->remote->given) GP_TRY(link_flag(f->remote, &cl->remote));
  link_fill(&cl->local, &gp_link_local_default);
  link_fill(&cl->remote, &gp_link_remote_default);
  if (f->tflops->given) {
    double t = 0;
    if (!decimal(f->tflops->s, 1e-6, 1e6, &t) || t <= 0)
      return GP_ERR(GP_ERR_USAGE,
                    "--device-tflops: expected TFLOP/s from 0.000001 to 1000000 (like 0.05 or "
                    "312), got '%s'",
                    f->tflops->s);
    cl->device_flops = t * 1e12;
    snprintf(cl->src_flops, sizeof cl->src_flops, "--device-tflops");
  }
  /* W: the flag, else every slot the machines have, else one process a replica */
  if (f->processes->given) {
    d->world = (int)f->processes->i;
    snprintf(d->src_world, sizeof d->src_world, "--processes");
  } else if (cl->hosts && cl->procs_per_host) {
    d->world = cl->hosts * cl->procs_per_host;
    snprintf(d->src_world, sizeof d->src_world, "hosts x processes per host");
  } else {
    d->world = d->replicas; /* a process a replica: the least R replicas can run on */
    snprintf(d->src_world, sizeof d->src_world, "default: %s",
             d->replicas > 1 ? "one a replica" : "one");
  }
  int W = d->world;
  if (!cl->hosts && !cl->procs_per_host) {
    cl->hosts = 1, cl->procs_per_host = W;
    snprintf(cl->src_hosts, sizeof cl->src_hosts, "default: one host");
    snprintf(cl->src_procs, sizeof cl->src_procs, "default: one host");
  } else if (!cl->procs_per_host) {
    cl->procs_per_host = (W + cl->hosts - 1) / cl->hosts;
    snprintf(cl->src_procs, sizeof cl->src_procs, "%d processes over %d hosts", W, cl->hosts);
  } else if (!cl->hosts) {
    cl->hosts = (W + cl->procs_per_host - 1) / cl->procs_per_host;
    snprintf(cl->src_hosts, sizeof cl->src_hosts, "%d processes, %d a host", W, cl->procs_per_host);
  }
  if ((int64_t)cl->hosts * cl->procs_per_host < W)
    return GP_ERR(GP_ERR_USAGE,
                  "%d processes do not fit %d host%s of %d processes (%s; %s): give more "
                  "--hosts or --procs-per-host, or fewer --processes",
                  W, cl->hosts, cl->hosts == 1 ? "" : "s", cl->procs_per_host, cl->src_hosts,
                  cl->src_procs);
  /* a process holds a run of stages (interleaved: of devices, with their chunks) */
  GP_TRY(gp_layout_make(W, 0, d->replicas, q->stages / q->chunks, NULL, &d->layout));
  gp_layout_interleave(&d->layout, q->chunks);
  int R = d->replicas;
  /* the batch is global: replica r takes its slice, and cuts that into M micro-batches */
  if (q->batch < R)
    return GP_ERR(GP_ERR_USAGE,
                  "a batch of %" PRId64 " cannot be shared by %d replicas (each "
                  "needs a sample): use --batch-size %d or more, or fewer --replicas",
                  q->batch, R, R);
  if (q->micro > q->batch / R)
    return GP_ERR(GP_ERR_USAGE,
                  "%d micro-batches but a replica's share of the batch of %" PRId64 " is %" PRId64
                  " samples: use --micro-batches %" PRId64 " or fewer, or a larger "
                  "--batch-size",
                  q->micro, q->batch, q->batch / R, q->batch / R);
  q->replicas = R;
  q->replica_batch = (q->batch + R - 1) / R;
  q->micro_batch = (q->replica_batch + q->micro - 1) / q->micro;
  return GP_OK;
}

gp_status gp_part_dist_rate(const gp_part_request *q, gp_part_dist *d) {
  const gp_cluster *cl = &d->cl;
  if (q->by == GP_COST_TIME) {
    d->spc = 1;
    snprintf(d->src_compute, sizeof d->src_compute, "measured here per unit (--by time)");
  } else if (cl->device_flops > 0) {
    d->spc = 1 / cl->device_flops;
    snprintf(d->src_compute, sizeof d->src_compute, "%g TFLOP/s a device (%s)",
             cl->device_flops / 1e12, cl->src_flops);
  } else if (strcmp(q->devices[0], "cpu") == 0) {
    double g = gp_sgemm_gflops(q->threads);
    if (!(g > 0)) return GP_ERR(GP_ERR_NOMEM, "cannot measure sgemm here: give --device-tflops");
    d->spc = 1 / (g * 1e9);
    snprintf(d->src_compute, sizeof d->src_compute,
             "%.1f GFLOP/s a device (measured here: sgemm 1024^3, %d thread%s)", g, q->threads,
             q->threads == 1 ? "" : "s");
  } else {
    /* a GPU here stands for the cluster's, as this CPU does for CPU stages; none: ask */
    int ordinal = atoi(q->devices[0] + 5); /* canonical "cuda:N" */
    double g = gp_gpu_gemm_gflops(ordinal, GP_PREC_FP32);
    if (!(g > 0))
      return GP_ERR(GP_ERR_USAGE,
                    "the stages run on %s, which this machine cannot measure: give their rate "
                    "with --device-tflops T (or device_tflops: in --cluster) to predict times",
                    q->devices[0]);
    d->spc = 1 / (g * 1e9);
    snprintf(d->src_compute, sizeof d->src_compute,
             "%.1f GFLOP/s a device (measured here: fp32 GEMM 4096^3 on %s)", g, q->devices[0]);
  }
  return GP_OK;
}

const gp_link *gp_part_dist_link(const gp_part_dist *d) {
  const int P = d->layout.procs, pph = d->cl.procs_per_host;
  for (int r = 0; P > 1 && pph > 0 && r < d->replicas; r++) /* ranks fill hosts in order */
    if (r * P / pph != (r * P + P - 1) / pph) return &d->cl.remote;
  return &d->cl.local;
}

gp_status gp_part_dist_predict(const gp_part_request *q, const gp_unit_costs *tc,
                               const gp_partition_req *r, const gp_partition *p, gp_part_dist *d) {
  gp_cluster *cl = &d->cl;
  /* a replica's processes take contiguous runs of its stages balanced by their times
   * (interleaved: of its devices, each the sum of its chunks) */
  int procs_of[GP_MAX_DEVICES];
  double dev_time[GP_MAX_DEVICES] = {0};
  gp_layout *l = &d->layout;
  const int devs = p->stages / q->chunks;
  for (int s = 0; s < p->stages; s++)
    dev_time[s % devs] += p->time[s];
  gp_layout_balance(dev_time, devs, l->procs, procs_of);
  GP_TRY(gp_layout_make(l->world, 0, l->replicas, devs, procs_of, l));
  gp_layout_interleave(l, q->chunks);
  unsigned char cpu[GP_MAX_DEVICES];
  for (int s = 0; s < p->stages; s++)
    cpu[s] = strcmp(q->devices[s], "cpu") == 0;
  gp_dist_req dq = {.c = tc,
                    .seconds_per_cost = d->spc,
                    .r = r,
                    .p = p,
                    .l = &d->layout,
                    .procs_per_host = cl->procs_per_host,
                    .devices_per_host = cl->devices_per_host,
                    .local = cl->local,
                    .remote = cl->remote,
                    .cores = d->cores,
                    .cpu = cpu};
  return gp_dist_predict(&dq, &d->pred);
}

/* "12.3 ms": seconds in the unit that reads best. */
static const char *secs(double s, char *buf, size_t n) {
  if (s == 0)
    snprintf(buf, n, "0");
  else if (s < 1e-3)
    snprintf(buf, n, "%.1f us", s * 1e6);
  else if (s < 1)
    snprintf(buf, n, "%.2f ms", s * 1e3);
  else
    snprintf(buf, n, "%.3f s", s);
  return buf;
}

static const char *link_word(int remote, int of, char *buf, size_t n) {
  if (of == 0 || remote == 0)
    snprintf(buf, n, "%s", of ? "local" : "-");
  else if (remote == of)
    snprintf(buf, n, "remote");
  else
    snprintf(buf, n, "remote %d/%d", remote, of);
  return buf;
}

static const char *link_str(const gp_link *k, char *buf, size_t n) {
  char b[32];
  snprintf(buf, n, "%g GB/s, %s (%s)", k->bytes_per_s / 1e9, secs(k->latency_s, b, sizeof b),
           k->source);
  return buf;
}

void gp_part_dist_print_table(const gp_part_request *q, const gp_part_dist *d) {
  const gp_cluster *cl = &d->cl;
  const gp_dist_pred *e = &d->pred;
  const gp_layout *l = &d->layout;
  int R = l->replicas, P = l->procs;
  char a[64], b[64], c[64], g[64], h[64], k1[320], k2[320];
  printf("\nlaunch      %d process%s (%s) = %d replica%s (%s) x %d a replica, on %d host%s (%s) x "
         "%d (%s); ranks fill hosts in order, replica r's rank = r x %d + position\n",
         l->world, l->world == 1 ? "" : "es", d->src_world, R, R == 1 ? "" : "s", d->src_replicas,
         P, cl->hosts, cl->hosts == 1 ? "" : "s", cl->src_hosts, cl->procs_per_host, cl->src_procs,
         P);
  printf("assumptions compute %s; within a host %s; across hosts %s; f32 gradients all-reduced "
         "by ring in %s buckets; micro-batch %" PRId64 "\n\n",
         d->src_compute, link_str(&cl->local, k1, sizeof k1), link_str(&cl->remote, k2, sizeof k2),
         gp_args_bytes_str(GP_DIST_BUCKET_BYTES, 0, a, sizeof a), q->micro_batch);
  printf("proc  stages  host  %12s  %10s  %11s  %9s  %10s  %11s  %10s  %-11s  %10s  %10s  %-11s  "
         "%10s  %6s\n",
         "params", "state", "activations", "hand-off", "memory", "compute/mb", "send/mb", "link",
         "send time", "all-reduce", "link", "time", "hidden");
  for (int p = 0; p < P; p++) {
    const gp_dist_proc *x = &e->proc[p];
    const int sends = p < P - 1 || l->chunks > 1; /* interleaved: the last back to the first */
    char st[32], m[4][32], sb[32], lk[32], ab[32], al[32];
    if (x->end_stage - x->first_stage == 1)
      snprintf(st, sizeof st, "%d", x->first_stage);
    else
      snprintf(st, sizeof st, "%d-%d", x->first_stage, x->end_stage - 1);
    printf("%4d  %-6s  %4d  %12.0f  %10s  %11s  %9s  %10s  %11s  %10s  %-11s  %10s  %10s  %-11s  "
           "%10s  %5.1f%%\n",
           p, st, p / cl->procs_per_host, x->params,
           gp_args_bytes_str(x->mem_state, 1, m[0], sizeof m[0]),
           gp_args_bytes_str(x->mem_act, 1, m[1], sizeof m[1]),
           gp_args_bytes_str(x->mem_handoff, 1, m[2], sizeof m[2]),
           gp_args_bytes_str(x->mem_total, 1, m[3], sizeof m[3]), secs(x->compute_s, a, sizeof a),
           sends ? gp_args_bytes_str(x->send_bytes, 1, sb, sizeof sb) : "-",
           link_word(x->send_remote, sends ? R : 0, lk, sizeof lk),
           sends ? secs(x->send_s, b, sizeof b) : "-",
           R > 1 ? gp_args_bytes_str(x->ar_sent, 1, ab, sizeof ab) : "-",
           link_word(x->ar_remote, R > 1 ? R : 0, al, sizeof al), secs(x->ar_s, c, sizeof c),
           x->ar_s > 0 ? 100 * x->ar_hidden_s / x->ar_s : 100.0);
  }
  double exposed = e->step_s - e->pipeline_s;
  printf("\nstep time   %s predicted: the pipeline %s (M = %d, bubble %.1f%%, hand-offs "
         "included) + %s of all-reduce not hidden; %.1f samples/s (batch %" PRId64 ")\n",
         secs(e->step_s, a, sizeof a), secs(e->pipeline_s, b, sizeof b), q->micro, 100 * e->bubble,
         secs(exposed, c, sizeof c), e->step_s > 0 ? q->batch / e->step_s : 0.0, q->batch);
  if (R > 1)
    printf("all-reduce  %s a step over one replica's %d processes, %.1f%% of it hidden under the "
           "backward and the pipeline's drain (ring: 2(R-1)/R x 4 x params sent a process, "
           "2(R-1) latencies a bucket)\n",
           secs(e->ar_s, a, sizeof a), P, e->ar_s > 0 ? 100 * e->ar_hidden_s / e->ar_s : 100.0);
  printf("traffic     a step, all %d processes: %s across hosts, %s within hosts (a neighbouring "
         "pair: M activations forward + M gradients back; an all-reduce ring edge: what one "
         "process sends)\n",
         l->world, gp_args_bytes_str(e->bytes_remote, 1, g, sizeof g),
         gp_args_bytes_str(e->bytes_local, 1, h, sizeof h));
  int most = 0;
  for (int p = 0; p < P; p++)
    if (e->proc[p].end_stage - e->proc[p].first_stage > most)
      most = e->proc[p].end_stage - e->proc[p].first_stage;
  if (e->turns)
    printf("cores       %d a process (%s): a process's %d CPU stages take turns on them, a core "
           "each, as simulated\n",
           d->cores, d->src_cores, e->turns);
  else if (most > 1)
    printf("note        a process holds up to %d stages, each predicted at a device's full rate, "
           "as threads on devices (or %d cores, %s) of their own; GPU stages sharing one device "
           "run slower: say so with --speeds\n",
           most, d->cores, d->src_cores);
  printf("memory      the fullest process needs %s", gp_args_bytes_str(e->mem_max, 1, a, sizeof a));
  if (e->dev_share > 1)
    printf(", the fullest device %s (%d processes share a device: %d devices a host, %s)",
           gp_args_bytes_str(e->dev_mem_max, 1, c, sizeof c), e->dev_share, cl->devices_per_host,
           cl->src_devices);
  if (cl->device_memory > 0)
    printf("; %s the %s a device (%s)", e->dev_mem_max <= cl->device_memory ? "fits" : "EXCEEDS",
           gp_args_bytes_str(cl->device_memory, 1, b, sizeof b), cl->src_memory);
  printf(" (weights, gradients and optimizer state; the stages' activations and buffers; "
         "received inputs)\n");
}

static void num(double v) {
  char buf[32];
  if (isfinite(v))
    fputs(gp_decimal_shortest(v, buf, sizeof buf), stdout);
  else
    printf("null");
}

static void json_link(const char *name, const gp_link *k) {
  printf(", \"%s\": {\"bytes_per_s\": ", name);
  num(k->bytes_per_s);
  printf(", \"latency_s\": ");
  num(k->latency_s);
  printf(", \"source\": ");
  gp_json_write_str(stdout, k->source);
  printf("}");
}

void gp_part_dist_print_json(const gp_part_request *q, const gp_part_dist *d) {
  const gp_cluster *cl = &d->cl;
  const gp_dist_pred *e = &d->pred;
  const gp_layout *l = &d->layout;
  printf(",\n \"distributed\": {\"processes\": %d, \"replicas\": %d, \"procs_per_replica\": %d, "
         "\"hosts\": %d, \"procs_per_host\": %d, \"replica_batch\": %" PRId64
         ", \"micro_batch_size\": %" PRId64 ", \"seconds_per_cost\": ",
         l->world, l->replicas, l->procs, cl->hosts, cl->procs_per_host, q->replica_batch,
         q->micro_batch);
  num(d->spc);
  printf(", \"cores_per_process\": %d, \"stages_taking_turns\": %d", d->cores, e->turns);
  printf(", \"processes_source\": ");
  gp_json_write_str(stdout, d->src_world);
  printf(", \"replicas_source\": ");
  gp_json_write_str(stdout, d->src_replicas);
  printf(", \"compute_source\": ");
  gp_json_write_str(stdout, d->src_compute);
  json_link("link_local", &cl->local);
  json_link("link_remote", &cl->remote);
  printf(", \"bucket_bytes\": ");
  num(GP_DIST_BUCKET_BYTES);
  printf(", \"device_memory_bytes\": ");
  num(cl->device_memory > 0 ? cl->device_memory : NAN);
  printf(",\n  \"positions\": [");
  for (int p = 0; p < l->procs; p++) {
    const gp_dist_proc *x = &e->proc[p];
    printf("%s{\"position\": %d, \"first_stage\": %d, \"last_stage\": %d, \"host\": %d, "
           "\"params\": ",
           p ? ",\n   " : "\n   ", p, x->first_stage, x->end_stage - 1, p / cl->procs_per_host);
    num(x->params);
    const char *k[] = {"memory_state_bytes",
                       "memory_activation_bytes",
                       "memory_handoff_bytes",
                       "memory_bytes",
                       "compute_s",
                       "send_bytes",
                       "send_s",
                       "allreduce_bytes",
                       "allreduce_sent_bytes",
                       "allreduce_s",
                       "allreduce_hidden_s",
                       "allreduce_end_s",
                       "backward_end_s"};
    double v[] = {x->mem_state,   x->mem_act, x->mem_handoff, x->mem_total, x->compute_s,
                  x->send_bytes,  x->send_s,  x->ar_bytes,    x->ar_sent,   x->ar_s,
                  x->ar_hidden_s, x->ar_end,  x->bwd_end};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
      printf(", \"%s\": ", k[i]);
      num(v[i]);
    }
    printf(", \"send_remote_replicas\": %d, \"allreduce_remote_edges\": %d, "
           "\"allreduce_buckets\": %d}",
           x->send_remote, x->ar_remote, x->ar_buckets);
  }
  printf("],\n  \"pipeline_s\": ");
  num(e->pipeline_s);
  printf(", \"bubble\": ");
  num(e->bubble);
  printf(", \"step_s\": ");
  num(e->step_s);
  printf(", \"samples_per_s\": ");
  num(e->step_s > 0 ? (double)q->batch / e->step_s : NAN);
  printf(", \"allreduce_s\": ");
  num(e->ar_s);
  printf(", \"allreduce_hidden_share\": ");
  num(e->ar_s > 0 ? e->ar_hidden_s / e->ar_s : 1.0);
  printf(", \"memory_max_bytes\": ");
  num(e->mem_max);
  printf(", \"device_memory_max_bytes\": ");
  num(e->dev_mem_max);
  printf(", \"processes_per_device\": %d", e->dev_share);
  printf(", \"bytes_local_per_step\": ");
  num(e->bytes_local);
  printf(", \"bytes_remote_per_step\": ");
  num(e->bytes_remote);
  printf("}");
}
