/* What gpipe-train shows while it runs: a live line on a terminal, plain lines otherwise,
 * and one JSON object per event in --log. */
#ifndef GP_CLI_PROGRESS_H
#define GP_CLI_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

typedef struct gp_progress {
  int tty; /* stderr is a terminal: redraw one line */
  int quiet;
  FILE *log;            /* --log FILE.jsonl, or NULL */
  const char *log_path; /* its name, for errors */
  double t0;            /* run start, seconds */
  double t_before;      /* seconds the run took before a --resume (the checkpoint's): the log's
                         * time_s goes on from them */
  double last_draw;
  int line_open; /* a live line is on screen */
} gp_progress;

double gp_now(void); /* monotonic seconds */

/* Training throughput as shown: until the first window of GP_RATE_WINDOW_S seconds has passed,
 * samples since the start over the time since the start (updated every step); after that,
 * the samples of the last full window over its length, updated when a window closes. */
#define GP_RATE_WINDOW_S 0.5
typedef struct gp_rate {
  double win_t;  /* start of the current window, seconds */
  int64_t win_n; /* samples in it */
  int full;      /* a window has closed */
  double rate;
} gp_rate;

void gp_rate_init(gp_rate *r, double now);
/* Adds the samples of a step that ended at `now`; returns the rate to show. */
double gp_rate_add(gp_rate *r, int64_t samples, double now);

void gp_progress_init(gp_progress *p, int quiet, FILE *log, const char *log_path);
/* A training step's numbers; printed every `every` steps (and always to the live line).
 * These three return GP_ERR_IO, naming the log with strerror, when writing its line failed
 * (a full disk), so the run stops there rather than training on with a cut log. */
gp_status gp_progress_step(gp_progress *p, int64_t step, int64_t total, int64_t epoch, double loss,
                           double acc, double lr, double samples_per_s, int print_line);
gp_status gp_progress_eval(gp_progress *p, int64_t step, int64_t epoch, double loss, double acc,
                           int64_t samples, double seconds);
/* A denoiser's evaluation: loss, and the PSNR (dB) of its output and of the noisy input
 * against the clean images (NAN: not known, printed nan, logged null). */
gp_status gp_progress_eval_psnr(gp_progress *p, int64_t step, int64_t epoch, double loss,
                                double psnr, double input_psnr, int64_t samples, double seconds);
/* A sequence model's evaluation on a split: loss, next-token accuracy, perplexity over
 * tokens (of the pairs that fit a row: left_out did not), and BLEU over sentences (bleu < 0:
 * none decoded). */
gp_status gp_progress_eval_seq(gp_progress *p, int64_t step, int64_t epoch, const char *split,
                               double loss, double acc, double ppl, int64_t tokens,
                               int64_t left_out, double bleu, int64_t sentences, double seconds);
/* The run's time so far (the log's time_s): t_before and this process's. */
double gp_progress_elapsed(const gp_progress *p);
/* A run resumed from a checkpoint at `step` that had run `t_before` seconds: the log's time_s
 * goes on from there, and a "resumed" event marks where this process's lines begin. */
gp_status gp_progress_resumed(gp_progress *p, int64_t step, double t_before);
/* A perplexity for the console: two decimals, in scientific notation once large (an
 * untrained model's 3.2e+12, not a 13-digit number). */
const char *gp_progress_ppl(char buf[32], double ppl);
/* A run stopped by a signal (sig_name "SIGINT") after `step`: an "interrupted" event. */
gp_status gp_progress_interrupted(gp_progress *p, int64_t step, const char *sig_name);
/* Opens the --log of a run resumed at `step` for appending, first cutting off what the
 * earlier run logged after that step (it was killed past its last checkpoint, and those
 * steps are trained again): each line from the first whose "step" is greater, or that is
 * not a whole line, on; with redo_eval (the resumed run evaluates at `step` again) also
 * from the first "eval" event of that step; and from a "resumed" event of that step (a run
 * resumed there before, whose lines go). *dropped: the lines cut. */
gp_status gp_progress_log_resume(const char *path, int64_t step, int redo_eval, FILE **log,
                                 int64_t *dropped);
/* A plain message line (clears a live line first). */
void gp_progress_note(gp_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gp_progress_done(gp_progress *p);

#endif
