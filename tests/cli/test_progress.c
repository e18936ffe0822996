/* gp_rate, the samples/s gpipe-train shows and logs: since the start while the first window is
 * open (updated every step, not frozen at the first step's), then per closed window. */
#include <math.h>
#include <stdio.h>

#include "cli/progress.h"
#include "tests/check.h"

static int failures, passes;

static int near(double a, double b) {
  return fabs(a - b) <= 1e-9 * fabs(b);
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
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
