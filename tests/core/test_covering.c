/* The covering designs the equivalence suite is drawn from (tests/support/covering.h): every
 * pair of levels an allowed row holds is in the design, no refused row is, and the design is
 * far smaller than the product. Checked against the product by brute force. */
#include <stdlib.h>
#include <string.h>

#include "tests/support/check.h"
#include "tests/support/covering.h"

static int failures, passes;

/* refuses factor 0 at level 0 with factor 1 at level 0, and factor 2 = 3 with factor 3 = 1 */
static int refuse(const int *row, void *ctx) {
  (void)ctx;
  return !(row[0] == 0 && row[1] == 0) && !(row[2] == 3 && row[3] == 1);
}

static double cost(const int *row, void *ctx) {
  (void)ctx;
  return row[0] + row[1] + row[2] + row[3];
}

/* Every pair some allowed row of the product holds is in the design; returns the pairs seen. */
static void check_design(const gp_cover_spec *s, const int *rows, int n, const char *what) {
  const int F = s->factors;
  for (int r = 0; r < n; r++)
    CHECK(!s->allowed || s->allowed(rows + r * F, s->ctx), "%s: row %d is refused", what, r);
  int all = 1;
  for (int f = 0; f < F; f++)
    all *= s->levels[f];
  int uncovered = 0;
  for (int i = 0; i < all; i++) {
    int row[GP_COVER_MAX_FACTORS], v = i;
    for (int f = F - 1; f >= 0; f--) {
      row[f] = v % s->levels[f];
      v /= s->levels[f];
    }
    if (s->allowed && !s->allowed(row, s->ctx)) continue;
    for (int a = 0; a < F; a++)
      for (int b = a + 1; b < F; b++) {
        int found = 0;
        for (int r = 0; r < n && !found; r++)
          found = rows[r * F + a] == row[a] && rows[r * F + b] == row[b];
        uncovered += !found;
      }
  }
  CHECK(uncovered == 0, "%s: %d pairs of allowed rows are not in the design", what, uncovered);
}

int main(void) {
  /* 4 factors of 3, 4, 4, 2 levels: 96 rows in the product, 3*4 + 3*4 + 3*2 + 4*4 + 4*2 + 4*2
   * = 62 pairs */
  gp_cover_spec s = {.factors = 4, .levels = {3, 4, 4, 2}};
  int *rows, n, pairs, missing;
  CHECK(gp_cover_pairs(&s, &rows, &n, &pairs, &missing) == 0, "plain");
  CHECK(pairs == 62 && missing == 0, "pairs %d missing %d", pairs, missing);
  /* the best design has 16 rows (the two 4-level factors); greedy stays close */
  CHECK(n >= 16 && n <= 20, "%d rows", n);
  check_design(&s, rows, n, "plain");
  free(rows);

  s.allowed = refuse;
  s.cost = cost;
  CHECK(gp_cover_pairs(&s, &rows, &n, &pairs, &missing) == 0, "constrained");
  /* the two refused pairs are held by no allowed row; every other pair is */
  CHECK(missing == 2 && pairs == 60, "pairs %d missing %d", pairs, missing);
  check_design(&s, rows, n, "constrained");
  CHECK(n <= 22, "%d rows", n);
  free(rows);

  gp_cover_spec one = {.factors = 1, .levels = {3}};
  CHECK(gp_cover_pairs(&one, &rows, &n, &pairs, &missing) == -1, "one factor");
  gp_cover_spec big = {.factors = 8, .levels = {10, 10, 10, 10, 10, 10, 10, 10}};
  CHECK(gp_cover_pairs(&big, &rows, &n, &pairs, &missing) == -1, "a product over 1e6");
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
