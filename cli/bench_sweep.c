/* gpipe-bench's sweep: the runs of the lists and their baselines, each measured (fresh trainer,
 * warm-up, timed steps), with a progress line; then the speed-ups and bubbles derived. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench_sweep.h"
#include "cli/dist_voice.h"
#include "cli/interrupt.h"
#include "cli/machine.h"
#include "cli/progress.h"
#include "core/plan/plan.h"
#include "core/plan/split.h"
#include "core/train/trainer.h"

/* ---- the runs ------------------------------------------------------------------------------ */

static int find_run(const gp_bench *b, int k, int mb, int sched, int remat, int rep) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->k == k && r->m == mb && (int)r->schedule == sched && (int)r->remat == remat &&
        r->replicas == rep)
      return i;
  }
  return -1;
}

static gp_status add_run(gp_bench *b, int k, int mb, int sched, int remat, int rep, int baseline) {
  if (find_run(b, k, mb, sched, remat, rep) >= 0) return GP_OK;
  if (b->n_runs >= MAX_RUNS)
    return GP_ERR(GP_ERR_USAGE, "the sweep has more than %d runs; shorten the lists", MAX_RUNS);
  gp_bench_run *r = &b->runs[b->n_runs++];
  memset(r, 0, sizeof *r);
  r->k = k;
  r->m = mb;
  r->schedule = (gp_schedule_kind)sched;
  snprintf(r->sched_name, sizeof r->sched_name, "%s", gp_bench_schedule_name(r->schedule));
  r->remat = (gp_remat)remat;
  r->replicas = rep;
  r->baseline = baseline;
  r->bubble_theory = (double)(k - 1) / (double)(mb + k - 1);
  r->speedup_ideal = (double)k * mb / (double)(mb + k - 1);
  /* each of the W processes holds up to ceil(K / P) stages on its own cores */
  const int W = b->processes > 1 ? b->processes : 1, P = W / rep > 1 ? W / rep : 1;
  const int kl = (k + P - 1) / P;
  int per = b->per_stage ? b->per_stage : b->threads / kl > 1 ? b->threads / kl : 1;
  r->cores_used = W * (b->per_stage || kl * per < b->threads ? kl * per : b->threads);
  return GP_OK;
}

static int in_list(const int *l, int n, int v) {
  for (int i = 0; i < n; i++)
    if (l[i] == v) return 1;
  return 0;
}

/* The automatic split's costs, one set a micro-batch and thread count: timed (or read from the
 * cache) once a sweep; across processes rank 0's, sent to every process, so that every process
 * makes the same split. */
typedef struct split_memo {
  int64_t micro;
  int threads;
  gp_unit_costs c;
} split_memo;
static split_memo memo[64];
static int n_memo;

static gp_status split_costs(const gp_bench_ctx *c, const gp_pipeline_spec *ps, int threads,
                             const gp_unit_costs **out) {
  const int64_t micro = gp_split_micro_batch(c->m, ps);
  for (int i = 0; i < n_memo; i++)
    if (memo[i].micro == micro && memo[i].threads == threads) {
      *out = &memo[i].c;
      return GP_OK;
    }
  if (n_memo == (int)(sizeof memo / sizeof memo[0]))
    return GP_ERR(GP_ERR_USAGE, "the sweep needs more than %d splits; shorten the lists", n_memo);
  split_memo *e = &memo[n_memo];
  e->micro = micro;
  e->threads = threads;
  char how[160];
  gp_dist *d = (gp_dist *)&c->dist;
  int ok = 1;
  gp_status s = GP_OK;
  if (d->rank == 0) {
    s = gp_cli_split_costs(&c->split, c->m, ps, threads, &e->c, how, sizeof how);
    ok = s == GP_OK;
  }
  if (d->world > 1) { /* the others take rank 0's numbers into costs of the same shape */
    gp_status b = gp_dist_bcast(d, &ok, sizeof ok, 0);
    if (s != GP_OK) return s;
    GP_TRY(b);
    if (!ok) return GP_ERR(GP_ERR_RUNTIME, "the automatic split failed on rank 0");
    if (d->rank != 0) GP_TRY(gp_unit_costs_compute(c->m, micro, GP_COST_FLOPS, 1, NULL, &e->c));
    int by = (int)e->c.by;
    GP_TRY(gp_dist_bcast(d, &by, sizeof by, 0));
    GP_TRY(gp_dist_bcast(d, e->c.fwd, sizeof(double) * (size_t)e->c.n, 0));
    GP_TRY(gp_dist_bcast(d, e->c.bwd, sizeof(double) * (size_t)e->c.n, 0));
    e->c.by = (gp_cost_by)by;
  }
  GP_TRY(s);
  n_memo++;
  *out = &e->c;
  return GP_OK;
}

