/* gpipe-bench's writers: the aligned table on stdout, one CSV row per run, and JSON (the
 * speed-up plot is bench_svg.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench.h"
#include "core/io/json.h"
#include "cli/machine.h"
#include "core/decimal.h"

gp_status gp_bench_stream_status(FILE *f, const char *path) {
  errno = 0; /* a reason only from this flush, not a stale one */
  if (fflush(f) == 0 && !ferror(f)) return GP_OK;
  if (!errno) return GP_ERR(GP_ERR_IO, "%s: writing failed", path);
  return GP_ERR(GP_ERR_IO, "%s: writing failed: %s", path, strerror(errno));
}

/* "a/b/c" (table) or "a;b;c" (CSV) of one per-stage value. */
static void join_ms(char *buf, size_t n, const double *v, int k, char sep, const char *fmt) {
  size_t at = 0;
  buf[0] = 0;
  for (int s = 0; s < k && at < n; s++) {
    if (s) buf[at++] = sep;
    at += (size_t)snprintf(buf + at, n - at, fmt, v[s]);
  }
}

static void join_mib(char *buf, size_t n, const size_t *v, int k, char sep) {
  double d[GP_MAX_DEVICES];
  for (int s = 0; s < k; s++)
    d[s] = (double)v[s] / 1048576.0;
  join_ms(buf, n, d, k, sep, "%.2f");
}

static double finite_or_0(double x) {
  return isfinite(x) ? x : 0;
}

/* ---- table --------------------------------------------------------------------------------- */

/* a cell holds any balance (GP_PLAN_BALANCE_LEN) and every stage's "%.2f/" of busy ms or MiB */
enum { NCOL = 20, CELL = GP_PLAN_BALANCE_LEN };
/* a bubble further above GPipe's than this gets a line on where the rest went (issue 5's
 * tolerance for balanced runs) */
#define BUBBLE_NOTE_OVER 0.05
/* a pipelined run below this share of its ideal speed-up gets a line on why (issue 5's mark) */
#define IDEAL_NOTE_UNDER 0.85
_Static_assert(CELL >= GP_PLAN_BALANCE_LEN, "a balance fits its cell");

/* R is left empty, and so out of the table, unless a run has replicas */
static const char *const col_head[NCOL] = {"K",
                                           "M",
                                           "R",
                                           "schedule",
                                           "remat",
                                           "balance",
                                           "samples/s",
                                           "vs naive",
                                           "of ideal",
                                           "vs single",
                                           "bubble",
                                           "slowest",
                                           "replay",
                                           "sim",
                                           "theory",
                                           "GFLOP/s",
                                           "util",
                                           "busy ms per stage",
                                           "peak MiB per stage",
                                           ""};
static const int col_left[NCOL] = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1};

/* A number, or "-" where there is none (a run that did not fit, a speed-up against one). */
static void cell_num(char *cell, const char *fmt, double v) {
  if (isfinite(v))
    snprintf(cell, CELL, fmt, v);
  else
    snprintf(cell, CELL, "-");
}

const char *gp_bench_fit_what(const gp_bench *b, char *buf, size_t n) {
  if (b->mem_limit)
    gp_args_bytes_str((double)b->mem_limit, 2, buf, n);
  else
    snprintf(buf, n, "GPU memory");
  return buf;
}

/* The measured cells of a row: samples/s to peak MiB (columns 6 to 18). "of ideal" is the
 * speed-up over naive-K as a share of K M / (M + K - 1), where there is a pipeline (K, M > 1). */
