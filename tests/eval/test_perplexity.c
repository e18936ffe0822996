/* Perplexity: exp of the mean negative log-likelihood, and its guards. */
#include <math.h>

#include "core/eval/perplexity.h"
#include "tests/support/check.h"

static int failures, passes;

int main(void) {
  /* a uniform model over V tokens has perplexity V whatever the text: NLL = T log V */
  for (int v = 2; v <= 32000; v *= 7)
    CHECK(fabs(gp_perplexity(1234 * log(v), 1234) - v) <= 1e-9 * v, "uniform over %d", v);
  /* p = 1/2 on half the tokens and 1/8 on the rest: exp((ln 2 + ln 8) / 2) = 4 */
  CHECK(fabs(gp_perplexity(500 * log(2) + 500 * log(8), 1000) - 4) < 1e-12, "mixed");
  CHECK(gp_perplexity(0, 10) == 1, "perfect model");
  CHECK(isnan(gp_perplexity(1, 0)) && isnan(gp_perplexity(1, -3)), "no tokens: NaN");
  CHECK(isnan(gp_perplexity(NAN, 5)), "NaN loss: NaN");
  CHECK(isinf(gp_perplexity(1e6, 10)), "overflow: +inf");
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