/* The plan of run r: its K, M, schedule and re-materialization on the sweep's balance (when it
 * has one for this K) and devices, else the automatic split by --by. */
static gp_status run_plan(const gp_bench_ctx *c, const gp_bench_run *r, gp_plan *plan) {
  const gp_bench_sweep *w = &c->sw;
  gp_pipeline_spec ps = c->m->pipeline;
  ps.stages = r->k;
  ps.micro_batches = r->m;
  ps.schedule = r->schedule;
  ps.virtual_stages = r->schedule == GP_SCHED_INTERLEAVED ? w->vs : 1; /* chunks a stage */
  ps.remat = r->remat;
  ps.mem_limit = c->mem_limit; /* what remat auto fits */
  ps.replicas = r->replicas;
  ps.n_balance = 0;
  if (w->bal_k == r->k * ps.virtual_stages) {
    ps.n_balance = w->bal_k;
    memcpy(ps.balance, w->balance, sizeof ps.balance);
  }
  ps.n_devices = r->k;
  for (int s = 0; s < r->k; s++)
    memcpy(ps.devices[s], w->devices[w->n_dev == 1 ? 0 : s], sizeof ps.devices[s]);
  /* each stage's threads as the run gives them (add_run's share) */
  const gp_bench *b = &c->b;
  const int W = b->processes > 1 ? b->processes : 1, P = W / r->replicas > 1 ? W / r->replicas : 1;
  const int kl = (r->k + P - 1) / P;
  const int per = b->per_stage ? b->per_stage : b->threads / kl > 1 ? b->threads / kl : 1;
  gp_bench_dist_spec(c, P, per, &ps);
  if (ps.n_balance || r->k == 1) return gp_plan_make(c->m, &ps, plan);
  const gp_unit_costs *uc = NULL;
  GP_TRY(split_costs(c, &ps, per, &uc));
  return gp_plan_make_from(c->m, &ps, uc, plan);
}

#define SKIP_ROOM ((int)(sizeof((gp_bench *)0)->skipped / sizeof((gp_bench *)0)->skipped[0]))
static int more_skipped; /* notes past the room */