static void fill_measured(char (*row)[CELL], const gp_bench *b, const gp_bench_run *r) {
  char fit[32];
  if (r->over_limit)
    snprintf(row[6], CELL, "does not fit %s", gp_bench_fit_what(b, fit, sizeof fit));
  else
    snprintf(row[6], CELL, "%.1f", r->samples_per_s);
  cell_num(row[7], "%.2fx", r->speedup_naive);
  cell_num(row[8], "%.0f%%",
           r->k > 1 && r->m > 1 ? 100.0 * r->speedup_naive / r->speedup_ideal : NAN);
  cell_num(row[9], "%.2fx", r->speedup_single);
  cell_num(row[10], "%.3f", r->bubble_measured);
  cell_num(row[11], "%.3f", r->bubble_slowest);
  cell_num(row[12], "%.3f", r->bubble_replay);
  cell_num(row[13], "%.3f", r->bubble_sim);
  snprintf(row[14], CELL, "%.3f", r->bubble_theory);
  cell_num(row[15], "%.2f", r->gflops);
  cell_num(row[16], "%.1f%%", 100.0 * r->utilization);
  if (r->over_limit) {
    snprintf(row[17], CELL, "-");
    snprintf(row[18], CELL, "-");
    return;
  }
  join_ms(row[17], CELL, r->busy_ms, r->k, '/', "%.2f");
  join_mib(row[18], CELL, r->peak_bytes, r->k, '/');
}

/* Below the table: each run that did not fit, and each reference that did not, so the runs
 * measured against it have no speed-up ("-"). */
static void write_fit_notes(FILE *f, const gp_bench *b) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (!r->over_limit) continue;
    fprintf(f, "does not fit: K=%d M=%d %s %s: %s\n", r->k, r->m, r->sched_name,
            gp_bench_remat_name(r->remat), r->why);
  }
  for (int i = 0; i < b->n_runs; i++) {
    int naive = 0, one = 0;
    for (int j = 0; j < b->n_runs && b->runs[i].over_limit; j++) {
      naive |= !b->runs[j].over_limit && b->runs[j].naive == i;
      one |= !b->runs[j].over_limit && b->runs[j].one == i;
    }
    if (!naive && !one) continue;
    char what[64] = "";
    if (naive) snprintf(what, sizeof what, "vs naive at K=%d", b->runs[i].k);
    if (one)
      snprintf(what + strlen(what), sizeof what - strlen(what), "%svs single",
               naive ? " and " : "");
    char fit[32];
    fprintf(f, "no speed-up over K=%d M=1 gpipe never (%s: '-'): it does not fit %s\n",
            b->runs[i].k, what, gp_bench_fit_what(b, fit, sizeof fit));
  }
}

/* Each replicated run: its gradients' all-reduce a step, and how much of it the backward hid. */
static void write_allreduce_notes(FILE *f, const gp_bench *b) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->over_limit || r->replicas < 2 || !isfinite(r->allreduce_ms)) continue;
    fprintf(f,
            "all-reduce K=%d M=%d %s %s R=%d: %.2f ms a step for %.2f MiB, %.0f%% hidden under "
            "the backward\n",
            r->k, r->m, r->sched_name, gp_bench_remat_name(r->remat), r->replicas, r->allreduce_ms,
            (double)r->allreduce_bytes / 1048576.0, 100 * r->allreduce_hidden);
  }
}

/* More threads than cores: they take turns, and util's peak counts a core per thread. */
static void write_threads_note(FILE *f, const gp_bench *b) {
  if (b->threads <= b->cores) return;
  int most = 0; /* the most cores a CPU run's util is against */
  for (int i = 0; i < b->n_runs; i++)
    if (!b->runs[i].gpus_used && b->runs[i].cores_used > most) most = b->runs[i].cores_used;
  fprintf(f, "note: %d threads on %d core%s: oversubscribed, the threads take turns", b->threads,
          b->cores, b->cores == 1 ? "" : "s");
  if (most > b->cores)
    fprintf(f,
            "; util counts the sgemm peak of every core a run uses (up to %d) but only %d exist: "
            "at %d it cannot pass %.0f%%",
            most, b->cores, most, 100.0 * b->cores / most);
  fprintf(f, "\n");
}

/* Each pipelined run whose bubble exceeds GPipe's by more than 0.05: the excess split into
 * what the stages' unequal mean times cost (sim - theory), the spread of their actions' times
 * (replay - sim) and the hand-offs with the work between actions (bubble - replay), which add
 * up to it; and the idle of the stage that set each step's pace, beside. */
