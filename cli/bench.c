/* gpipe-bench: sweeps stages x micro-batches x schedule x re-materialization over one model
 * and reports, per configuration, throughput, speed-up over naive model parallelism and over
 * one stage, the measured and theoretical bubble, per-stage compute and peak memory, and the
 * FLOP rate against this machine's sgemm. Exit codes: 0 ok, 2 usage or model file, 1 a
 * failure while running (data, I/O). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/common.h"
#include "cli/bench_data.h"
#include "cli/machine.h"
#include "cli/bench.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "core/backend.h"
#include "core/spec/cfg.h"
#include "core/plan/solve.h"
#include "core/plan/plan_io.h"
#include "core/train/trainer.h"
#include "data/data.h"
#include "gp_config.h"

enum {
  F_STAGES,
  F_MICRO,
  F_BATCH,
  F_SCHEDULE,
  F_REMAT,
  F_STEPS,
  F_WARMUP,
  F_DEVICES,
  F_PARTITION,
  F_DATA,
  F_THREADS,
  F_PER_STAGE,
  F_MEMORY,
  F_PRECISION,
  F_NONDET,
  F_REPS,
  F_CSV,
  F_JSON,
  F_PLOT,
  F_TRACE,
  F_SET,
  F_DATA_ONLY,
  F_WORKERS,
  F_QUIET,
  F_HELP,
  F_VERSION,
  F_COUNT
};

static gp_flag flags[] = {
    [F_STAGES] = {"--stages", GP_FLAG_STR, "K,K,...", "stage counts (default: the model file's)",
                  0},
    [F_MICRO] = {"--micro-batches", GP_FLAG_STR, "M,M,...",
                 "micro-batch counts (default: the model file's)", 0},
    [F_BATCH] = {"--batch-size", GP_FLAG_INT, "N", "mini-batch (default: the model file's)", 1,
                 .max = GP_MAX_BATCH},
    [F_SCHEDULE] = {"--schedule", GP_FLAG_STR, "gpipe,1f1b",
                    "schedules (default: the model file's)", 0},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "MODE,...",
                 "re-materialization: always, except_last, never (default: the model file's)", 0},
    [F_STEPS] = {"--steps", GP_FLAG_INT, "S", "timed steps per run (default 10)", 1, .max = 4096},
    [F_WARMUP] = {"--warmup", GP_FLAG_INT, "W", "untimed steps before them (default 2)", 0,
                  .max = 4096},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "cpu,...",
                   "device of each stage (one for all, or at least the largest K)", 0},
    [F_PARTITION] = {"--partition", GP_FLAG_STR, "PLAN.yaml",
                     "stages, balance and devices of a gpipe-partition -o plan", 0},
    [F_DATA] = {"--data", GP_FLAG_STR, "synthetic|real",
                "random inputs of the model's shapes (default), or the model file's data", 0},
    [F_THREADS] = {"--threads", GP_FLAG_INT, "C", "cores shared by the stages (default: all)", 1,
                   .max = 1024},
    [F_PER_STAGE] = {"--threads-per-stage", GP_FLAG_INT, "T",
                     "instead of --threads: T cores for each stage, so K stages use K x T (as "
                     "K devices); a K with more than the cores there are is skipped",
                     1, .max = 1024},
    [F_MEMORY] = {"--memory-limit", GP_FLAG_STR, "SIZE",
                  "memory of each stage's device (512MiB, 2GiB, 1.5GB, bytes): a run that needs "
                  "more is reported as not fitting",
                  0},
    [F_PRECISION] = {"--precision", GP_FLAG_STR, "fp32|bf16",
                     "arithmetic of GEMMs and convolutions (default fp32)", 0},
    [F_NONDET] = {"--nondeterministic", GP_FLAG_BOOL, NULL,
                  "let cuDNN pick algorithms that sum in a varying order (atomics) where faster; "
                  "results then differ between runs in the last bits",
                  0},
    [F_REPS] = {"--reps", GP_FLAG_INT, "R",
                "repetitions, alternating the runs; the best is kept (default 1)", 1, .max = 1000},
    [F_CSV] = {"--csv", GP_FLAG_STR, "FILE", "also write one CSV row per run", 0},
    [F_JSON] = {"--json", GP_FLAG_BOOL, NULL, "print JSON instead of the table", 0},
    [F_PLOT] = {"--plot", GP_FLAG_STR, "FILE.svg", "draw speed-up over one stage against K", 0},
    [F_TRACE] = {"--trace", GP_FLAG_STR, "FILE.json", "Chrome trace of the last run", 0},
    [F_SET] = {"--set", GP_FLAG_LIST, "KEY.PATH=VALUE",
               "override a scalar of the model file (repeatable)", 0},
    [F_DATA_ONLY] = {"--data-only", GP_FLAG_BOOL, NULL,
                     "time the data loader alone (the model's training split)", 0},
    [F_WORKERS] = {"--workers", GP_FLAG_STR, "N,N,...",
                   "--data-only: decode thread counts (default: the data section's)", 0},
    [F_QUIET] = {"--quiet", GP_FLAG_BOOL, NULL, "no progress or notes on stderr", 0},
    [F_HELP] = {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
    [F_VERSION] = {"--version", GP_FLAG_BOOL, NULL, "show the version", 0},
    {NULL},
};
_Static_assert(sizeof flags / sizeof flags[0] == F_COUNT + 1, "flag table");

#define MAX_LIST 64
#define MAX_RUNS 512
_Static_assert(sizeof((gp_bench *)0)->skipped / sizeof((gp_bench *)0)->skipped[0] >= 2 * MAX_LIST,
               "a note for every K and every M of the lists");

const char *gp_bench_schedule_name(gp_schedule_kind s) {
  return s == GP_SCHED_1F1B ? "1f1b" : "gpipe";
}

const char *gp_bench_remat_name(gp_remat r) {
  return gp_remat_names()[r <= GP_REMAT_NEVER ? r : GP_REMAT_NEVER];
}

/* What to sweep, after the flags, the plan and the model file's defaults. */
typedef struct sweep {
  int ks[MAX_LIST], nk, ms[MAX_LIST], nm, scheds[2], ns, remats[3], nr;
  int n_dev;
  char devices[GP_MAX_DEVICES][16];
  int bal_k; /* the K that `balance` is for (the plan's, or the model file's), else 0 */
  int balance[GP_MAX_DEVICES];
} sweep;