static void note(gp_bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(gp_bench *b, const char *fmt, ...) {
  if (b->n_skipped == SKIP_ROOM) {
    more_skipped++;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->skipped[b->n_skipped++], sizeof b->skipped[0], fmt, ap);
  va_end(ap);
}

/* Every requested combination in the order of the lists, each K preceded by its naive
 * reference (K, 1, gpipe, never) and the whole sweep by the one-stage reference when they
 * were not asked for. */
gp_status gp_bench_make_runs(gp_bench_ctx *c) {
  gp_bench_sweep *w = &c->sw;
  gp_bench *b = &c->b;
  b->runs = calloc(MAX_RUNS, sizeof *b->runs);
  if (!b->runs) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  int wants_naive = in_list(w->ms, w->nm, 1) && in_list(w->scheds, w->ns, GP_SCHED_GPIPE) &&
                    in_list(w->remats, w->nr, GP_REMAT_NEVER);
  /* each M past the batch once, whichever K runs first (or none) */
  for (int mi = 0; mi < w->nm; mi++)
    if (w->ms[mi] > b->batch)
      note(b, "M=%d (a batch of %" PRId64 " cannot be split into %d)", w->ms[mi], b->batch,
           w->ms[mi]);
  for (int ri = 0; ri < w->nrep; ri++) /* and each M that R replicas' shares cannot hold */
    for (int mi = 0; mi < w->nm; mi++)
      if (w->rs[ri] > 1 && w->ms[mi] <= b->batch && (int64_t)w->ms[mi] * w->rs[ri] > b->batch)
        note(b,
             "M=%d R=%d (a batch of %" PRId64 " over %d replicas leaves %" PRId64
             " samples a replica, fewer than %d micro-batches)",
             w->ms[mi], w->rs[ri], b->batch, w->rs[ri], b->batch / w->rs[ri], w->ms[mi]);
  int asked = 0, ks_kept = 0, laid = 0, zb_skipped = 0;
  char why[256], first_why[320] = "";
  for (int ri = 0; ri < w->nrep; ri++) {
    const int R = w->rs[ri];
    if (!in_list(w->ks, w->nk, 1)) { /* the one-stage reference */
      if (gp_bench_layout_fits(c, 1, R, why, sizeof why))
        GP_TRY(add_run(b, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, R, 1));
      else
        note(b, "K=1 R=%d, the one-stage reference (%s)", R, why);
    }
    for (int ki = 0; ki < w->nk; ki++) {
      int k = w->ks[ki];
      if (b->per_stage && k * b->per_stage > b->cores) {
        if (ri == 0)
          note(b, "K=%d (%d stages x %d thread%s need %d cores; this process may use %d)", k, k,
               b->per_stage, b->per_stage == 1 ? "" : "s", k * b->per_stage, b->cores);
        continue;
      }
      ks_kept += ri == 0;
      if (!gp_bench_layout_fits(c, k, R, why, sizeof why)) {
        note(b, "K=%d R=%d (%s)", k, R, why);
        if (!first_why[0]) snprintf(first_why, sizeof first_why, "K=%d R=%d: %s", k, R, why);
        continue;
      }
      laid++;
      if (!wants_naive && R <= b->batch)
        GP_TRY(add_run(b, k, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, R, 1));
      for (int mi = 0; mi < w->nm; mi++) {
        if ((int64_t)w->ms[mi] * R > b->batch) continue; /* noted above */
        for (int si = 0; si < w->ns; si++)
          for (int rm = 0; rm < w->nr; rm++) {
            if (w->scheds[si] == GP_SCHED_INTERLEAVED && w->ms[mi] % k) {
              if (rm == 0)
                note(b,
                     "K=%d M=%d interleaved (micro-batches go in groups of the stages: M=%d "
                     "would do)",
                     k, w->ms[mi], (w->ms[mi] + k - 1) / k * k);
              continue;
            }
            /* the zero-bubble and interleaved lists re-materialize nothing: never unless
             * --remat asks otherwise, which is said and skipped */
            const int zb = w->scheds[si] >= 0 && gp_schedule_keeps_all(w->scheds[si]);
            int remat = zb && (!c->remat_given || w->remats[rm] == GP_REMAT_AUTO) ? GP_REMAT_NEVER
                                                                                  : w->remats[rm];
            if (zb && remat != GP_REMAT_NEVER) {
              if (!zb_skipped++)
                note(b, "%s with --remat %s (it re-materializes nothing)",
                     gp_bench_schedule_name((gp_schedule_kind)w->scheds[si]),
                     gp_bench_remat_name((gp_remat)remat));
              continue;
            }
            asked++;
            int j = find_run(b, k, w->ms[mi], w->scheds[si], remat, R);
            if (j >= 0)
              b->runs[j].baseline = 0; /* asked for after all (K = 1 as the naive reference) */
            else
              GP_TRY(add_run(b, k, w->ms[mi], w->scheds[si], remat, R, 0));
          }
      }
    }
  }
  if (b->n_skipped == SKIP_ROOM && more_skipped) /* the last note counts what did not fit */
    snprintf(b->skipped[SKIP_ROOM - 1], sizeof b->skipped[0],
             "and %d more configurations (the lists are long)", more_skipped + 1);
  if (!ks_kept && c->stages_given)
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: --threads-per-stage %d leaves no K of --stages "
                  "within the %d core%s this process may use",
                  b->per_stage, b->cores, b->cores == 1 ? "" : "s");
  if (!ks_kept) /* the one K of a plan or the model file: say which */
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: %s%s has %d stages, which need %d cores at "
                  "--threads-per-stage %d; this process may use %d%s",
                  c->partition ? "the plan of --partition " : "the model file's pipeline section",
                  c->partition ? c->partition : "", w->ks[0], w->ks[0] * b->per_stage, b->per_stage,
                  b->cores, c->partition ? "" : " (--stages sets K)");
  if (!laid)
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: no layout of --stages and --replicas fits "
                  "%d process%s (%s)",
                  c->dist.world, c->dist.world == 1 ? "" : "es", first_why);
  if (!asked && zb_skipped)
    return GP_ERR(GP_ERR_USAGE, "nothing to run: the zero-bubble schedules re-materialize "
                                "nothing; give --remat never");
  if (!asked)
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: every micro-batch count exceeds the batch of %" PRId64,
                  b->batch);
  for (int i = 0; i < b->n_runs; i++) {
    gp_bench_run *r = &b->runs[i];
    r->naive = find_run(b, r->k, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, r->replicas);
    r->one = find_run(b, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, r->replicas);
    gp_plan plan; /* every plan is checked now, so a bad device fails before the sweep */
    gp_status s = run_plan(c, r, &plan);
    if (s != GP_OK)
      return gp_error_prefix(s, "K=%d M=%d %s %s: ", r->k, r->m, r->sched_name,
                             gp_bench_remat_name(r->remat));
  }
  return GP_OK;
}