static void write_bubble_notes(FILE *f, const gp_bench *b) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->over_limit || r->k < 2 || r->m < 2 || !isfinite(r->bubble_measured) ||
        r->bubble_measured - r->bubble_theory <= BUBBLE_NOTE_OVER)
      continue;
    fprintf(f, "bubble K=%d M=%d %s %s: %.3f against GPipe's %.3f", r->k, r->m, r->sched_name,
            gp_bench_remat_name(r->remat), r->bubble_measured, r->bubble_theory);
    if (isfinite(r->bubble_sim) && isfinite(r->bubble_replay))
      fprintf(f,
              ": unequal stages %+.3f (sim), the actions' spread %+.3f (replay), hand-offs and "
              "work between actions %+.3f",
              r->bubble_sim - r->bubble_theory, r->bubble_replay - r->bubble_sim,
              r->bubble_measured - r->bubble_replay);
    if (isfinite(r->bubble_slowest))
      fprintf(f, "; each step's busiest stage idled %.3f, the others waited for it",
              r->bubble_slowest);
    fprintf(f, "\n");
  }
}

/* Each pipelined run below issue 5's 85% of the ideal speed-up over naive-K: the share as
 * three factors of the median steps (the ones the table's samples/s are from, this run's and
 * naive-K's), which multiply to it: the work (naive-K's stages' wall time in actions over this
 * run's: smaller micro-batches, re-materialization, stages computing at once on cores that then
 * run slower), this run's bubble in its step against GPipe's, and naive-K's against its
 * (K-1)/K. (By the steps' means instead, one slow naive-K step among four had made a run the
 * table put at 84% read 107%.) */
static void write_ideal_notes(FILE *f, const gp_bench *b) {
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    if (r->naive < 0) continue; /* its reference's layout did not fit the processes */
    const gp_bench_run *n = &b->runs[r->naive];
    if (r->over_limit || n->over_limit || r->k < 2 || r->m < 2) continue;
    double share = r->speedup_naive / r->speedup_ideal;
    double wr = r->step_busy_ms, wn = n->step_busy_ms, rec = r->step_recompute_ms;
    double br = 1 - wr / (1e3 * r->k * r->step_s), bn = 1 - wn / (1e3 * n->k * n->step_s);
    if (!isfinite(share) || share >= IDEAL_NOTE_UNDER || !(wr > 0) || !(wn > 0) ||
        !(r->step_s > 0) || !(n->step_s > 0))
      continue;
    double work = wn / wr, bub = (1 - br) / (1 - r->bubble_theory), nbub = (1.0 / r->k) / (1 - bn);
    fprintf(f,
            "of ideal K=%d M=%d %s %s: %.0f%% = work x%.2f (stages busy %.2f ms a step against "
            "naive-%d's %.2f",
            r->k, r->m, r->sched_name, gp_bench_remat_name(r->remat), 100 * share, work, wr, r->k,
            wn);
    /* re-materialization is work naive-K never does: say how much of the factor it is */
    if (rec > 0 && wr > rec)
      fprintf(f, "; %.2f of them recomputing forwards, x%.2f without", rec, wn / (wr - rec));
    fprintf(f,
            ") x bubble x%.2f (%.3f against GPipe's %.3f) x naive-%d's bubble x%.2f (%.3f "
            "against %.3f), in the median steps\n",
            bub, br, r->bubble_theory, r->k, nbub, bn, (r->k - 1.0) / r->k);
  }
}