typedef struct ctx {
  gp_model *m;
  gp_data data; /* its training split: image samples or token rows */
  sweep sw;
  gp_bench b;
  int tty, quiet, progress_open;
  double sweep_t0;        /* when the sweep's first run started, for the progress line's estimate */
  int traced;             /* --trace was written (not when its run did not fit the memory limit) */
  size_t mem_limit;       /* --memory-limit: per stage, 0 = none */
  gp_precision precision; /* --precision */
} ctx;

/* ---- flags --------------------------------------------------------------------------------- */

/* A list flag's values, none twice (cli/common.h reads them as every program does). */
static gp_status parse_ints(int f, int min_value, int max_value, int *out, int *n) {
  return gp_cli_ints(flags[f].name, flags[f].s, min_value, max_value, 1, out, MAX_LIST, n);
}

/* The sweep's lists from the flags, a plan, and the model file's pipeline section. */
static gp_status make_sweep(ctx *c) {
  gp_model *m = c->m;
  sweep *w = &c->sw;
  const gp_pipeline_spec *ps = &m->pipeline;
  w->ks[0] = ps->stages;
  w->nk = 1;
  w->ms[0] = ps->micro_batches;
  w->nm = 1;
  w->scheds[0] = (int)ps->schedule;
  w->ns = 1;
  w->remats[0] = (int)ps->remat;
  w->nr = 1;
  w->n_dev = ps->n_devices;
  memcpy(w->devices, ps->devices, sizeof w->devices);
  w->bal_k = ps->n_balance ? ps->stages : 0;
  memcpy(w->balance, ps->balance, sizeof w->balance);
  if (flags[F_PARTITION].given) {
    if (flags[F_STAGES].given || flags[F_DEVICES].given)
      return GP_ERR(GP_ERR_USAGE, "--partition fixes the stages and devices; drop %s",
                    flags[F_STAGES].given ? "--stages" : "--devices");
    gp_plan plan;
    GP_TRY(gp_plan_read(flags[F_PARTITION].s, m, &plan));
    gp_args_note("gpipe-bench", plan.renamed);
    w->ks[0] = w->bal_k = w->n_dev = plan.stages;
    w->ms[0] = plan.micro;
    w->scheds[0] = (int)plan.schedule;
    w->remats[0] = (int)plan.remat;
    for (int s = 0; s < plan.stages; s++) {
      w->balance[s] = plan.st[s].end_unit - plan.st[s].first_unit;
      memcpy(w->devices[s], plan.st[s].device, sizeof w->devices[s]);
    }
  }
  if (flags[F_STAGES].given) GP_TRY(parse_ints(F_STAGES, 1, GP_MAX_DEVICES, w->ks, &w->nk));
  if (flags[F_MICRO].given) GP_TRY(parse_ints(F_MICRO, 1, 4096, w->ms, &w->nm));
  if (flags[F_SCHEDULE].given)
    GP_TRY(gp_cli_choices(flags[F_SCHEDULE].name, flags[F_SCHEDULE].s, gp_schedule_names(),
                          w->scheds, 2, &w->ns));
  if (flags[F_REMAT].given)
    GP_TRY(gp_cli_choices(flags[F_REMAT].name, flags[F_REMAT].s, gp_remat_names(), w->remats, 3,
                          &w->nr));
  if (flags[F_DEVICES].given)
    GP_TRY(gp_cli_devices(flags[F_DEVICES].name, flags[F_DEVICES].s, w->devices, &w->n_dev));
  int kbig = 1;
  for (int i = 0; i < w->nk; i++) {
    GP_TRY(gp_cli_stages_check(m, w->ks[i]));
    if (w->ks[i] > kbig) kbig = w->ks[i];
  }
  if (w->n_dev == 0) {
    snprintf(w->devices[0], sizeof w->devices[0], "cpu");
    w->n_dev = 1;
  }
  if (w->n_dev != 1 && w->n_dev < kbig)
    return GP_ERR(GP_ERR_USAGE, "%s%d devices for up to %d stage%s (give one, or one per stage)",
                  flags[F_DEVICES].given ? "--devices: " : "the model file's pipeline section: ",
                  w->n_dev, kbig, kbig == 1 ? "" : "s");
  return GP_OK;
}