/* a timed step: its time and its stages' wall time in actions and in recomputing, summed */
typedef struct step_time {
  double s, busy, rec;
} step_time;

static int cmp_step(const void *a, const void *b) {
  double x = ((const step_time *)a)->s, y = ((const step_time *)b)->s;
  return (x > y) - (x < y);
}

/* The stages' wall time in actions and in recomputing so far, summed. */
static void stages_busy(const gp_pipeline *pl, int k, double *busy, double *rec) {
  *busy = *rec = 0;
  for (int st = 0; st < k; st++) {
    gp_stage_stats ss;
    gp_pipeline_stats(pl, st, &ss);
    *busy += ss.wall_busy_s;
    *rec += ss.wall_s[GP_A_RECOMPUTE];
  }
}

/* Under several processes, each step's time is the slowest process's and the stages' sums are a
 * replica's (the mean of the replicas'): every process then sorts the same steps. */
static gp_status combine_steps(gp_bench_ctx *c, step_time *dt, int steps) {
  double *v = malloc(sizeof *v * 3 * (size_t)steps);
  if (!v) return GP_ERR(GP_ERR_NOMEM, "out of memory for the step times");
  for (int i = 0; i < steps; i++) {
    v[i] = dt[i].s;
    v[steps + i] = dt[i].busy;
    v[2 * steps + i] = dt[i].rec;
  }
  gp_status s = gp_bench_dist_steps(c, steps, v, v + steps, v + 2 * steps);
  for (int i = 0; s == GP_OK && i < steps; i++)
    dt[i] = (step_time){v[i], v[steps + i], v[2 * steps + i]};
  free(v);
  return s;
}