gp_status gp_bench_write_table(FILE *f, const gp_bench *b) {
  int rows = b->n_runs + 1;
  char(*cell)[NCOL][CELL] = calloc((size_t)rows, sizeof *cell);
  if (!cell) return GP_ERR(GP_ERR_NOMEM, "out of memory for the table");
  int any_r = 0;
  for (int i = 0; i < b->n_runs; i++)
    any_r |= b->runs[i].replicas > 1;
  for (int c = 0; c < NCOL; c++)
    snprintf(cell[0][c], CELL, "%s", c == 2 && !any_r ? "" : col_head[c]);
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    char(*row)[CELL] = cell[i + 1];
    snprintf(row[0], CELL, "%d", r->k);
    snprintf(row[1], CELL, "%d", r->m);
    if (any_r) snprintf(row[2], CELL, "%d", r->replicas);
    snprintf(row[3], CELL, "%s", r->sched_name);
    snprintf(row[4], CELL, "%s", gp_bench_remat_name(r->remat));
    snprintf(row[5], CELL, "%s", r->balance);
    fill_measured(row, b, r);
    snprintf(row[19], CELL, "%s", r->baseline ? "baseline" : "");
  }
  int w[NCOL] = {0};
  for (int i = 0; i < rows; i++)
    for (int c = 0; c < NCOL; c++) {
      int len = (int)strlen(cell[i][c]);
      if (len > w[c]) w[c] = len;
    }
  char gpu[64] = "", limit[64] = "", size[32];
  if (b->gpu_name[0])
    snprintf(gpu, sizeof gpu, ", %s GEMM %.0f GFLOP/s (%s)", b->gpu_name, b->gpu_gemm,
             b->precision);
  if (b->mem_limit)
    snprintf(limit, sizeof limit, ", memory limit %s per stage",
             gp_args_bytes_str((double)b->mem_limit, 2, size, sizeof size));
  char procs[192] = ""; /* under mpirun: the links measured at the start */
  if (b->processes > 1)
    snprintf(procs, sizeof procs,
             " | %d processes: hand-off %.1f us (8 B), %.2f GB/s (4 MiB), all-reduce %.2f GB/s "
             "(bus, 16 MiB over %d)",
             b->processes, 1e6 * b->handoff_latency_s, b->handoff_bytes_per_s / 1e9,
             b->allreduce_bytes_per_s / 1e9, b->processes);
  char given[48];
  if (b->per_stage)
    snprintf(given, sizeof given, "%d per stage", b->per_stage);
  else
    snprintf(given, sizeof given, "%d for the stages", b->threads);
  fprintf(f,
          "machine: %s, %d cores (%s), sgemm %.1f GFLOP/s per core (OpenBLAS %s%s%s)%s%s "
          "| model %s: "
          "%d unit%s, %.3fM parameters, %.3f MFLOP per sample | batch %" PRId64
          ", %d timed step%s (median) after %d warm-up, best of %d, %s data, %s%s%s\n",
          b->cpu_model, b->cores, given, b->sgemm_per_core, gp_blas_kernels(),
          gp_blas_replaced() ? ", in place of its pick " : "",
          gp_blas_replaced() ? gp_blas_replaced() : "", gpu, procs, b->model, b->units,
          b->units == 1 ? "" : "s", (double)b->params / 1e6, b->flops_per_sample / 1e6, b->batch,
          b->steps, b->steps == 1 ? "" : "s", b->warmup, b->reps, b->data, b->precision,
          b->nondeterministic ? ", nondeterministic" : "", limit);
  for (int i = 0; i < rows; i++) {
    char line[NCOL * (CELL + 2)];
    size_t at = 0;
    for (int c = 0; c < NCOL; c++) {
      if (w[c] == 0) continue;
      at += (size_t)snprintf(line + at, sizeof line - at, c ? "  %*s" : "%*s",
                             col_left[c] ? -w[c] : w[c], cell[i][c]);
    }
    while (at > 0 && line[at - 1] == ' ')
      line[--at] = 0;
    fprintf(f, "%s\n", line);
  }
  free(cell);
  for (int i = 0; i < b->n_skipped; i++)
    fprintf(f, "skipped: %s\n", b->skipped[i]);
  int any_base = 0;
  for (int i = 0; i < b->n_runs; i++)
    any_base |= b->runs[i].baseline;
  if (any_base)
    fprintf(f, "baseline: run only as the reference of the speed-ups (K, M=1, gpipe, never; and "
               "K=1)\n");
  const gp_bench_run *most = NULL; /* the run the hypervisor took the most from, if noticeably */
  for (int i = 0; i < b->n_runs; i++)
    if (b->runs[i].steal >= 0.02 && (!most || b->runs[i].steal > most->steal)) most = &b->runs[i];
  if (most)
    fprintf(f,
            "steal: the hypervisor ran other work for up to %.1f%% of the time these CPUs had "
            "work (K=%d M=%d %s %s); --json and --csv give each run's\n",
            100.0 * most->steal, most->k, most->m, most->sched_name,
            gp_bench_remat_name(most->remat));
  write_fit_notes(f, b);
  write_allreduce_notes(f, b);
  write_threads_note(f, b);
  write_bubble_notes(f, b);
  write_ideal_notes(f, b);
  return gp_bench_stream_status(f, "stdout");
}

