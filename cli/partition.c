/* gpipe-partition: previews how a model would be cut into pipeline stages (per-stage cost,
 * memory, boundary traffic, predicted bubble and speed-up, a timeline) and writes the plan
 * gpipe-train --partition reads. Exit codes: 0 ok, 2 bad model file, usage or impossible
 * request, 1 a failure while running (measuring, writing). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/machine.h"
#include "cli/partition.h"
#include "cli/split.h"
#include "core/plan/choose.h"
#include "core/io/json.h"
#include "core/backend.h"
#include "core/decimal.h"
#include "core/env.h"
#include "core/spec/cfg.h"
#include "core/spec/spec.h"
#include "core/plan/solve.h"
#include "core/plan/plan.h"
#include "core/plan/plan_io.h"
#include "core/schedule/schedule.h"
#include "gp_config.h"

enum {
  F_STAGES,
  F_BALANCE,
  F_MICRO,
  F_BY,
  F_MEMORY,
  F_SCHEDULE,
  F_VIRTUAL,
  F_REMAT,
  F_DEVICES,
  F_SPEEDS,
  F_BATCH,
  F_THREADS,
  F_PRECISION,
  F_CACHE,
  F_TIMELINE,
  F_JSON,
  F_OUT,
  F_SET,
  F_PROCESSES,
  F_REPLICAS,
  F_HOSTS,
  F_PPH,
  F_LOCAL,
  F_REMOTE,
  F_TFLOPS,
  F_CLUSTER,
  F_HELP,
  F_VERSION,
  F_COUNT
};

static gp_flag flags[] = {
    [F_STAGES] = {"--stages", GP_FLAG_INT, "K", "pipeline stages (default: the model file's)", 1},
    [F_BALANCE] = {"--balance", GP_FLAG_STR, "a,b,...",
                   "units per stage: predict this split instead of finding one", 0},
    [F_MICRO] = {"--micro-batches", GP_FLAG_INT, "M", "micro-batches per mini-batch", 1},
    [F_BY] = {"--by", GP_FLAG_STR, "flops|params|time",
              "balance estimated FLOPs (default), parameters, or measured time", 0},
    [F_MEMORY] = {"--memory-limit", GP_FLAG_STR, "SIZE[,SIZE...]",
                  "per-device memory limit: 16GiB, 512MiB, 1.5GB, bytes", 0},
    [F_SCHEDULE] = {"--schedule", GP_FLAG_STR, "gpipe|1f1b|zb-h1|zb-h2|interleaved|auto",
                    "pipeline schedule (default auto: the fastest simulated)", 0},
    [F_VIRTUAL] = {"--virtual-stages", GP_FLAG_INT, "V",
                   "interleaved: model chunks per stage (K x V chunks in all)", 1},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "auto|always|except_last|never", "re-materialization", 0},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "cpu,cpu,...", "device of each stage (or one for all)",
                   0},
    [F_SPEEDS] = {"--speeds", GP_FLAG_STR, "1,1.5,...",
                  "relative speed of each stage's device (or one for all)", 0},
    [F_BATCH] = {"--batch-size", GP_FLAG_INT, "B", "mini-batch size (default: the model file's)", 1,
                 .max = GP_MAX_BATCH},
    [F_THREADS] = {"--threads", GP_FLAG_INT, "N",
                   "CPU threads shared by the stages, for --by time (default: all cores); with "
                   "--processes: each process's (default: cores / processes a host)",
                   1, .max = 1024},
    [F_PRECISION] = {"--precision", GP_FLAG_STR, "fp32|bf16|bf16-mixed",
                     "memory as trained with this precision (bf16-mixed: activations kept in 16 "
                     "bits; default fp32)",
                     0},
    [F_CACHE] = {"--cache-dir", GP_FLAG_STR, "DIR",
                 "where --by time keeps measurements (default ~/.cache/gpipe)", 0},
    [F_TIMELINE] = {"--timeline", GP_FLAG_BOOL, NULL, "draw the simulated schedule", 0},
    [F_JSON] = {"--json", GP_FLAG_BOOL, NULL, "print JSON instead of the table", 0},
    [F_OUT] =
        {"-o", GP_FLAG_STR, "PLAN.yaml",
         "write the plan (for gpipe-train --partition; with --processes: each stage's process)", 0},
    [F_SET] = {"--set", GP_FLAG_LIST, "KEY.PATH=VALUE",
               "override a scalar of the model file (repeatable)", 0},
    [F_PROCESSES] = {"--processes", GP_FLAG_INT, "W",
                     "predict a launch of W processes (mpirun -np W; default: every slot of the "
                     "hosts, else one a replica)",
                     1, .max = GP_MAX_PROCESSES},
    [F_REPLICAS] = {"--replicas", GP_FLAG_INT, "R",
                    "data-parallel replicas of the pipeline, W/R processes each (default: the "
                    "model file's)",
                    1, .max = GP_MAX_PROCESSES},
    [F_HOSTS] = {"--hosts", GP_FLAG_INT, "N", "hosts the processes fill in rank order (default 1)",
                 1, .max = GP_MAX_PROCESSES},
    [F_PPH] = {"--procs-per-host", GP_FLAG_INT, "G", "processes a host (default W / hosts)", 1,
               .max = GP_MAX_PROCESSES},
    [F_LOCAL] = {"--link-local", GP_FLAG_STR, "GB/s[,us]",
                 "bandwidth and latency between the processes of a host", 0},
    [F_REMOTE] = {"--link-remote", GP_FLAG_STR, "GB/s[,us]",
                  "bandwidth and latency between processes on different hosts", 0},
    [F_TFLOPS] = {"--device-tflops", GP_FLAG_STR, "T",
                  "TFLOP/s a device sustains (default: a GEMM measured here)", 0},
    [F_CLUSTER] = {"--cluster", GP_FLAG_STR, "FILE",
                   "the machines as YAML: hosts, procs_per_host, device_tflops, link_local, ...",
                   0},
    [F_HELP] = {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
    [F_VERSION] = {"--version", GP_FLAG_BOOL, NULL, "show the version", 0},
    {NULL},
};
_Static_assert(sizeof flags / sizeof flags[0] == F_COUNT + 1, "flag table");

/* ---- parsing ----------------------------------------------------------------------------- */