/* Each stage's numbers, from the process that holds it (cli/dist_voice.h), the bubbles and the
 * replicas' all-reduce. The replayed bubble and the pace-setter's need every action's time in
 * one process: across processes they are measured where a process holds a whole replica. */
static gp_status stage_numbers(gp_bench_ctx *c, const gp_pipeline *pl, gp_bench_run *out) {
  const int k = out->k, n_st = gp_pipeline_stages(pl), v = gp_pipeline_chunks(pl);
  gp_stage_stats all[GP_MAX_DEVICES];
  GP_TRY(gp_cli_dist_stats(&c->dist, pl, all));
  out->bubble_measured = 0;
  double ar = 0, wait = 0;
  int64_t bytes = 0, steps = 0;
  for (int st = 0; st < k; st++) { /* interleaved: a stage's chunks (st, st + K, ..) summed */
    out->bubble_stage[st] = gp_device_idle(all, n_st, v, st);
    out->bubble_measured += out->bubble_stage[st] / k;
    out->busy_ms[st] = out->wall_busy_ms[st] = out->recompute_ms[st] = 0;
    out->peak_bytes[st] = out->mem_bytes[st] = 0;
    out->sent_bytes[st] = 0;
  }
  for (int ci = 0; ci < n_st; ci++) {
    const gp_stage_stats *ss = &all[ci];
    const int st = ci % k;
    double n = ss->steps > 0 ? (double)ss->steps : 1;
    out->busy_ms[st] += gp_stage_busy_ms(ss);
    out->wall_busy_ms[st] += 1e3 * ss->wall_busy_s / n;
    out->recompute_ms[st] += 1e3 * ss->wall_s[GP_A_RECOMPUTE] / n;
    out->peak_bytes[st] += ss->peak_act_bytes;
    out->mem_bytes[st] += ss->mem_peak;
    out->sent_bytes[st] += (int64_t)((double)ss->sent_bytes / n);
    ar = fmax(ar, ss->allreduce_s); /* the stages' all-reduces run side by side */
    wait = fmax(wait, ss->allreduce_wait_s);
    bytes += ss->allreduce_bytes;
    steps = steps > ss->allreduce_steps ? steps : ss->allreduce_steps;
  }
  out->allreduce_ms = out->allreduce_hidden = NAN;
  out->allreduce_bytes = 0;
  if (out->replicas > 1 && steps > 0 && ar > 0) {
    out->allreduce_ms = 1e3 * ar / (double)steps;
    /* the wait and the span are timed apart: the wait may pass the span by a clock tick */
    out->allreduce_hidden = fmin(1, fmax(0, 1 - wait / ar));
    out->allreduce_bytes = bytes / steps;
  }
  GP_TRY(gp_bubble_sim(gp_pipeline_schedule(pl), all, &out->bubble_sim));
  int whole = gp_pipeline_layout(pl)->procs == 1;
  out->bubble_replay = whole ? gp_pipeline_bubble_replayed(pl) : NAN;
  out->bubble_slowest = whole ? gp_pipeline_bubble_bottleneck(pl) : NAN;
  return GP_OK;
}

/* One repetition of one run: a fresh trainer, W warm-up steps, S timed steps. Fills *out with
 * this repetition's numbers (the caller keeps the best). */