/* ---- the runs ------------------------------------------------------------------------------ */

static int find_run(const gp_bench *b, int k, int mb, int sched, int remat) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->k == k && r->m == mb && (int)r->schedule == sched && (int)r->remat == remat) return i;
  }
  return -1;
}

static gp_status add_run(gp_bench *b, int k, int mb, int sched, int remat, int baseline) {
  if (find_run(b, k, mb, sched, remat) >= 0) return GP_OK;
  if (b->n_runs >= MAX_RUNS)
    return GP_ERR(GP_ERR_USAGE, "the sweep has more than %d runs; shorten the lists", MAX_RUNS);
  gp_bench_run *r = &b->runs[b->n_runs++];
  memset(r, 0, sizeof *r);
  r->k = k;
  r->m = mb;
  r->schedule = (gp_schedule_kind)sched;
  r->remat = (gp_remat)remat;
  r->baseline = baseline;
  r->bubble_theory = (double)(k - 1) / (double)(mb + k - 1);
  r->speedup_ideal = (double)k * mb / (double)(mb + k - 1);
  int per = b->per_stage ? b->per_stage : b->threads / k > 1 ? b->threads / k : 1;
  r->cores_used = b->per_stage || k * per < b->threads ? k * per : b->threads;
  return GP_OK;
}

static int in_list(const int *l, int n, int v) {
  for (int i = 0; i < n; i++)
    if (l[i] == v) return 1;
  return 0;
}

/* The plan of run r: its K, M, schedule and re-materialization on the sweep's balance (when it
 * has one for this K) and devices. */
static gp_status run_plan(const ctx *c, const gp_bench_run *r, gp_plan *plan) {
  const sweep *w = &c->sw;
  gp_pipeline_spec ps = c->m->pipeline;
  ps.stages = r->k;
  ps.micro_batches = r->m;
  ps.schedule = r->schedule;
  ps.remat = r->remat;
  ps.n_balance = 0;
  if (w->bal_k == r->k) {
    ps.n_balance = r->k;
    memcpy(ps.balance, w->balance, sizeof ps.balance);
  }
  ps.n_devices = r->k;
  for (int s = 0; s < r->k; s++)
    memcpy(ps.devices[s], w->devices[w->n_dev == 1 ? 0 : s], sizeof ps.devices[s]);
  return gp_plan_make(c->m, &ps, plan);
}

/* Every requested combination in the order of the lists, each K preceded by its naive
 * reference (K, 1, gpipe, never) and the whole sweep by the one-stage reference when they
 * were not asked for. */