static gp_status choice(int f, const char *const *names, int *out) {
  return flags[f].given ? gp_cli_choice(flags[f].name, flags[f].s, names, out) : GP_OK;
}

/* Splits a comma list into at most max fields of at most 63 characters. */
static gp_status split(const char *flag, const char *text, char fields[][64], int max, int *n) {
  *n = 0;
  for (const char *p = text;;) {
    size_t len = strcspn(p, ",");
    if (len == 0) /* "1,,2" and "1," said "at most 64 values", which they are */
      return GP_ERR(GP_ERR_USAGE, "%s: an empty value in '%s' (values separated by commas)", flag,
                    text);
    if (len >= 64) return GP_ERR(GP_ERR_USAGE, "%s: '%.*s' is too long", flag, (int)len, p);
    if (*n >= max)
      return GP_ERR(GP_ERR_USAGE, "%s: expected at most %d values separated by commas, got '%s'",
                    flag, max, text);
    memcpy(fields[*n], p, len);
    fields[(*n)++][len] = 0;
    if (!p[len]) return GP_OK;
    p += len + 1;
  }
}

/* One value for every stage, or one per stage. */
static gp_status per_stage(const char *flag, const char *text, int k, int is_size, double *out) {
  char f[GP_MAX_DEVICES][64];
  int n;
  GP_TRY(split(flag, text, f, GP_MAX_DEVICES, &n));
  if (n != 1 && n != k)
    return GP_ERR(GP_ERR_USAGE, "%s: %d values for %d stage%s (give one, or one per stage)", flag,
                  n, k, k == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    char *end;
    double v = 0;
    /* a speed is decimal: no leading space or sign */
    int ok = is_size ? gp_args_bytes(f[i], &v)
                     : (isdigit((unsigned char)f[i][0]) || f[i][0] == '.') &&
                           (v = gp_decimal(f[i], &end), end != f[i] && !*end);
    if (!ok || !isfinite(v) || v <= 0 || (!is_size && (v < 1e-3 || v > 1e3)))
      return is_size ? GP_ERR(GP_ERR_USAGE,
                              "%s: cannot read '%s' as a size (like 16GiB, 512MiB, 1.5GB or "
                              "1000000 bytes)",
                              flag, f[i])
                     : GP_ERR(GP_ERR_USAGE,
                              "%s: expected a speed relative to 1, from 0.001 to 1000, got '%s'",
                              flag, f[i]);
    out[i] = v;
  }
  for (int i = n; i < k; i++)
    out[i] = out[0];
  return GP_OK;
}