static gp_status measure(gp_bench_ctx *c, const gp_bench_run *r, int trace, gp_bench_run *out) {
  gp_model *m = c->m;
  gp_bench *b = &c->b;
  gp_plan plan;
  GP_TRY(run_plan(c, r, &plan));
  *out = *r;
  if (r->schedule == GP_SCHED_AUTO) { /* what auto chose (a zero-bubble choice: remat never) */
    gp_bench_chosen_name(&plan, out->sched_name, sizeof out->sched_name);
    out->remat = plan.remat;
  }
  gp_plan_balance_str(&plan, out->balance, sizeof out->balance);
  for (int s = 0; s < r->k; s++) {
    memcpy(out->devices[s], plan.st[s].device, sizeof out->devices[s]);
    out->recomputed[s] = gp_plan_recomputed(&plan, s);
    out->selective[s] = gp_plan_selective(&plan, s);
  }
  gp_dist *dist; /* NULL in one process */
  GP_TRY(gp_bench_dist_layout(c, r, gp_plan_chunks(&plan), &dist));
  /* the processes of a host would pin their stages to the same first cores */
  gp_pipeline_opts po = {.cores = b->per_stage ? r->k * b->per_stage : b->threads,
                         .pin = !dist,
                         .dist = dist,
                         .trace = trace,
                         .mem_limit = c->mem_limit,
                         .precision = c->precision,
                         .nondeterministic = b->nondeterministic};
  gp_trainer t;
  GP_TRY(gp_trainer_init(&t, m, &plan, &po, m->train.seed));
  step_time dt[4096];
  double busy_at = 0, rec_at = 0; /* the stages' sums after the previous step */
  int steps = b->steps;
  gp_metrics mt;
  unsigned long long busy0 = 0, steal0 = 0, busy1, steal1;
  int ticks = 0;
  gp_status s = gp_batch_source_seek(c->data.train, 0, 0);
  if (s == GP_OK && dist) { /* each process reads only what this layout's stages here use */
    unsigned char used[GP_MAX_MODEL_INPUTS];
    gp_pipeline_inputs_used(t.pl, used);
    const gp_layout *lay = gp_pipeline_layout(t.pl);
    s = gp_batch_source_want(c->data.train, used, lay->replica, lay->replicas);
  }
  for (int i = 0; s == GP_OK && i < b->warmup + steps; i++) {
    if (i == b->warmup) {
      gp_pipeline_reset_stats(t.pl);
      ticks = gp_cpu_ticks_now(&busy0, &steal0);
    }
    /* the next batch too, so that the steps overlap; not at M = 1, the naive reference */
    s = gp_trainer_fetch(&t, c->data.train, r->m > 1 && i + 1 < b->warmup + steps);
    double t0 = gp_now();
    if (s == GP_OK) s = gp_trainer_step_fetched(&t, m->train.lr, &mt);
    /* a step's time ends when its work has run, not when it is queued (GPUs) */
    if (s == GP_OK) s = gp_pipeline_sync(t.pl);
    if (s == GP_OK && i >= b->warmup) {
      step_time *d = &dt[i - b->warmup];
      d->s = gp_now() - t0;
      stages_busy(t.pl, gp_pipeline_stages(t.pl), &d->busy, &d->rec);
      d->busy -= busy_at, busy_at += d->busy;
      d->rec -= rec_at, rec_at += d->rec;
    }
  }
  out->steal = -1; /* unknown: no steal field, or steps shorter than one tick (no ticks) */
  if (s == GP_OK && ticks && gp_cpu_ticks_now(&busy1, &steal1) && busy1 >= busy0 &&
      steal1 >= steal0 && busy1 - busy0 + steal1 - steal0 > 0)
    out->steal = (double)(steal1 - steal0) / (double)(busy1 - busy0 + steal1 - steal0);
  if (s == GP_OK && trace) s = gp_pipeline_write_trace(t.pl, c->trace);
  if (s == GP_OK && trace) c->traced = 1;
  if (s == GP_OK && dist) s = combine_steps(c, dt, steps);
  if (s == GP_OK) {
    qsort(dt, (size_t)steps, sizeof dt[0], cmp_step);
    const step_time *lo = &dt[(steps - 1) / 2], *hi = &dt[steps / 2];
    out->step_s = 0.5 * (lo->s + hi->s);
    out->step_busy_ms = 1e3 * 0.5 * (lo->busy + hi->busy);
    out->step_recompute_ms = 1e3 * 0.5 * (lo->rec + hi->rec);
    out->samples_per_s = out->step_s > 0 ? (double)b->batch / out->step_s : 0;
    s = stage_numbers(c, t.pl, out);
  }
  if (s != GP_OK && gp_pipeline_wedged(t.pl)) { /* a stage stuck in a computation: end here */
    if (dist) gp_cli_dist_fail(dist, "gpipe-bench", s, NULL);
    fprintf(stderr, "gpipe-bench: %s\n", gp_error_message());
    fflush(stdout);
    _exit(gp_status_exit_code(s));
  }
  gp_trainer_free(&t);
  return s;
}

