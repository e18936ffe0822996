/* gp_rate, the samples/s gpipe-train shows and logs: since the start while the first window is
 * open (updated every step, not frozen at the first step's), then per closed window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/progress.h"
#include "tests/support/check.h"

static int failures, passes;

static int near(double a, double b) {
  return fabs(a - b) <= 1e-9 * fabs(b);
}

/* A log line that cannot be written is an error at that line, naming the log with why (it
 * was found only when the run closed the log, after training to the end). */
static void check_log_full(void) {
  FILE *full = fopen("/dev/full", "w");
  if (!full) return; /* no /dev/full here */
  gp_progress p;
  gp_progress_init(&p, 1, full, "/dev/full");
  gp_status s = gp_progress_step(&p, 1, 10, 0, 2.3, 0.1, 1e-3, 100, 1);
  CHECK(s == GP_ERR_IO && strstr(gp_error_message(),
                                 "/dev/full: writing the log failed: No space left on device"),
        "step: %d", (int)s);
  clearerr(full);
  s = gp_progress_eval(&p, 1, 0, 2.3, 0.1, 64, 0.1);
  CHECK(s == GP_ERR_IO, "eval: %d", (int)s);
  clearerr(full);
  s = gp_progress_eval_seq(&p, 1, 0, "valid", 2.3, 0.1, 9.9, 64, 0, 10, 4, 0.1);
  CHECK(s == GP_ERR_IO, "eval_seq: %d", (int)s);
  s = gp_progress_step(&p, 2, 10, 0, 2.3, 0.1, 1e-3, 100, 0); /* not logged: nothing written */
  CHECK(s == GP_OK, "an unlogged step: %d", (int)s);
  fclose(full);
}

/* A NaN or infinite number is null in the log (JSON has neither; `nan` broke its readers),
 * and a sequence evaluation says how many pairs it left out. */
static void check_log_nonfinite(void) {
  FILE *f = tmpfile();
  if (!f) return;
  gp_progress p;
  gp_progress_init(&p, 1, f, "tmp");
  CHECK(gp_progress_step(&p, 1, 10, 0, NAN, 0.5, INFINITY, 100, 1) == GP_OK, "step");
  CHECK(gp_progress_eval(&p, 1, 0, -INFINITY, NAN, 64, 0.1) == GP_OK, "eval");
  CHECK(gp_progress_eval_seq(&p, 1, 0, "valid", NAN, 0.1, INFINITY, 64, 3, -1, 0, 0.1) == GP_OK,
        "eval_seq");
  char text[2048] = "";
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  CHECK(!strstr(text, "nan") && !strstr(text, "inf"), "non-finite numbers in the log: %s", text);
  CHECK(strstr(text, "\"loss\": null, \"accuracy\": 0.5, \"lr\": null") != NULL, "train: %s", text);
  CHECK(strstr(text, "\"loss\": null, \"accuracy\": null, \"samples\": 64") != NULL, "eval: %s",
        text);
  CHECK(strstr(text, "\"perplexity\": null, \"tokens\": 64, \"left_out\": 3") != NULL,
        "eval_seq: %s", text);
}

/* A large perplexity (an untrained or diverging model's) reads in scientific notation on the
 * console: it printed 3200000000000.00; a small one keeps two decimals. */
static void check_ppl_console(void) {
  char path[] = "/tmp/gp_progress_XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  if (fd < 0 || saved < 0 || dup2(fd, 2) < 0) {
    CHECK(0, "cannot redirect stderr");
    return;
  }
  gp_progress p;
  gp_progress_init(&p, 0, NULL, NULL);
  gp_progress_eval_seq(&p, 1, 0, "valid", 28.8, 0.0, 3.2e12, 64, 0, -1, 0, 0.1);
  gp_progress_eval_seq(&p, 2, 0, "valid", 2.5, 0.3, 12.182, 64, 0, -1, 0, 0.1);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[1024] = "";
  FILE *f = fdopen(fd, "r");
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  unlink(path);
  CHECK(strstr(text, "perplexity 3.2e+12  ") && !strstr(text, "3200000000000"),
        "a large perplexity: %s", text);
  CHECK(strstr(text, "perplexity 12.18  "), "a small perplexity: %s", text);
}

int main(void) {
  gp_rate r;
  gp_rate_init(&r, 100.0);
  /* a slow first step (warm-up), then fast ones, all inside the first window */
  double a = gp_rate_add(&r, 64, 100.2);
  CHECK(near(a, 64 / 0.2), "first step: %g", a);
  double b = gp_rate_add(&r, 64, 100.25);
  CHECK(near(b, 128 / 0.25), "second step, since the start: %g", b);
  double c = gp_rate_add(&r, 64, 100.3);
  CHECK(near(c, 192 / 0.3) && c != b, "third step, since the start: %g", c);
  /* the window closes: its samples over its length */
  double d = gp_rate_add(&r, 64, 100.6);
  CHECK(near(d, 256 / 0.6), "the first window: %g", d);
  /* inside the next window the last full window's rate is kept */
  double e = gp_rate_add(&r, 640, 100.7);
  CHECK(e == d, "held inside the second window: %g, want %g", e, d);
  double f = gp_rate_add(&r, 64, 101.2);
  CHECK(near(f, 704 / 0.6), "the second window: %g", f);
  /* no time passed: no division by zero */
  gp_rate_init(&r, 5.0);
  double g = gp_rate_add(&r, 8, 5.0);
  CHECK(g == 0 && !isnan(g), "zero time: %g", g);
  check_log_full();
  check_ppl_console();
  check_log_nonfinite();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
