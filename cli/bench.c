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
#include "cli/dist_voice.h"
#include "cli/bench_data.h"
#include "cli/machine.h"
#include "cli/bench.h"
#include "cli/bench_sweep.h"
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
  F_VIRTUAL,
  F_REMAT,
  F_REPLICAS,
  F_STEPS,
  F_WARMUP,
  F_DEVICES,
  F_PARTITION,
  F_BY,
  F_CACHE,
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
    [F_SCHEDULE] = {"--schedule", GP_FLAG_STR, "NAME,...",
                    "schedules: gpipe, 1f1b, zb-h1, zb-h2, interleaved, auto (default: the model "
                    "file's)",
                    0},
    [F_VIRTUAL] = {"--virtual-stages", GP_FLAG_INT, "V",
                   "the interleaved runs' model chunks per stage (default: the model file's)", 1,
                   .max = GP_MAX_DEVICES},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "MODE,...",
                 "re-materialization: auto, always, except_last, never (default: the model file's)",
                 0},
    [F_REPLICAS] = {"--replicas", GP_FLAG_STR, "R,R,...",
                    "data-parallel replicas over the processes of mpirun (default: the model "
                    "file's); a layout the processes cannot hold is skipped",
                    0},
    [F_STEPS] = {"--steps", GP_FLAG_INT, "S", "timed steps per run (default 10)", 1, .max = 4096},
    [F_WARMUP] = {"--warmup", GP_FLAG_INT, "W", "untimed steps before them (default 2)", 0,
                  .max = 4096},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "cpu,...",
                   "device of each stage (one for all, or at least the largest K)", 0},
    [F_PARTITION] = {"--partition", GP_FLAG_STR, "PLAN.yaml",
                     "stages, balance and devices of a gpipe-partition -o plan", 0},
    [F_BY] = {"--by", GP_FLAG_STR, "time|flops|params",
              "the automatic split balances unit times measured here (default; cached), "
              "estimated FLOPs or parameters",
              0},
    [F_CACHE] = {"--cache-dir", GP_FLAG_STR, "DIR",
                 "where --by time keeps measurements (default ~/.cache/gpipe)", 0},
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
    [F_PRECISION] =
        {"--precision", GP_FLAG_STR, "fp32|bf16|bf16-mixed",
         "arithmetic of GEMMs and convolutions (bf16-mixed: also bf16 activations; default fp32)",
         0},
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

_Static_assert(sizeof((gp_bench *)0)->skipped / sizeof((gp_bench *)0)->skipped[0] >= 2 * MAX_LIST,
               "a note for every K and every M of the lists");

const char *gp_bench_schedule_name(gp_schedule_kind s) {
  return s == GP_SCHED_AUTO ? "auto" : gp_schedule_names()[s];
}

void gp_bench_chosen_name(const gp_plan *plan, char *buf, size_t n) {
  const char *name = gp_schedule_names()[plan->schedule];
  if (gp_plan_chunks(plan) > 1)
    snprintf(buf, n, "auto:%s-v%d", name, gp_plan_chunks(plan));
  else
    snprintf(buf, n, "auto:%s", name);
}

const char *gp_bench_remat_name(gp_remat r) {
  return gp_remat_names()[r <= GP_REMAT_AUTO ? r : GP_REMAT_NEVER];
}

/* ---- flags --------------------------------------------------------------------------------- */

/* A list flag's values, none twice (cli/common.h reads them as every program does). */
static gp_status parse_ints(int f, int min_value, int max_value, int *out, int *n) {
  return gp_cli_ints(flags[f].name, flags[f].s, min_value, max_value, 1, out, MAX_LIST, n);
}