/* Interleaved: the parts are the K V chunks (q->stages of them): a chunk runs on its stage's
 * device at its speed, and its V chunks share the stage's memory (the partitioner holds them
 * to their stage's limit together, else to a V-th each: gp_partition_solve_devices). */
static void share_chunks(gp_part_request *q, int devs) {
  for (int s = q->stages - 1; s >= devs; s--) {
    memcpy(q->devices[s], q->devices[s % devs], sizeof q->devices[s]);
    q->speed[s] = q->speed[s % devs];
    q->mem_limit[s] = q->mem_limit[s % devs] / q->chunks;
  }
  for (int s = 0; s < devs && q->chunks > 1; s++)
    q->mem_limit[s] /= q->chunks;
}

static gp_status fill_request(const gp_model *m, const gp_pipeline_spec *ps, gp_part_request *q) {
  const int devs = ps->stages; /* interleaved: the split is of the K V chunks */
  q->chunks = ps->virtual_stages > 1 ? ps->virtual_stages : 1;
  q->stages = devs * q->chunks;
  /* --micro-batches and --batch-size went into the load, which checked them */
  q->micro = ps->micro_batches;
  q->batch = m->train.batch_size;
  /* uneven splits give the first batch % M micro-batches one more sample: size for those */
  q->micro_batch = (q->batch + q->micro - 1) / q->micro;
  q->replicas = ps->replicas > 1 ? ps->replicas : 1; /* the file's; --replicas: dist setup */
  q->replica_batch = q->batch;
  q->schedule = ps->schedule;
  q->schedule_auto = ps->schedule == GP_SCHED_AUTO;
  q->remat = ps->remat;
  int v = GP_COST_FLOPS;
  GP_TRY(choice(F_BY, gp_part_by_names, &v));
  q->by = (gp_cost_by)v;
  q->n_devices = ps->n_devices ? ps->n_devices : 1;
  for (int i = 0; i < q->n_devices; i++)
    snprintf(q->devices[i], sizeof q->devices[i], "%s", ps->n_devices ? ps->devices[i] : "cpu");
  if (q->n_devices != 1 && q->n_devices != devs)
    return GP_ERR(GP_ERR_USAGE, "%s%d devices for %d stage%s (give one, or one per stage)",
                  flags[F_DEVICES].given ? "--devices: " : "the model file's pipeline section: ",
                  q->n_devices, devs, devs == 1 ? "" : "s");
  for (int s = q->n_devices; s < q->stages; s++)
    memcpy(q->devices[s], q->devices[q->n_devices == 1 ? 0 : s % devs], sizeof q->devices[0]);
  q->n_devices = q->stages;
  GP_TRY(gp_devices_check(q->n_devices, q->devices[0], sizeof q->devices[0]));
  for (int s = 0; s < q->stages; s++)
    q->speed[s] = 1;
  if (flags[F_SPEEDS].given) GP_TRY(per_stage("--speeds", flags[F_SPEEDS].s, devs, 0, q->speed));
  if (flags[F_MEMORY].given) {
    GP_TRY(per_stage("--memory-limit", flags[F_MEMORY].s, devs, 1, q->mem_limit));
    q->has_limit = 1;
  }
  memcpy(q->dev_limit, q->mem_limit, sizeof q->dev_limit);
  share_chunks(q, devs);
  int cores = flags[F_THREADS].given ? (int)flags[F_THREADS].i : gp_cpu_cores();
  /* in the pipeline each stage gets its share of the cores (all of them to each of its chunks
   * in turn): measure units the same way */
  q->threads = cores / devs > 1 ? cores / devs : 1;
  gp_cli_cache_dir(&flags[F_CACHE], q->cache_dir, sizeof q->cache_dir);
  return GP_OK;
}

/* The request: the model file's pipeline section with the pipeline flags applied, then the
 * flags of the preview. */