/* ---- progress ------------------------------------------------------------------------------ */

static void progress(gp_bench_ctx *c, int done, int total, const gp_bench_run *r, int rep) {
  if (c->quiet) return;
  char what[160];
  char rep_r[16] = "";
  if (r->replicas > 1) snprintf(rep_r, sizeof rep_r, " R=%d", r->replicas);
  snprintf(what, sizeof what, "run %d/%d: K=%d M=%d %s %s%s%s", done + 1, total, r->k, r->m,
           r->sched_name, gp_bench_remat_name(r->remat), rep_r, r->baseline ? " (baseline)" : "");
  if (c->b.reps > 1)
    snprintf(what + strlen(what), sizeof what - strlen(what), ", repetition %d/%d", rep + 1,
             c->b.reps);
  if (done == 0) c->sweep_t0 = gp_now();
  if (done > 0) { /* the runs so far, on average, for the rest */
    double left = (gp_now() - c->sweep_t0) / done * (total - done);
    snprintf(what + strlen(what), sizeof what - strlen(what), ", about %dm%02ds left",
             (int)(left / 60), (int)left % 60);
  }
  if (c->tty) {
    fprintf(stderr, "\r\033[Kgpipe-bench: %s", what);
    c->progress_open = 1;
  } else {
    fprintf(stderr, "gpipe-bench: %s\n", what);
  }
  fflush(stderr);
}

static void progress_clear(gp_bench_ctx *c) {
  if (c->progress_open) fprintf(stderr, "\r\033[K");
  c->progress_open = 0;
}

/* ---- the sweep ----------------------------------------------------------------------------- */

/* A failure that says the run needs more memory than a stage's device has: past --memory-limit
 * (either backend) or past a GPU's memory (GP_ERR_FULL), not host memory running out or any
 * other failure. */
static int over_limit(gp_status s) {
  return s == GP_ERR_FULL;
}

/* One repetition of run r, kept when it is r's fastest. A run whose memory would pass the limit
 * does not fit: it is marked (and not run again) instead of stopping the sweep. */
static gp_status measure_run(gp_bench_ctx *c, gp_bench_run *r, int rep, int trace) {
  gp_bench_run got;
  gp_status s = measure(c, r, trace, &got);
  /* across processes the others wait on the one that failed: the sweep ends (W = 1 goes on) */
  if (s != GP_OK && over_limit(s) && c->dist.world == 1) {
    r->over_limit = 1;
    snprintf(r->why, sizeof r->why, "%s", gp_error_message());
    memcpy(r->balance, got.balance, sizeof r->balance);
    memcpy(r->devices, got.devices, sizeof r->devices);
    gp_error_clear();
    return GP_OK;
  }
  char rep_r[16] = ""; /* R in the line where there are replicas (one process: as ever) */
  if (r->replicas > 1) snprintf(rep_r, sizeof rep_r, " R=%d", r->replicas);
  if (s != GP_OK)
    return gp_error_prefix(s, "K=%d M=%d %s %s%s: ", r->k, r->m, r->sched_name,
                           gp_bench_remat_name(r->remat), rep_r);
  if (rep == 0 || got.samples_per_s > r->samples_per_s) *r = got;
  return GP_OK;
}

/* The speed-ups, FLOP rate and utilization of run r from its samples/s; NAN where r, or the
 * reference a speed-up is against, did not fit. */
