/* Beam search's final choice: fairseq's length penalty, score = sum log p / len^lenpen (len
 * counts EOS), on hand-made hypotheses whose ranking each lenpen decides differently. */
#include <math.h>

#include "core/eval/decode.h"
#include "tests/support/check.h"

static int failures, passes;

int main(void) {
  /* a: 2 tokens + EOS, sum -3 (-1 a token); b: 5 + EOS, sum -4.8 (-0.8 a token) */
  const double score[2] = {-3.0, -4.8};
  const int64_t len[2] = {3, 6};
  /* lenpen 0: the sums alone, -3 > -4.8: a */
  CHECK(gp_decode_best(score, len, 2, 0.0) == 0, "lenpen 0 takes the higher sum");
  /* lenpen 1: per token, -1 < -0.8: b */
  CHECK(gp_decode_best(score, len, 2, 1.0) == 1, "lenpen 1 takes the better mean");
  /* lenpen 0.5: -3/sqrt(3) = -1.732, -4.8/sqrt(6) = -1.960: a */
  CHECK(gp_decode_best(score, len, 2, 0.5) == 0, "lenpen 0.5: -1.732 beats -1.960");
  /* lenpen 0.8: -3/3^0.8 = -1.240, -4.8/6^0.8 = -1.148: b (the switch lies between) */
  CHECK(gp_decode_best(score, len, 2, 0.8) == 1, "lenpen 0.8: -1.148 beats -1.240");
  /* ties go to the first (candidates come best first); one candidate is itself */
  const double tie[3] = {-2.0, -2.0, -5.0};
  const int64_t tl[3] = {2, 2, 2};
  CHECK(gp_decode_best(tie, tl, 3, 1.0) == 0, "a tie goes to the first");
  CHECK(gp_decode_best(score + 1, len + 1, 1, 1.0) == 0, "one candidate");
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