static gp_status make_request(const gp_model *m, gp_part_request *q) {
  memset(q, 0, sizeof *q);
  gp_pipeline_spec ps = m->pipeline;             /* the file's, with the flags applied */
  if (!flags[F_BALANCE].given) ps.n_balance = 0; /* the file's is no request to skip the search */
  GP_TRY(gp_cli_pipeline_apply(&(gp_cli_pipeline){&flags[F_STAGES], &flags[F_SCHEDULE],
                                                  &flags[F_REMAT], &flags[F_BALANCE],
                                                  &flags[F_DEVICES], &flags[F_VIRTUAL]},
                               m, &ps));
  const int v = ps.virtual_stages > 1 ? ps.virtual_stages : 1; /* a balance lists chunks */
  if (flags[F_BALANCE].given && !flags[F_STAGES].given)
    ps.stages = ps.n_balance % v ? ps.n_balance : ps.n_balance / v;
  GP_TRY(gp_cli_stages_check(m, ps.stages));
  gp_plan plan; /* the checks of V, M and the schedule, and the split given, as gpipe-train */
  if (flags[F_BALANCE].given || v > 1) GP_TRY(gp_plan_make(m, &ps, &plan));
  if (flags[F_BALANCE].given) { /* a split to predict, as gpipe-train would run it */
    q->fixed = 1;
    for (int s = 0; s < plan.stages; s++)
      q->first[s] = plan.st[s].first_unit;
    q->first[plan.stages] = m->n_units;
  }
  return fill_request(m, &ps, q);
}

/* ---- main -------------------------------------------------------------------------------- */

static int fail(gp_status s) {
  return gp_cli_fail("gpipe-partition", s, NULL);
}

/* " --batch-size B" where the run's batch is not the model file's, else "". */
static const char *batch_hint(const gp_part_request *q) {
  static char buf[48];
  buf[0] = 0;
  int set = flags[F_BATCH].given; /* the model as loaded holds the batch of the flags */
  for (int i = 0; i < flags[F_SET].n_list; i++)
    set |= strncmp(flags[F_SET].list[i], "train.batch_size=", 17) == 0;
  if (set) snprintf(buf, sizeof buf, " --batch-size %" PRId64, q->batch);
  return buf;
}

/* A path as a shell word to paste: './' before one starting with '-' (it would read as a
 * flag), single quotes around one holding anything but letters, digits and _./:@%+,=- . */