static void derive(gp_bench_ctx *c, gp_bench_run *r) {
  gp_bench *b = &c->b;
  r->gpus_used = gp_bench_gpus_of(&c->sw, r->k);
  if (r->over_limit) {
    r->samples_per_s = r->speedup_naive = r->speedup_single = NAN;
    r->bubble_measured = r->bubble_sim = r->bubble_replay = r->bubble_slowest = NAN;
    r->gflops = r->utilization = NAN;
    r->steal = -1;
    return;
  }
  /* a reference whose layout the processes cannot hold was not run: no speed-up against it */
  static const gp_bench_run none = {.over_limit = 1};
  const gp_bench_run *naive = r->naive >= 0 ? &b->runs[r->naive] : &none;
  const gp_bench_run *one = r->one >= 0 ? &b->runs[r->one] : &none;
  r->speedup_naive = naive->over_limit          ? NAN
                     : naive->samples_per_s > 0 ? r->samples_per_s / naive->samples_per_s
                                                : 0;
  r->speedup_single = one->over_limit          ? NAN
                      : one->samples_per_s > 0 ? r->samples_per_s / one->samples_per_s
                                               : 0;
  r->gflops = b->flops_per_sample * r->samples_per_s / 1e9;
  /* against the GPUs' GEMM rate when the run has stages on GPUs, else the cores' sgemm */
  double peak = r->gpus_used ? b->gpu_gemm * r->gpus_used : b->sgemm_per_core * r->cores_used;
  r->utilization = peak > 0 ? r->gflops / peak : 0;
}

/* When no run that was asked for fits the memory limit (or the GPUs' memory) there is nothing to
 * report: one line. */
static gp_status check_any_fits(const gp_bench *b) {
  const gp_bench_run *first = NULL;
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->baseline) continue;
    if (!r->over_limit) return GP_OK;
    if (!first) first = r;
  }
  if (!first) return GP_OK;
  char limit[64] = "the GPUs' memory", size[32];
  if (b->mem_limit)
    snprintf(limit, sizeof limit, "--memory-limit %s per stage",
             gp_args_bytes_str((double)b->mem_limit, 2, size, sizeof size));
  return GP_ERR(GP_ERR_FULL, "no run asked for fits %s (K=%d M=%d %s %s: %s)", limit, first->k,
                first->m, first->sched_name, gp_bench_remat_name(first->remat), first->why);
}

gp_status gp_bench_sweep_all(gp_bench_ctx *c) {
  gp_bench *b = &c->b;
  if (!c->quiet)
    for (int i = 0; i < b->n_skipped; i++)
      fprintf(stderr, "gpipe-bench: skipping %s\n", b->skipped[i]);
  int total = b->n_runs * b->reps, done = 0;
  for (int rep = 0; rep < b->reps; rep++)
    for (int i = 0; i < b->n_runs; i++, done++) {
      gp_bench_run *r = &b->runs[i];
      if (r->over_limit) continue; /* it did not fit before; it will not now */
      progress(c, done, total, r, rep);
      gp_status s = measure_run(c, r, rep, c->trace && done == total - 1);
      if (s != GP_OK) {
        progress_clear(c);
        return s;
      }
    }
  progress_clear(c);
  for (int i = 0; i < b->n_runs; i++)
    derive(c, &b->runs[i]);
  return check_any_fits(b);
}

/* Distinct CUDA devices among the stages of a K-stage run (as run_plan places them). */
int gp_bench_gpus_of(const gp_bench_sweep *w, int k) {
  int n = 0;
  for (int s = 0; s < k; s++) {
    const char *d = w->devices[w->n_dev == 1 ? 0 : s];
    int seen = strncmp(d, "cuda:", 5) != 0;
    for (int t = 0; t < s && !seen; t++)
      seen = strcmp(w->devices[w->n_dev == 1 ? 0 : t], d) == 0;
    n += !seen;
  }
  return n;
}
