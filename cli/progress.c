/* Live progress line, plain log lines and JSONL events. */
#include "cli/progress.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double gp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void gp_rate_init(gp_rate *r, double now) {
  *r = (gp_rate){.win_t = now};
}

double gp_rate_add(gp_rate *r, int64_t samples, double now) {
  r->win_n += samples;
  double span = now - r->win_t;
  int closes = span > GP_RATE_WINDOW_S;
  if ((closes || !r->full) && span > 0) r->rate = (double)r->win_n / span;
  if (closes) {
    r->full = 1;
    r->win_t = now;
    r->win_n = 0;
  }
  return r->rate;
}

void gp_progress_init(gp_progress *p, int quiet, FILE *log, const char *log_path) {
  p->tty = isatty(2);
  p->quiet = quiet;
  p->log = log;
  p->log_path = log_path;
  p->t0 = gp_now();
  p->t_before = 0;
  p->last_draw = 0;
  p->line_open = 0;
}

/* Flushes the log's line: a write that failed is reported at once, with why. */
static gp_status log_flush(const gp_progress *p) {
  errno = 0; /* a reason only from this flush, not a stale one */
  if (fflush(p->log) == 0 && !ferror(p->log)) return GP_OK;
  return GP_ERR(GP_ERR_IO, "%s: writing the log failed: %s", p->log_path,
                strerror(errno ? errno : EIO));
}

/* A number for the log: JSON has no NaN or infinity, so those are null. */
static const char *jnum(char buf[32], double v) {
  if (!isfinite(v)) return "null";
  snprintf(buf, 32, "%.6g", v);
  return buf;
}

double gp_progress_elapsed(const gp_progress *p) {
  return p->t_before + (gp_now() - p->t0);
}

gp_status gp_progress_resumed(gp_progress *p, int64_t step, double t_before) {
  p->t_before = t_before;
  if (!p->log) return GP_OK;
  fprintf(p->log, "{\"event\": \"resumed\", \"step\": %lld, \"time_s\": %.3f}\n", (long long)step,
          gp_progress_elapsed(p));
  return log_flush(p);
}

const char *gp_progress_ppl(char buf[32], double ppl) {
  snprintf(buf, 32, isfinite(ppl) && fabs(ppl) >= 1e6 ? "%.2g" : "%.2f", ppl);
  return buf;
}

static void clear_line(gp_progress *p) {
  if (p->line_open) {
    fprintf(stderr, "\r\033[K");
    p->line_open = 0;
  }
}

static void fmt_eta(double s, char *buf, size_t n) {
  if (s < 0 || s > 1e7) s = 0;
  int h = (int)(s / 3600), m = (int)(s / 60) % 60, sec = (int)s % 60;
  if (h)
    snprintf(buf, n, "%dh%02dm", h, m);
  else
    snprintf(buf, n, "%dm%02ds", m, sec);
}

gp_status gp_progress_step(gp_progress *p, int64_t step, int64_t total, int64_t epoch, double loss,
                           double acc, double lr, double samples_per_s, int print_line) {
  double now = gp_now(), el = now - p->t0;
  char eta[32];
  double per_step = step > 0 ? el / (double)step : 0;
  fmt_eta(per_step * (double)(total - step), eta, sizeof eta);
  if (p->log && print_line) {
    char l[32], a[32], r[32];
    fprintf(p->log,
            "{\"event\": \"train\", \"step\": %lld, \"epoch\": %lld, \"loss\": %s, "
            "\"accuracy\": %s, \"lr\": %s, \"samples_per_s\": %.1f, \"time_s\": %.3f}\n",
            (long long)step, (long long)epoch + 1, jnum(l, loss), jnum(a, acc), jnum(r, lr),
            samples_per_s, p->t_before + el);
    GP_TRY(log_flush(p));
  }
  if (p->quiet) return GP_OK;
  if (p->tty) {
    if (now - p->last_draw < 0.1 && step != total) return GP_OK;
    p->last_draw = now;
    fprintf(stderr, "\r\033[Kstep %lld/%lld  epoch %lld  loss %.4f", (long long)step,
            (long long)total, (long long)epoch + 1, loss);
    if (!isnan(acc)) fprintf(stderr, "  acc %.3f", acc); /* NAN: f32 targets have none */
    fprintf(stderr, "  lr %.4g  %.0f samples/s  ETA %s", lr, samples_per_s, eta);
    p->line_open = 1;
  } else if (print_line) {
    fprintf(stderr, "step %lld/%lld epoch %lld loss %.4f", (long long)step, (long long)total,
            (long long)epoch + 1, loss);
    if (!isnan(acc)) fprintf(stderr, " acc %.3f", acc);
    fprintf(stderr, " lr %.4g %.0f samples/s ETA %s\n", lr, samples_per_s, eta);
  }
  return GP_OK;
}

gp_status gp_progress_eval(gp_progress *p, int64_t step, int64_t epoch, double loss, double acc,
                           int64_t samples, double seconds) {
  if (p->log) {
    char l[32], a[32];
    fprintf(p->log,
            "{\"event\": \"eval\", \"step\": %lld, \"epoch\": %lld, \"loss\": %s, "
            "\"accuracy\": %s, \"samples\": %lld, \"time_s\": %.3f}\n",
            (long long)step, (long long)epoch + 1, jnum(l, loss), jnum(a, acc), (long long)samples,
            gp_progress_elapsed(p));
    GP_TRY(log_flush(p));
  }
  if (p->quiet) return GP_OK;
  clear_line(p);
  fprintf(
      stderr,
      "eval  step %lld  epoch %lld  test loss %.4f  test accuracy %.4f  (%lld samples, %.1f s)\n",
      (long long)step, (long long)epoch + 1, loss, acc, (long long)samples, seconds);
  return GP_OK;
}

