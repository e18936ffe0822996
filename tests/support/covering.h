/* Covering designs for test grids: a few rows of factor levels in which every pair of levels
 * of two factors that some allowed row holds appears at least once (all-pairs), instead of the
 * whole product. Rows are chosen greedily from the allowed rows of the product (each covering
 * the most pairs not yet covered, the cheapest first on ties), so the design is deterministic
 * and never holds a row the constraints refuse. */
#ifndef GP_TESTS_SUPPORT_COVERING_H
#define GP_TESTS_SUPPORT_COVERING_H

#define GP_COVER_MAX_FACTORS 8

typedef struct gp_cover_spec {
  int factors;
  int levels[GP_COVER_MAX_FACTORS];
  /* 1 if the row (a level per factor) can run; NULL: every row */
  int (*allowed)(const int *row, void *ctx);
  /* what a row costs to run (ties go to the cheaper); NULL: every row the same */
  double (*cost)(const int *row, void *ctx);
  void *ctx;
} gp_cover_spec;

/* The design: *rows holds *n rows of spec->factors levels each (malloc'd; free it). *pairs:
 * the pairs that allowed rows hold (each then covered); *missing: pairs no allowed row holds
 * (neither may be NULL). Returns 0, or -1 for fewer than 2 or more than
 * GP_COVER_MAX_FACTORS factors, out of memory, or a product over 1e6 rows. */
int gp_cover_pairs(const gp_cover_spec *spec, int **rows, int *n, int *pairs, int *missing);

#endif