/* The sweep's lists from the flags, a plan, and the model file's pipeline section. */
static gp_status make_sweep(gp_bench_ctx *c) {
  gp_model *m = c->m;
  gp_bench_sweep *w = &c->sw;
  const gp_pipeline_spec *ps = &m->pipeline;
  w->ks[0] = ps->stages;
  w->nk = 1;
  w->ms[0] = ps->micro_batches;
  w->nm = 1;
  w->scheds[0] = (int)ps->schedule;
  w->ns = 1;
  w->remats[0] = (int)ps->remat;
  w->nr = 1;
  w->rs[0] = ps->replicas > 0 ? ps->replicas : 1;
  w->nrep = 1;
  w->n_dev = ps->n_devices;
  memcpy(w->devices, ps->devices, sizeof w->devices);
  w->vs = ps->virtual_stages > 1 ? ps->virtual_stages : 1;
  w->bal_k = ps->n_balance;
  memcpy(w->balance, ps->balance, sizeof w->balance);
  if (flags[F_PARTITION].given) {
    if (flags[F_STAGES].given || flags[F_DEVICES].given)
      return GP_ERR(GP_ERR_USAGE, "--partition fixes the stages and devices; drop %s",
                    flags[F_STAGES].given ? "--stages" : "--devices");
    gp_plan plan;
    GP_TRY(gp_plan_read(flags[F_PARTITION].s, m, &plan));
    gp_args_note("gpipe-bench", plan.renamed);
    w->ks[0] = w->n_dev = gp_plan_devices(&plan);
    w->bal_k = plan.stages;
    w->vs = gp_plan_chunks(&plan);
    w->ms[0] = plan.micro;
    w->scheds[0] = (int)plan.schedule;
    w->remats[0] = (int)plan.remat;
    for (int s = 0; s < plan.stages; s++) {
      w->balance[s] = plan.st[s].end_unit - plan.st[s].first_unit;
      memcpy(w->devices[s], plan.st[s].device, sizeof w->devices[s]);
    }
  }
  if (flags[F_STAGES].given) GP_TRY(parse_ints(F_STAGES, 1, GP_MAX_DEVICES, w->ks, &w->nk));
  if (flags[F_MICRO].given) GP_TRY(parse_ints(F_MICRO, 1, GP_MAX_MICRO_BATCHES, w->ms, &w->nm));
  if (flags[F_REPLICAS].given) GP_TRY(parse_ints(F_REPLICAS, 1, GP_MAX_PROCESSES, w->rs, &w->nrep));
  if (flags[F_SCHEDULE].given) {
    int named;
    const char *const *names = gp_cli_schedule_choices(&named);
    GP_TRY(gp_cli_choices(flags[F_SCHEDULE].name, flags[F_SCHEDULE].s, names, w->scheds,
                          (int)(sizeof w->scheds / sizeof w->scheds[0]), &w->ns));
    for (int i = 0; i < w->ns; i++)
      if (w->scheds[i] == named) w->scheds[i] = (int)GP_SCHED_AUTO;
  }
  if (flags[F_VIRTUAL].given) w->vs = (int)flags[F_VIRTUAL].i;
  int inter = 0;
  for (int i = 0; i < w->ns; i++)
    inter |= w->scheds[i] == GP_SCHED_INTERLEAVED;
  if (inter && w->vs < 2)
    return GP_ERR(GP_ERR_USAGE,
                  "the interleaved schedule needs 2 or more virtual stages (--virtual-stages V)");
  if (!inter && flags[F_VIRTUAL].given && w->vs > 1)
    return GP_ERR(GP_ERR_USAGE,
                  "--virtual-stages %d: only the interleaved schedule has virtual "
                  "stages (--schedule interleaved)",
                  w->vs);
  if (flags[F_REMAT].given)
    GP_TRY(gp_cli_choices(flags[F_REMAT].name, flags[F_REMAT].s, gp_remat_names(), w->remats, 4,
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

/* ---- setup --------------------------------------------------------------------------------- */

/* The training split (synthetic: 4 batches of images; token data has 16). */
static gp_status open_data(gp_bench_ctx *c) {
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

static gp_status setup(gp_bench_ctx *c, const char *file) {
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
  b->processes = c->dist.world;
  /* the cores of a host are shared among its processes: no oversubscription by default */
  int share = b->cores / c->dist.local_size;
  b->threads = flags[F_THREADS].given ? (int)flags[F_THREADS].i : share > 1 ? share : 1;
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
  b->precision = gp_args_precision_name(c->precision);
  b->nondeterministic = flags[F_NONDET].given;
  c->stages_given = flags[F_STAGES].given;
  c->remat_given = flags[F_REMAT].given;
  c->partition = flags[F_PARTITION].given ? flags[F_PARTITION].s : NULL;
  c->trace = flags[F_TRACE].given ? flags[F_TRACE].s : NULL;
  b->data = flags[F_DATA].given ? flags[F_DATA].s : "synthetic";
  static const char *const kinds[] = {"synthetic", "real", NULL};
  int kind;
  GP_TRY(gp_cli_choice("--data", b->data, kinds, &kind));
  gp_cost_by by; /* a bad --by is refused whether or not a run splits automatically */
  GP_TRY(gp_cli_split_by(&c->split, &by));
  GP_TRY(make_sweep(c));
  GP_TRY(gp_bench_make_runs(c));
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

static gp_status csv_writer(FILE *fp, const char *path, const void *b) {
  return gp_bench_write_csv(fp, path, b);
}

static gp_status svg_writer(FILE *fp, const char *path, const void *b) {
  return gp_bench_write_svg(fp, path, b);
}

static gp_status report(gp_bench_ctx *c) {
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

static gp_status data_only(gp_bench_ctx *c, const char *file) {
  /* the sweep's flags would be ignored here: refused, so none is thought to have acted */
  static const int sweep_only[] = {F_STAGES,    F_MICRO,  F_SCHEDULE, F_REMAT,     F_DEVICES,
                                   F_PARTITION, F_DATA,   F_THREADS,  F_PER_STAGE, F_MEMORY,
                                   F_PRECISION, F_NONDET, F_REPS,     F_CSV,       F_PLOT,
                                   F_TRACE,     F_VIRTUAL};
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

/* Frees what the program holds and ends the processes' runtime; returns code. */
static int finish(gp_bench_ctx *c, int code) {
  gp_data_close(&c->data);
  gp_model_free(c->m);
  free(c->b.runs);
  gp_args_free(flags);
  gp_dist_finalize(&c->dist);
  return code;
}

int main(int argc, char **argv) {
  gp_args_std_fds();
  gp_interrupt_install("gpipe-bench", NULL);
  const char *pos[1];
  int npos;
  gp_bench_ctx c = {0};
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
  /* under mpirun every process runs the sweep in lockstep; rank 0 alone prints */
  gp_status d = gp_cli_dist_start(&c.dist, "gpipe-bench", 20);
  if (d != GP_OK) {
    gp_args_free(flags);
    return gp_cli_fail("gpipe-bench", d, NULL);
  }
  if (s == GP_OK && npos != 1)
    s = GP_ERR(GP_ERR_USAGE,
               "expected one model file (usage: gpipe-bench MODEL.yaml [flags]; --help)");
  c.quiet = flags[F_QUIET].given;
  c.split =
      (gp_cli_split){"gpipe-bench", &flags[F_BY], &flags[F_CACHE], c.quiet || c.dist.rank != 0};
  c.tty = isatty(2);
  if (s == GP_OK) gp_blas_pick_kernels(argv);
  if (s == GP_OK && flags[F_WORKERS].given && !flags[F_DATA_ONLY].given)
    s = GP_ERR(GP_ERR_USAGE, "--workers is for --data-only (the sweep's data is synthetic unless "
                             "--data real, decoded as the model file's data section says)");
  if (s == GP_OK && flags[F_DATA_ONLY].given && c.dist.world > 1)
    s = GP_ERR(GP_ERR_USAGE, "--data-only times one process's loader: run it without mpirun");
  if (s == GP_OK && flags[F_DATA_ONLY].given) {
    s = data_only(&c, pos[0]);
  } else {
    if (s == GP_OK) s = setup(&c, pos[0]);
    int elsewhere = 0; /* a setup error is every process's: reported once, by the lowest rank */
    s = gp_cli_dist_agree(&c.dist, s, &elsewhere);
    if (s != GP_OK && c.dist.world > 1) {
      gp_cli_dist_setup_failed(&c.dist, "gpipe-bench", elsewhere);
      return finish(&c, gp_status_exit_code(s));
    }
    if (s == GP_OK) s = gp_bench_dist_links(&c);
    if (s == GP_OK) s = gp_bench_sweep_all(&c);
    if (s == GP_OK && c.dist.rank == 0) s = report(&c);
  }
  if (s != GP_OK && c.dist.world > 1) return gp_cli_dist_fail(&c.dist, "gpipe-bench", s, NULL);
  return finish(&c, s != GP_OK ? gp_cli_fail("gpipe-bench", s, NULL) : 0);
}