gp_status gp_progress_eval_psnr(gp_progress *p, int64_t step, int64_t epoch, double loss,
                                double psnr, double input_psnr, int64_t samples, double seconds) {
  if (p->log) {
    char l[32], a[32], b[32];
    fprintf(p->log,
            "{\"event\": \"eval\", \"step\": %lld, \"epoch\": %lld, \"loss\": %s, "
            "\"psnr\": %s, \"input_psnr\": %s, \"samples\": %lld, \"time_s\": %.3f}\n",
            (long long)step, (long long)epoch + 1, jnum(l, loss), jnum(a, psnr),
            jnum(b, input_psnr), (long long)samples, gp_progress_elapsed(p));
    GP_TRY(log_flush(p));
  }
  if (p->quiet) return GP_OK;
  clear_line(p);
  fprintf(stderr,
          "eval  step %lld  epoch %lld  test loss %.4f  test PSNR %.2f dB (noisy input %.2f dB, "
          "%+.2f dB)  (%lld samples, %.1f s)\n",
          (long long)step, (long long)epoch + 1, loss, psnr, input_psnr, psnr - input_psnr,
          (long long)samples, seconds);
  return GP_OK;
}

gp_status gp_progress_eval_seq(gp_progress *p, int64_t step, int64_t epoch, const char *split,
                               double loss, double acc, double ppl, int64_t tokens,
                               int64_t left_out, double bleu, int64_t sentences, double seconds) {
  if (p->log) {
    char l[32], a[32], x[32];
    fprintf(p->log,
            "{\"event\": \"eval\", \"split\": \"%s\", \"step\": %lld, \"epoch\": %lld, "
            "\"loss\": %s, \"accuracy\": %s, \"perplexity\": %s, \"tokens\": %lld, "
            "\"left_out\": %lld",
            split, (long long)step, (long long)epoch + 1, jnum(l, loss), jnum(a, acc), jnum(x, ppl),
            (long long)tokens, (long long)left_out);
    if (bleu >= 0)
      fprintf(p->log, ", \"bleu\": %.4f, \"sentences\": %lld", bleu, (long long)sentences);
    fprintf(p->log, ", \"time_s\": %.3f}\n", gp_progress_elapsed(p));
    GP_TRY(log_flush(p));
  }
  if (p->quiet) return GP_OK;
  clear_line(p);
  char pp[32];
  fprintf(stderr, "eval  step %lld  epoch %lld  %s loss %.4f  perplexity %s  token accuracy %.4f",
          (long long)step, (long long)epoch + 1, split, loss, gp_progress_ppl(pp, ppl), acc);
  if (bleu >= 0) fprintf(stderr, "  BLEU %.2f", bleu);
  fprintf(stderr, "  (%lld token%s", (long long)tokens, tokens == 1 ? "" : "s");
  if (left_out)
    fprintf(stderr, "; %lld pair%s longer than a row left out", (long long)left_out,
            left_out == 1 ? "" : "s");
  fprintf(stderr, ", %.1f s)\n", seconds);
  return GP_OK;
}

gp_status gp_progress_interrupted(gp_progress *p, int64_t step, const char *sig_name) {
  if (!p->log) return GP_OK;
  fprintf(p->log,
          "{\"event\": \"interrupted\", \"step\": %lld, \"signal\": \"%s\", \"time_s\": %.3f}\n",
          (long long)step, sig_name, gp_progress_elapsed(p));
  return log_flush(p);
}

/* The "step" of a log line, or -1 when it has none. */
static int64_t line_step(const char *line) {
  const char *k = strstr(line, "\"step\": ");
  return k ? strtoll(k + 8, NULL, 10) : -1;
}

gp_status gp_progress_log_resume(const char *path, int64_t step, int redo_eval, FILE **log,
                                 int64_t *dropped) {
  *dropped = 0;
  FILE *f = fopen(path, "r");
  long keep = 0; /* bytes to keep */
  if (f) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
      int64_t at = line[n - 1] == '\n' ? line_step(line) : INT64_MAX;
      static const char ev[] = "{\"event\": \"eval\",", re[] = "{\"event\": \"resumed\",";
      int eval = strncmp(line, ev, sizeof ev - 1) == 0;
      /* a run resumed at this step before: what it logged is cut, its mark goes with it */
      int resumed = strncmp(line, re, sizeof re - 1) == 0;
      if (*dropped || at > step || (redo_eval && eval && at == step) || (resumed && at == step))
        ++*dropped;
      else
        keep += (long)n;
    }
    free(line);
    int err = ferror(f);
    int cut = *dropped > 0;
    fclose(f);
    if (err) return GP_ERR(GP_ERR_IO, "%s: cannot read the log: %s", path, strerror(errno));
    if (cut && truncate(path, keep) != 0)
      return GP_ERR(GP_ERR_IO, "%s: cannot cut the log back to step %lld: %s", path,
                    (long long)step, strerror(errno));
  }
  if (!(*log = fopen(path, "a")))
    return GP_ERR(GP_ERR_IO, "%s: cannot open the log for writing: %s", path, strerror(errno));
  return GP_OK;
}

void gp_progress_note(gp_progress *p, const char *fmt, ...) {
  if (p->quiet) return;
  clear_line(p);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void gp_progress_done(gp_progress *p) {
  clear_line(p);
}