static const char *sh_path(const char *path, char *buf, size_t n) {
  const char *pre = path[0] == '-' ? "./" : "";
  if (path[strspn(path,
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+,=-")]) {
    size_t k = (size_t)snprintf(buf, n, "'%s", pre);
    for (const char *p = path; *p && k + 5 < n; p++)
      k += (size_t)snprintf(buf + k, n - k, *p == '\'' ? "'\\''" : "%c", *p);
    snprintf(buf + k, n - k, "'");
  } else {
    snprintf(buf, n, "%s%s", pre, path);
  }
  return buf;
}

/* The unit costs. The default cache folder is only a cache: one that cannot be made or
 * written (a read-only home) costs a warning and a measurement without it. An explicit
 * --cache-dir that cannot be used stays an error: the user asked for the cache there. */
static gp_status unit_costs(const gp_model *m, const gp_part_request *q, gp_unit_costs *c) {
  const char *cache = q->cache_dir[0] ? q->cache_dir : NULL;
  gp_precision prec = GP_PREC_FP32;
  if (flags[F_PRECISION].given)
    GP_TRY(gp_args_precision("--precision", flags[F_PRECISION].s, &prec));
  gp_status s = gp_unit_costs_compute(m, q->micro_batch, q->by, q->threads, cache, c);
  if (s == GP_ERR_IO && cache && !flags[F_CACHE].given) {
    fprintf(stderr, "gpipe-partition: not caching unit times: %s\n", gp_error_message());
    gp_error_clear();
    s = gp_unit_costs_compute(m, q->micro_batch, q->by, q->threads, NULL, c);
  }
  /* (GP_BF16_STORE=0 trains with f32 storage: the estimate follows) */
  if (s == GP_OK && prec == GP_PREC_BF16_MIXED && gp_env_get(GP_ENV_BF16_STORE, 1))
    s = gp_unit_costs_bf16_store(m, c);
  return s;
}

static gp_status run(const gp_model *m) {
  gp_part_request q;
  GP_TRY(make_request(m, &q));
  static gp_part_dist d; /* a layout of GP_MAX_PROCESSES entries: off the stack */
  const gp_part_dist_flags df = {&flags[F_PROCESSES], &flags[F_REPLICAS], &flags[F_HOSTS],
                                 &flags[F_PPH],       &flags[F_LOCAL],    &flags[F_REMOTE],
                                 &flags[F_TFLOPS],    &flags[F_CLUSTER]};
  GP_TRY(gp_part_dist_setup(&df, &q, &d));
  if (d.on) { /* the cores are each process's, its stages' threads a share of them */
    int pph = d.cl.procs_per_host, most = 1, here = gp_cpu_cores();
    d.cores = flags[F_THREADS].given ? (int)flags[F_THREADS].i : here / pph > 1 ? here / pph : 1;
    snprintf(d.src_cores, sizeof d.src_cores, "%s",
             flags[F_THREADS].given ? "--threads" : "this machine's cores / processes a host");
    for (int p = 0; p < d.layout.procs; p++) /* (interleaved: a device's chunks take turns) */
      if (d.layout.first[p + 1] - d.layout.first[p] > most)
        most = d.layout.first[p + 1] - d.layout.first[p];
    q.threads = d.cores / most > 1 ? d.cores / most : 1;
  }
  /* a bad -o is found before --by time's measurements, named as given (not its .tmp) */
  int stale = 0;
  if (flags[F_OUT].given) {
    gp_file_use in = {NULL, m->file, NULL}, out = {"-o", flags[F_OUT].s, NULL};
    GP_TRY(gp_args_files_distinct(&in, 1, &out, 1));
    GP_TRY(gp_args_output_ok(&flags[F_OUT], 1, &stale));
  }
  if (stale)
    fprintf(stderr,
            "gpipe-partition: removed %d temporary file%s that killed runs left beside %s\n", stale,
            stale == 1 ? "" : "s", flags[F_OUT].s);
  gp_unit_costs c = {0};
  GP_TRY(unit_costs(m, &q, &c));
  gp_status st = d.on ? gp_part_dist_rate(&q, &d) : GP_OK;
  if (st != GP_OK) {
    gp_unit_costs_free(&c);
    return st;
  }
  const gp_link *lk = d.on ? gp_part_dist_link(&d) : NULL;
  gp_partition_req r = {.stages = q.stages,
                        .micro = q.micro,
                        .schedule = q.schedule,
                        .remat = q.remat,
                        .speed = q.speed,
                        .mem_limit = q.has_limit ? q.mem_limit : NULL,
                        .bytes_per_s = 0, /* CPU stages hand over pointers */
                        .optim_slots = gp_optimizer_slots(&m->train),
                        .chunks = q.chunks,
                        /* every schedule pays its hand-offs between processes alike, in
                           the units of the costs it is weighed on (params have no time) */
                        .procs = d.on ? d.layout.procs : 0,
                        .link_latency_s = lk ? lk->latency_s : 0,
                        .link_bytes_per_s = lk ? lk->bytes_per_s : 0,
                        .seconds_per_cost = q.fixed || q.by != GP_COST_PARAMS ? d.spc : 0};
  gp_partition p;
  gp_sim_events ev = {0};
  double makespan = 0;
  gp_unit_costs tc = gp_part_time_costs(&q, &c);
  gp_partition tried;
  if (q.schedule_auto) { /* the schedule first, on the costs the split is searched on */
    gp_schedule_choice ch;
    st = gp_schedule_choose(q.fixed ? &tc : &c, &r, q.fixed ? q.first : NULL, &ch, &tried);
    if (st == GP_OK) {
      q.schedule = r.schedule = ch.kind[ch.chosen];
      q.remat = r.remat = ch.remat[ch.chosen];
      r.chunks = ch.chunks[ch.chosen];
      gp_schedule_choice_str(&ch, q.chosen, sizeof q.chosen);
    }
  }
  if (st == GP_OK && q.schedule_auto && q.chunks == 1 && r.chunks > 1) {
    p = tried; /* interleaved chosen: the request becomes its chunks' (share_chunks) */
    q.chunks = r.chunks;
    q.stages = r.stages = q.stages * q.chunks;
    q.n_devices = q.stages;
    share_chunks(&q, q.stages / q.chunks);
  } else if (st == GP_OK && q.fixed) {
    st = gp_partition_evaluate(&tc, &r, q.first, &p);
  } else if (st == GP_OK && q.chunks > 1) { /* a limit a device, its chunks' together */
    r.mem_limit = NULL;
    st = gp_partition_solve_devices(&c, &r, q.has_limit ? q.dev_limit : NULL, &p);
    r.mem_limit = q.has_limit ? q.mem_limit : NULL;
  } else if (st == GP_OK) {
    st = gp_partition_solve(&c, &r, &p);
  }
  if (st == GP_OK && !q.fixed && q.by == GP_COST_PARAMS) { /* the same split, from FLOPs */
    int first[GP_MAX_DEVICES + 1];
    memcpy(first, p.first, sizeof first);
    st = gp_partition_evaluate(&tc, &r, first, &p);
  }
  if (st == GP_OK && flags[F_TIMELINE].given) st = gp_part_simulate(&q, &tc, &p, &ev, &makespan);
  if (st == GP_OK && d.on) st = gp_part_dist_predict(&q, &tc, &r, &p, &d);
  if (st == GP_OK && flags[F_OUT].given) {
    gp_pipeline_spec ps = {.stages = q.stages / q.chunks,
                           .micro_batches = q.micro,
                           .virtual_stages = q.chunks,
                           .schedule = q.schedule,
                           .remat = q.remat,
                           .n_devices = q.stages / q.chunks,
                           .n_balance = q.stages};
    for (int s = 0; s < q.stages; s++) {
      ps.balance[s] = p.first[s + 1] - p.first[s];
      memcpy(ps.devices[s], q.devices[s], sizeof ps.devices[s]);
      /* a position a stage (interleaved: a device, the first K chunks' owners) */
      if (d.on && d.layout.procs > 1) ps.procs[s] = gp_layout_owner(&d.layout, s);
    }
    if (d.on && d.layout.procs > 1) ps.n_procs = d.layout.procs;
    gp_plan plan;
    st = gp_plan_make(m, &ps, &plan);
    if (st == GP_OK) st = gp_plan_write(flags[F_OUT].s, m, &plan);
  }
  if (st == GP_OK && flags[F_JSON].given) {
    gp_part_print_json(m, &q, &c, &p, flags[F_TIMELINE].given ? &ev : NULL, &d);
  } else if (st == GP_OK) {
    gp_part_print_table(m, &q, &c, &p);
    if (flags[F_TIMELINE].given) gp_part_print_timeline(&q, &ev, makespan);
    if (d.on) gp_part_dist_print_table(&q, &d);
    if (flags[F_OUT].given) /* the plan holds M, not the batch: name one the run must use */
    {
      char mw[8192], pw[8192];
      printf("\nplan written to %s (gpipe-train %s --partition %s%s)\n", flags[F_OUT].s,
             sh_path(m->file, mw, sizeof mw), sh_path(flags[F_OUT].s, pw, sizeof pw),
             batch_hint(&q));
    }
  }
  gp_sim_events_free(&ev);
  gp_unit_costs_free(&c);
  return st;
}

int main(int argc, char **argv) {
  gp_args_std_fds();
  gp_interrupt_install("gpipe-partition", NULL);
  const char *pos[1];
  int npos;
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s != GP_OK) {
    gp_args_free(flags);
    return fail(s);
  }
  if (flags[F_HELP].given) {
    gp_args_usage("gpipe-partition", "MODEL.yaml [--stages K] [flags]", flags);
    gp_args_free(flags);
    return 0;
  }
  if (flags[F_VERSION].given) {
    printf("gpipe-partition %s\n", GP_VERSION);
    gp_args_free(flags);
    return 0;
  }
  if (npos != 1) {
    gp_args_free(flags);
    fprintf(stderr, "gpipe-partition: expected one model file (usage: gpipe-partition MODEL.yaml "
                    "--stages K [flags]; --help)\n");
    return 2;
  }
  gp_blas_pick_kernels(argv); /* --by time times the layers with the kernels gpipe-train uses */
  const gp_cli_load load = {"gpipe-partition", &flags[F_SET], &flags[F_BATCH], &flags[F_MICRO],
                            NULL};
  gp_model *m = NULL;
  if (s == GP_OK) s = gp_cli_model_load(&load, pos[0], &m);
  if (s == GP_OK) s = run(m);
  if (s == GP_OK && (fflush(stdout) != 0 || ferror(stdout)))
    s = GP_ERR(GP_ERR_IO, "stdout: writing failed");
  gp_model_free(m);
  gp_args_free(flags);
  return s == GP_OK ? 0 : fail(s);
}