static gp_status make_runs(ctx *c) {
  sweep *w = &c->sw;
  gp_bench *b = &c->b;
  b->runs = calloc(MAX_RUNS, sizeof *b->runs);
  if (!b->runs) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  int wants_naive = in_list(w->ms, w->nm, 1) && in_list(w->scheds, w->ns, GP_SCHED_GPIPE) &&
                    in_list(w->remats, w->nr, GP_REMAT_NEVER);
  if (!in_list(w->ks, w->nk, 1)) GP_TRY(add_run(b, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, 1));
  /* each M past the batch once, whichever K runs first (or none) */
  for (int mi = 0; mi < w->nm; mi++)
    if (w->ms[mi] > b->batch)
      snprintf(b->skipped[b->n_skipped++], sizeof b->skipped[0],
               "M=%d (a batch of %" PRId64 " cannot be split into %d)", w->ms[mi], b->batch,
               w->ms[mi]);
  int asked = 0, ks_kept = 0;
  for (int ki = 0; ki < w->nk; ki++) {
    int k = w->ks[ki];
    if (b->per_stage && k * b->per_stage > b->cores) {
      snprintf(b->skipped[b->n_skipped++], sizeof b->skipped[0],
               "K=%d (%d stages x %d thread%s need %d cores; this process may use %d)", k, k,
               b->per_stage, b->per_stage == 1 ? "" : "s", k * b->per_stage, b->cores);
      continue;
    }
    ks_kept++;
    if (!wants_naive) GP_TRY(add_run(b, k, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, 1));
    for (int mi = 0; mi < w->nm; mi++) {
      if (w->ms[mi] > b->batch) continue; /* noted above */
      for (int si = 0; si < w->ns; si++)
        for (int ri = 0; ri < w->nr; ri++, asked++) {
          int j = find_run(b, k, w->ms[mi], w->scheds[si], w->remats[ri]);
          if (j >= 0)
            b->runs[j].baseline = 0; /* asked for after all (K = 1 as the naive reference) */
          else
            GP_TRY(add_run(b, k, w->ms[mi], w->scheds[si], w->remats[ri], 0));
        }
    }
  }
  if (!ks_kept && flags[F_STAGES].given)
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: --threads-per-stage %d leaves no K of --stages "
                  "within the %d core%s this process may use",
                  b->per_stage, b->cores, b->cores == 1 ? "" : "s");
  if (!ks_kept) /* the one K of a plan or the model file: say which */
    return GP_ERR(
        GP_ERR_USAGE,
        "nothing to run: %s%s has %d stages, which need %d cores at "
        "--threads-per-stage %d; this process may use %d%s",
        flags[F_PARTITION].given ? "the plan of --partition " : "the model file's pipeline section",
        flags[F_PARTITION].given ? flags[F_PARTITION].s : "", w->ks[0], w->ks[0] * b->per_stage,
        b->per_stage, b->cores, flags[F_PARTITION].given ? "" : " (--stages sets K)");
  if (!asked)
    return GP_ERR(GP_ERR_USAGE,
                  "nothing to run: every micro-batch count exceeds the batch of %" PRId64,
                  b->batch);
  for (int i = 0; i < b->n_runs; i++) {
    gp_bench_run *r = &b->runs[i];
    r->naive = find_run(b, r->k, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER);
    r->one = find_run(b, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER);
    gp_plan plan; /* every plan is checked now, so a bad device fails before the sweep */
    gp_status s = run_plan(c, r, &plan);
    if (s != GP_OK)
      return gp_error_prefix(s, "K=%d M=%d %s %s: ", r->k, r->m,
                             gp_bench_schedule_name(r->schedule), gp_bench_remat_name(r->remat));
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

/* One repetition of one run: a fresh trainer, W warm-up steps, S timed steps. Fills *out with
 * this repetition's numbers (the caller keeps the best). */
static gp_status measure(ctx *c, const gp_bench_run *r, int trace, gp_bench_run *out) {
  gp_model *m = c->m;
  gp_bench *b = &c->b;
  gp_plan plan;
  GP_TRY(run_plan(c, r, &plan));
  *out = *r;
  gp_plan_balance_str(&plan, out->balance, sizeof out->balance);
  for (int s = 0; s < r->k; s++)
    memcpy(out->devices[s], plan.st[s].device, sizeof out->devices[s]);
  gp_pipeline_opts po = {.cores = b->per_stage ? r->k * b->per_stage : b->threads,
                         .pin = 1,
                         .trace = trace,
                         .mem_limit = c->mem_limit,
                         .precision = c->precision,
                         .nondeterministic = flags[F_NONDET].given};
  gp_trainer t;
  GP_TRY(gp_trainer_init(&t, m, &plan, &po, m->train.seed));
  step_time dt[4096];
  double busy_at = 0, rec_at = 0; /* the stages' sums after the previous step */
  int steps = b->steps;
  gp_metrics mt;
  unsigned long long busy0 = 0, steal0 = 0, busy1, steal1;
  int ticks = 0;
  gp_status s = gp_batch_source_seek(c->data.train, 0, 0);
  for (int i = 0; s == GP_OK && i < b->warmup + steps; i++) {
    if (i == b->warmup) {
      gp_pipeline_reset_stats(t.pl);
      ticks = gp_cpu_ticks_now(&busy0, &steal0);
    }
    gp_batch sb;
    s = gp_batch_source_next(c->data.train, &sb, NULL);
    double t0 = gp_now();
    if (s == GP_OK) s = gp_trainer_step(&t, &sb, m->train.lr, &mt);
    /* a step's time ends when its work has run, not when it is queued (GPUs) */
    if (s == GP_OK) s = gp_pipeline_sync(t.pl);
    if (s == GP_OK && i >= b->warmup) {
      step_time *d = &dt[i - b->warmup];
      d->s = gp_now() - t0;
      stages_busy(t.pl, r->k, &d->busy, &d->rec);
      d->busy -= busy_at, busy_at += d->busy;
      d->rec -= rec_at, rec_at += d->rec;
    }
  }
  out->steal = -1; /* unknown: no steal field, or steps shorter than one tick (no ticks) */
  if (s == GP_OK && ticks && gp_cpu_ticks_now(&busy1, &steal1) && busy1 >= busy0 &&
      steal1 >= steal0 && busy1 - busy0 + steal1 - steal0 > 0)
    out->steal = (double)(steal1 - steal0) / (double)(busy1 - busy0 + steal1 - steal0);
  if (s == GP_OK && trace) s = gp_pipeline_write_trace(t.pl, flags[F_TRACE].s);
  if (s == GP_OK && trace) c->traced = 1;
  if (s == GP_OK) {
    qsort(dt, (size_t)steps, sizeof dt[0], cmp_step);
    const step_time *lo = &dt[(steps - 1) / 2], *hi = &dt[steps / 2];
    out->step_s = 0.5 * (lo->s + hi->s);
    out->step_busy_ms = 1e3 * 0.5 * (lo->busy + hi->busy);
    out->step_recompute_ms = 1e3 * 0.5 * (lo->rec + hi->rec);
    out->samples_per_s = out->step_s > 0 ? (double)b->batch / out->step_s : 0;
    out->bubble_measured = 0;
    for (int st = 0; st < r->k; st++) {
      gp_stage_stats ss;
      gp_pipeline_stats(t.pl, st, &ss);
      double n = ss.steps > 0 ? (double)ss.steps : 1;
      out->bubble_stage[st] = gp_stage_idle(&ss);
      out->bubble_measured += out->bubble_stage[st] / r->k;
      out->busy_ms[st] = gp_stage_busy_ms(&ss);
      out->wall_busy_ms[st] = 1e3 * ss.wall_busy_s / n;
      out->recompute_ms[st] = 1e3 * ss.wall_s[GP_A_RECOMPUTE] / n;
      out->peak_bytes[st] = ss.peak_act_bytes;
      out->sent_bytes[st] = (int64_t)((double)ss.sent_bytes / n);
    }
    s = gp_pipeline_bubble_sim(t.pl, &out->bubble_sim);
    out->bubble_replay = gp_pipeline_bubble_replayed(t.pl);
    out->bubble_slowest = gp_pipeline_bubble_bottleneck(t.pl);
  }
  if (s != GP_OK && gp_pipeline_wedged(t.pl)) { /* a stage stuck in a computation: end here */
    fprintf(stderr, "gpipe-bench: %s\n", gp_error_message());
    fflush(stdout);
    _exit(gp_status_exit_code(s));
  }
  gp_trainer_free(&t);
  return s;
}

/* ---- progress ------------------------------------------------------------------------------ */

static void progress(ctx *c, int done, int total, const gp_bench_run *r, int rep) {
  if (c->quiet) return;
  char what[160];
  snprintf(what, sizeof what, "run %d/%d: K=%d M=%d %s %s%s", done + 1, total, r->k, r->m,
           gp_bench_schedule_name(r->schedule), gp_bench_remat_name(r->remat),
           r->baseline ? " (baseline)" : "");
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

static void progress_clear(ctx *c) {
  if (c->progress_open) fprintf(stderr, "\r\033[K");
  c->progress_open = 0;
}

/* ---- setup --------------------------------------------------------------------------------- */

/* The training split (synthetic: 4 batches of images; token data has 16). */
static gp_status open_data(ctx *c) {
  gp_model *m = c->m;
  int synthetic = strcmp(c->b.data, "synthetic") == 0;
  if (!synthetic && !gp_seq_is_sequence_model(m) &&
      (m->data.dataset == GP_DATA_NONE || m->data.dataset == GP_DATA_SYNTHETIC))
    return GP_ERR(GP_ERR_USAGE, "--data real: %s has no data section naming a dataset", m->file);
  gp_data_opts o = {.synthetic = synthetic,
                    .train = 1,
                    .batch = c->b.batch,
                    .seed = m->train.seed,
                    .synthetic_batches = 4};
  return gp_data_open(m, &o, &c->data);
}

/* --batch-size goes in as a setting: the load checks the file's micro_batches against it.
 * The file's M is not run when --micro-batches is given: it goes in as 1, and the sweep says
 * which of the M a batch cannot be split into. */
static gp_status load_model(const char *file, gp_model **out) {
  const gp_cli_load load = {"gpipe-bench", &flags[F_SET], &flags[F_BATCH], &flags[F_MICRO], "1"};
  return gp_cli_model_load(&load, file, out);
}

static gp_status setup(ctx *c, const char *file) {
  gp_bench *b = &c->b;
  GP_TRY(load_model(file, &c->m));
  gp_model *m = c->m;
  b->model_file = file;
  b->model = m->name;
  b->units = m->n_units;
  b->params = m->n_params;
  b->batch = m->train.batch_size; /* --batch-size went into the load */
  b->steps = flags[F_STEPS].given ? (int)flags[F_STEPS].i : 10;
  b->warmup = flags[F_WARMUP].given ? (int)flags[F_WARMUP].i : 2;
  b->reps = flags[F_REPS].given ? (int)flags[F_REPS].i : 1;
  b->cores = gp_cpu_cores();
  b->threads = flags[F_THREADS].given ? (int)flags[F_THREADS].i : b->cores;
  if (flags[F_PER_STAGE].given) {
    if (flags[F_THREADS].given)
      return GP_ERR(GP_ERR_USAGE, "--threads and --threads-per-stage exclude each other (all "
                                  "stages share C cores, or each stage has T)");
    b->per_stage = (int)flags[F_PER_STAGE].i;
    if (b->per_stage > b->cores)
      return GP_ERR(GP_ERR_USAGE,
                    "--threads-per-stage %d: this process may use %d core%s (one stage needs %d)",
                    b->per_stage, b->cores, b->cores == 1 ? "" : "s", b->per_stage);
  }
  if (flags[F_MEMORY].given)
    GP_TRY(gp_args_size("--memory-limit", flags[F_MEMORY].s, &c->mem_limit));
  b->mem_limit = c->mem_limit;
  if (flags[F_PRECISION].given)
    GP_TRY(gp_args_precision("--precision", flags[F_PRECISION].s, &c->precision));
  b->precision = c->precision == GP_PREC_BF16 ? "bf16" : "fp32";
  b->nondeterministic = flags[F_NONDET].given;
  b->data = flags[F_DATA].given ? flags[F_DATA].s : "synthetic";
  static const char *const kinds[] = {"synthetic", "real", NULL};
  int kind;
  GP_TRY(gp_cli_choice("--data", b->data, kinds, &kind));
  GP_TRY(make_sweep(c));
  GP_TRY(make_runs(c));
  if (b->per_stage) { /* the most cores a run gives its stages */
    b->threads = 0;
    for (int i = 0; i < b->n_runs; i++)
      if (b->runs[i].cores_used > b->threads) b->threads = b->runs[i].cores_used;
  }
  static const int outs[] = {F_CSV, F_PLOT, F_TRACE};
  gp_file_use in[2] = {{NULL, m->file, NULL}, {"--partition", flags[F_PARTITION].s, NULL}}, out[3];
  GP_TRY(gp_args_files_distinct(in, flags[F_PARTITION].given ? 2 : 1, out,
                                gp_args_file_uses(flags, outs, 3, out)));
  int stale = 0;
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
    if (flags[outs[i]].given) GP_TRY(gp_args_output_ok(&flags[outs[i]], 1, &stale));
  /* an SVG named plot.png opens as a broken image: browsers go by the name */
  const char *plot = flags[F_PLOT].s;
  if (flags[F_PLOT].given && (strlen(plot) < 4 || strcasecmp(plot + strlen(plot) - 4, ".svg")))
    return GP_ERR(GP_ERR_USAGE, "--plot %s: the plot is SVG; give a name ending in .svg", plot);
  if (stale && !c->quiet)
    fprintf(stderr,
            "gpipe-bench: removed %d temporary file%s that killed runs left beside the "
            "output files\n",
            stale, stale == 1 ? "" : "s");
  gp_unit_costs uc;
  GP_TRY(gp_unit_costs_compute(m, 1, GP_COST_FLOPS, 1, NULL, &uc));
  for (int u = 0; u < uc.n; u++)
    b->flops_per_sample += uc.fwd_flops[u] + uc.bwd_flops[u];
  gp_unit_costs_free(&uc);
  GP_TRY(open_data(c));
  gp_cpu_model(b->cpu_model, sizeof b->cpu_model);
  if (!c->quiet && c->tty) fprintf(stderr, "gpipe-bench: measuring sgemm on one core...");
  b->sgemm_per_core = gp_sgemm_gflops(1);
  for (int i = 0; i < c->sw.n_dev && !b->gpu_name[0]; i++)
    if (strncmp(c->sw.devices[i], "cuda:", 5) == 0) {
      if (!c->quiet && c->tty)
        fprintf(stderr, "\r\033[Kgpipe-bench: measuring GEMM on %s...", c->sw.devices[i]);
      snprintf(b->gpu_name, sizeof b->gpu_name, "%s", c->sw.devices[i]);
      b->gpu_gemm = gp_gpu_gemm_gflops(atoi(c->sw.devices[i] + 5), c->precision);
    }
  if (!c->quiet && c->tty) fprintf(stderr, "\r\033[K");
  return GP_OK;
}

/* Distinct CUDA devices among the stages of a K-stage run (as run_plan places them). */
static int gpus_of(const sweep *w, int k) {
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

/* ---- the sweep ----------------------------------------------------------------------------- */

/* A failure that says the run needs more memory than a stage's device has: past --memory-limit
 * (either backend) or past a GPU's memory (GP_ERR_FULL), not host memory running out or any
 * other failure. */
static int over_limit(gp_status s) {
  return s == GP_ERR_FULL;
}

/* One repetition of run r, kept when it is r's fastest. A run whose memory would pass the limit
 * does not fit: it is marked (and not run again) instead of stopping the sweep. */
static gp_status measure_run(ctx *c, gp_bench_run *r, int rep, int trace) {
  gp_bench_run got;
  gp_status s = measure(c, r, trace, &got);
  if (s != GP_OK && over_limit(s)) {
    r->over_limit = 1;
    snprintf(r->why, sizeof r->why, "%s", gp_error_message());
    memcpy(r->balance, got.balance, sizeof r->balance);
    memcpy(r->devices, got.devices, sizeof r->devices);
    gp_error_clear();
    return GP_OK;
  }
  if (s != GP_OK)
    return gp_error_prefix(s, "K=%d M=%d %s %s: ", r->k, r->m, gp_bench_schedule_name(r->schedule),
                           gp_bench_remat_name(r->remat));
  if (rep == 0 || got.samples_per_s > r->samples_per_s) *r = got;
  return GP_OK;
}

/* The speed-ups, FLOP rate and utilization of run r from its samples/s; NAN where r, or the
 * reference a speed-up is against, did not fit. */
static void derive(ctx *c, gp_bench_run *r) {
  gp_bench *b = &c->b;
  r->gpus_used = gpus_of(&c->sw, r->k);
  if (r->over_limit) {
    r->samples_per_s = r->speedup_naive = r->speedup_single = NAN;
    r->bubble_measured = r->bubble_sim = r->bubble_replay = r->bubble_slowest = NAN;
    r->gflops = r->utilization = NAN;
    r->steal = -1;
    return;
  }
  const gp_bench_run *naive = &b->runs[r->naive], *one = &b->runs[r->one];
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
                first->m, gp_bench_schedule_name(first->schedule),
                gp_bench_remat_name(first->remat), first->why);
}

static gp_status sweep_all(ctx *c) {
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
      gp_status s = measure_run(c, r, rep, flags[F_TRACE].given && done == total - 1);
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

static gp_status csv_writer(FILE *fp, const char *path, const void *b) {
  return gp_bench_write_csv(fp, path, b);
}

static gp_status svg_writer(FILE *fp, const char *path, const void *b) {
  return gp_bench_write_svg(fp, path, b);
}

static gp_status report(ctx *c) {
  const gp_bench *b = &c->b;
  /* the files first: a reader of stdout that stops early (| head) must not cost them */
  if (flags[F_CSV].given) GP_TRY(gp_args_write_output(&flags[F_CSV], csv_writer, b));
  if (flags[F_PLOT].given) GP_TRY(gp_args_write_output(&flags[F_PLOT], svg_writer, b));
  if (flags[F_JSON].given)
    GP_TRY(gp_bench_write_json(stdout, "stdout", b));
  else
    GP_TRY(gp_bench_write_table(stdout, b));
  if (!c->quiet) {
    if (flags[F_CSV].given) fprintf(stderr, "gpipe-bench: wrote %s\n", flags[F_CSV].s);
    if (flags[F_PLOT].given) fprintf(stderr, "gpipe-bench: wrote %s\n", flags[F_PLOT].s);
    if (c->traced)
      fprintf(stderr, "gpipe-bench: wrote %s\n", flags[F_TRACE].s);
    else if (flags[F_TRACE].given)
      fprintf(stderr,
              "gpipe-bench: no trace written: the last run does not fit the memory limit\n");
  }
  return GP_OK;
}

static gp_status data_only(ctx *c, const char *file) {
  /* the sweep's flags would be ignored here: refused, so none is thought to have acted */
  static const int sweep_only[] = {
      F_STAGES,    F_MICRO,  F_SCHEDULE,  F_REMAT,  F_DEVICES, F_PARTITION, F_DATA, F_THREADS,
      F_PER_STAGE, F_MEMORY, F_PRECISION, F_NONDET, F_REPS,    F_CSV,       F_PLOT, F_TRACE};
  for (size_t i = 0; i < sizeof sweep_only / sizeof sweep_only[0]; i++)
    if (flags[sweep_only[i]].given)
      return GP_ERR(GP_ERR_USAGE, "%s does not apply to --data-only (it times the data alone)",
                    flags[sweep_only[i]].name);
  GP_TRY(load_model(file, &c->m));
  int64_t batch = c->m->train.batch_size; /* --batch-size went into the load */
  int steps = flags[F_STEPS].given ? (int)flags[F_STEPS].i : 20;
  int warmup = flags[F_WARMUP].given ? (int)flags[F_WARMUP].i : 2;
  int workers[MAX_LIST], n = 1;
  workers[0] = c->m->data.workers;
  if (flags[F_WORKERS].given) GP_TRY(parse_ints(F_WORKERS, 0, 256, workers, &n));
  return gp_bench_data_only(c->m, batch, workers, n, steps, warmup, flags[F_JSON].given, c->quiet);
}

int main(int argc, char **argv) {
  gp_args_std_fds();
  gp_interrupt_install("gpipe-bench", NULL);
  const char *pos[1];
  int npos;
  ctx c = {0};
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s == GP_OK && flags[F_HELP].given) {
    gp_args_usage("gpipe-bench", "MODEL.yaml [flags]", flags);
    gp_args_free(flags);
    return 0;
  }
  if (s == GP_OK && flags[F_VERSION].given) {
    printf("gpipe-bench %s\n", GP_VERSION);
    gp_args_free(flags);
    return 0;
  }
  if (s == GP_OK && npos != 1)
    s = GP_ERR(GP_ERR_USAGE,
               "expected one model file (usage: gpipe-bench MODEL.yaml [flags]; --help)");
  c.quiet = flags[F_QUIET].given;
  c.tty = isatty(2);
  if (s == GP_OK) gp_blas_pick_kernels(argv);
  if (s == GP_OK && flags[F_WORKERS].given && !flags[F_DATA_ONLY].given)
    s = GP_ERR(GP_ERR_USAGE, "--workers is for --data-only (the sweep's data is synthetic unless "
                             "--data real, decoded as the model file's data section says)");
  if (s == GP_OK && flags[F_DATA_ONLY].given) {
    s = data_only(&c, pos[0]);
  } else {
    if (s == GP_OK) s = setup(&c, pos[0]);
    if (s == GP_OK) s = sweep_all(&c);
    if (s == GP_OK) s = report(&c);
  }
  gp_data_close(&c.data);
  gp_model_free(c.m);
  free(c.b.runs);
  gp_args_free(flags);
  if (s != GP_OK) return gp_cli_fail("gpipe-bench", s, NULL);
  return 0;
}