/* ---- CSV ----------------------------------------------------------------------------------- */

/* A text field as RFC 4180 has it: quoted, with quotes doubled, where it holds a comma, a quote
 * or a line break (a model's name may). */
static void csv_field(FILE *f, const char *s) {
  if (!s[strcspn(s, ",\"\r\n")]) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* A number with fmt, or an empty cell where there is none (a run that did not fit). */
static void csv_num(FILE *f, const char *fmt, double v) {
  fputc(',', f);
  if (isfinite(v)) fprintf(f, fmt, v);
}

/* The per-stage fields busy_ms and peak_bytes, ';'-separated (empty for a run that did not fit). */
static void csv_stages(FILE *f, const gp_bench_run *r) {
  char busy[1024] = "", peak[1536] = "";
  if (!r->over_limit) {
    join_ms(busy, sizeof busy, r->busy_ms, r->k, ';', "%.4f");
    size_t at = 0;
    for (int s = 0; s < r->k && at < sizeof peak; s++)
      at += (size_t)snprintf(peak + at, sizeof peak - at, s ? ";%zu" : "%zu", r->peak_bytes[s]);
  }
  fprintf(f, ",%s,%s", busy, peak);
}

gp_status gp_bench_write_csv(FILE *f, const char *path, const gp_bench *b) {
  fprintf(f, "model,batch_size,stages,micro_batches,schedule,remat,baseline,balance,"
             "cores_used,samples_per_s,speedup_vs_naive,speedup_vs_single,speedup_ideal,"
             "bubble_measured,bubble_slowest,bubble_replayed,bubble_simulated,bubble_theory,"
             "gflops,utilization,busy_ms,"
             "peak_bytes,steal,fits,processes,replicas,allreduce_ms,allreduce_hidden,"
             "allreduce_bytes\n");
  for (int i = 0; i < b->n_runs; i++) {
    const gp_bench_run *r = &b->runs[i];
    char bal[sizeof r->balance];
    memcpy(bal, r->balance, sizeof bal);
    for (char *p = bal; *p; p++)
      if (*p == ',') *p = ';';
    csv_field(f, b->model);
    fprintf(f, ",%" PRId64 ",%d,%d,%s,%s,%d,%s,%d", b->batch, r->k, r->m, r->sched_name,
            gp_bench_remat_name(r->remat), r->baseline, bal, r->cores_used);
    csv_num(f, "%.3f", r->samples_per_s);
    const double vals[] = {r->speedup_naive,   r->speedup_single, r->speedup_ideal,
                           r->bubble_measured, r->bubble_slowest, r->bubble_replay,
                           r->bubble_sim,      r->bubble_theory,  r->gflops,
                           r->utilization};
    for (int j = 0; j < 10; j++)
      csv_num(f, "%.4f", vals[j]);
    csv_stages(f, r);
    csv_num(f, "%.4f", r->steal >= 0 ? r->steal : NAN); /* empty where unknown */
    fprintf(f, ",%d,%d,%d", !r->over_limit, b->processes, r->replicas);
    csv_num(f, "%.4f", r->allreduce_ms);
    csv_num(f, "%.4f", r->allreduce_hidden);
    fprintf(f, ",%" PRId64 "\n", r->allreduce_bytes);
  }
  return gp_bench_stream_status(f, path);
}

/* ---- JSON ---------------------------------------------------------------------------------- */

/* x in the fewest digits that read back as x (gp_decimal_shortest): "%.6g" gave fewer than
 * the table and the CSV (samples/s 150370.3 in the table, 150370 here; 1.23457e+06 for
 * 1234567.8) */
static void jexact(FILE *f, double x) {
  char buf[32];
  fputs(gp_decimal_shortest(x, buf, sizeof buf), f);
}

/* JSON has no NaN or infinity; every number goes through here. */
static void jnum(FILE *f, double x) {
  jexact(f, finite_or_0(x));
}

/* A measured number, null where there is none (a run that did not fit, a speed-up against one). */
static void jopt(FILE *f, double x) {
  if (isfinite(x))
    jexact(f, x);
  else
    fprintf(f, "null");
}

/* The per-stage lists of a run that fit (null for one that did not). */
static void json_stages(FILE *f, const gp_bench_run *r) {
  static const char *const keys[] = {"peak_bytes",          "busy_ms",      "bubble_per_stage",
                                     "sent_bytes_per_step", "wall_busy_ms", "recompute_ms",
                                     "memory_bytes"};
  for (int j = 0; j < 7; j++) {
    fprintf(f, "%s\"%s\": ", j ? ", " : ",\n   ", keys[j]);
    if (r->over_limit) {
      fprintf(f, "null");
      continue;
    }
    fprintf(f, "[");
    for (int s = 0; s < r->k; s++) {
      fprintf(f, s ? ", " : "");
      if (j == 0 || j == 6)
        fprintf(f, "%zu", j ? r->mem_bytes[s] : r->peak_bytes[s]);
      else if (j == 3)
        fprintf(f, "%" PRId64, r->sent_bytes[s]);
      else
        jnum(f, j == 1   ? r->busy_ms[s]
                : j == 2 ? r->bubble_stage[s]
                : j == 4 ? r->wall_busy_ms[s]
                         : r->recompute_ms[s]);
    }
    fprintf(f, "]");
  }
}

static void json_run(FILE *f, const gp_bench *b, const gp_bench_run *r) {
  fprintf(f,
          "  {\"stages\": %d, \"micro_batches\": %d, \"schedule\": \"%s\", "
          "\"remat\": \"%s\", \"batch_size\": %" PRId64 ", \"baseline\": %s, ",
          r->k, r->m, r->sched_name, gp_bench_remat_name(r->remat), b->batch,
          r->baseline ? "true" : "false");
  fprintf(f, "\"balance\": ");
  gp_json_write_str(f, r->balance);
  fprintf(f, ", \"devices\": [");
  for (int s = 0; s < r->k; s++) {
    fprintf(f, s ? ", " : "");
    gp_json_write_str(f, r->devices[s]);
  }
  fprintf(f, "], \"recomputed_micro_batches\": [");
  for (int s = 0; s < r->k; s++)
    fprintf(f, "%s%d", s ? ", " : "", r->recomputed[s]);
  fprintf(f, "], \"selective_micro_batches\": [");
  for (int s = 0; s < r->k; s++)
    fprintf(f, "%s%d", s ? ", " : "", r->selective[s]);
  fprintf(f, "], \"cores_used\": %d,\n   \"fits\": %s, \"memory_error\": ", r->cores_used,
          r->over_limit ? "false" : "true");
  if (r->over_limit)
    gp_json_write_str(f, r->why);
  else
    fprintf(f, "null");
  fprintf(f, ", \"samples_per_s\": ");
  jopt(f, r->samples_per_s);
  static const char *const keys[] = {
      "speedup_vs_naive", "speedup_vs_single", "speedup_ideal", "bubble_measured", "bubble_slowest",
      "bubble_replayed",  "bubble_simulated",  "bubble_theory", "gflops",          "utilization"};
  const double vals[] = {r->speedup_naive,  r->speedup_single, r->speedup_ideal, r->bubble_measured,
                         r->bubble_slowest, r->bubble_replay,  r->bubble_sim,    r->bubble_theory,
                         r->gflops,         r->utilization};
  for (int j = 0; j < 10; j++) {
    fprintf(f, ", \"%s\": ", keys[j]);
    jopt(f, vals[j]);
  }
  json_stages(f, r);
  fprintf(f, ", \"steal\": ");
  jopt(f, r->steal >= 0 ? r->steal : NAN);
  fprintf(f, ",\n   \"processes\": %d, \"replicas\": %d, \"allreduce_ms\": ", b->processes,
          r->replicas);
  jopt(f, r->allreduce_ms);
  fprintf(f, ", \"allreduce_hidden\": ");
  jopt(f, r->allreduce_hidden);
  fprintf(f, ", \"allreduce_bytes\": %" PRId64 "}", r->allreduce_bytes);
}

gp_status gp_bench_write_json(FILE *f, const char *path, const gp_bench *b) {
  fprintf(f, "{\"machine\": {\"cpu_model\": ");
  gp_json_write_str(f, b->cpu_model);
  fprintf(f, ", \"cores\": %d, \"threads\": %d, \"threads_per_stage\": ", b->cores, b->threads);
  if (b->per_stage)
    fprintf(f, "%d", b->per_stage);
  else
    fprintf(f, "null");
  fprintf(f, ", \"oversubscribed\": %s, ", b->threads > b->cores ? "true" : "false");
  fprintf(f, "\"sgemm_gflops_per_core\": ");
  jnum(f, b->sgemm_per_core);
  fprintf(f, ", \"blas_kernels\": ");
  gp_json_write_str(f, gp_blas_kernels());
  if (b->gpu_name[0]) {
    fprintf(f, ", \"gpu\": ");
    gp_json_write_str(f, b->gpu_name);
    fprintf(f, ", \"gpu_gemm_gflops\": ");
    jnum(f, b->gpu_gemm);
  }
  fprintf(f, ", \"processes\": %d", b->processes);
  static const char *const links[] = {"handoff_latency_s", "handoff_bytes_per_s",
                                      "allreduce_bytes_per_s"};
  const double lv[] = {b->handoff_latency_s, b->handoff_bytes_per_s, b->allreduce_bytes_per_s};
  for (int i = 0; i < 3; i++) { /* measured under mpirun only */
    fprintf(f, ", \"%s\": ", links[i]);
    jopt(f, b->processes > 1 ? lv[i] : NAN);
  }
  fprintf(f, "},\n \"model\": ");
  gp_json_write_str(f, b->model);
  fprintf(f, ", \"model_file\": ");
  gp_json_write_str(f, b->model_file);
  fprintf(f, ", \"units\": %d, \"params\": %" PRId64 ", \"flops_per_sample\": ", b->units,
          b->params);
  jnum(f, b->flops_per_sample);
  fprintf(f,
          ",\n \"batch_size\": %" PRId64 ", \"steps\": %d, \"warmup\": %d, \"reps\": %d, "
          "\"data\": ",
          b->batch, b->steps, b->warmup, b->reps);
  gp_json_write_str(f, b->data);
  fprintf(f, ", \"precision\": ");
  gp_json_write_str(f, b->precision);
  fprintf(f, ", \"nondeterministic\": %s", b->nondeterministic ? "true" : "false");
  fprintf(f, ", \"memory_limit\": ");
  if (b->mem_limit)
    fprintf(f, "%zu", b->mem_limit);
  else
    fprintf(f, "null");
  fprintf(f, ",\n \"skipped\": [");
  for (int i = 0; i < b->n_skipped; i++) {
    fprintf(f, i ? ", " : "");
    gp_json_write_str(f, b->skipped[i]);
  }
  fprintf(f, "],\n \"runs\": [");
  for (int i = 0; i < b->n_runs; i++) {
    fprintf(f, "%s\n", i ? "," : "");
    json_run(f, b, &b->runs[i]);
  }
  fprintf(f, "\n ]}\n");
  return gp_bench_stream_status(f, path);
}
