/* All-pairs covering designs by greedy set cover over the allowed rows of the product. */
#include "tests/support/covering.h"

#include <stdlib.h>
#include <string.h>

/* Index of the pair (factor a at level x, factor b at level y), a < b, in a flat table. */
typedef struct pair_index {
  int factors, off[GP_COVER_MAX_FACTORS][GP_COVER_MAX_FACTORS], total;
} pair_index;

static void index_make(const gp_cover_spec *s, pair_index *ix) {
  ix->factors = s->factors;
  ix->total = 0;
  for (int a = 0; a < s->factors; a++)
    for (int b = a + 1; b < s->factors; b++) {
      ix->off[a][b] = ix->total;
      ix->total += s->levels[a] * s->levels[b];
    }
}

static int pair_at(const gp_cover_spec *s, const pair_index *ix, const int *row, int a, int b) {
  return ix->off[a][b] + row[a] * s->levels[b] + row[b];
}

/* The pairs row holds that are not yet in `done`. */
static int gain(const gp_cover_spec *s, const pair_index *ix, const int *row,
                const unsigned char *done) {
  int g = 0;
  for (int a = 0; a < s->factors; a++)
    for (int b = a + 1; b < s->factors; b++)
      g += !done[pair_at(s, ix, row, a, b)];
  return g;
}

static void mark(const gp_cover_spec *s, const pair_index *ix, const int *row,
                 unsigned char *done) {
  for (int a = 0; a < s->factors; a++)
    for (int b = a + 1; b < s->factors; b++)
      done[pair_at(s, ix, row, a, b)] = 1;
}

int gp_cover_pairs(const gp_cover_spec *s, int **rows, int *n, int *pairs, int *missing) {
  const int F = s->factors;
  *rows = NULL;
  *n = *pairs = *missing = 0;
  if (F < 2 || F > GP_COVER_MAX_FACTORS) return -1;
  long long total = 1;
  for (int f = 0; f < F; f++) {
    if (s->levels[f] < 1) return -1;
    total *= s->levels[f];
    if (total > 1000000) return -1;
  }
  pair_index ix;
  index_make(s, &ix);
  /* the allowed rows, each with its cost */
  int *cand = malloc(sizeof *cand * (size_t)(total * F));
  double *cost = malloc(sizeof *cost * (size_t)total);
  unsigned char *held = calloc((size_t)ix.total + 1, 1), *done = calloc((size_t)ix.total + 1, 1);
  unsigned char *used = calloc((size_t)total, 1);
  int *out = malloc(sizeof *out * (size_t)(total * F));
  if (!cand || !cost || !held || !done || !used || !out) goto fail;
  int nc = 0, row[GP_COVER_MAX_FACTORS];
  for (long long i = 0; i < total; i++) {
    long long r = i;
    for (int f = F - 1; f >= 0; f--) {
      row[f] = (int)(r % s->levels[f]);
      r /= s->levels[f];
    }
    if (s->allowed && !s->allowed(row, s->ctx)) continue;
    memcpy(cand + (size_t)nc * F, row, sizeof row[0] * (size_t)F);
    cost[nc] = s->cost ? s->cost(row, s->ctx) : 0;
    mark(s, &ix, row, held);
    nc++;
  }
  for (int p = 0; p < ix.total; p++) {
    *pairs += held[p];
    done[p] = !held[p]; /* a pair no row holds needs no covering */
  }
  *missing = ix.total - *pairs;
  int left = *pairs;
  while (left > 0) {
    int best = -1, best_g = 0;
    for (int c = 0; c < nc; c++) {
      if (used[c]) continue;
      int g = gain(s, &ix, cand + (size_t)c * F, done);
      if (g > best_g || (g == best_g && g > 0 && cost[c] < cost[best])) {
        best = c;
        best_g = g;
      }
    }
    if (best < 0) break;
    used[best] = 1;
    mark(s, &ix, cand + (size_t)best * F, done);
    memcpy(out + (size_t)*n * F, cand + (size_t)best * F, sizeof *out * (size_t)F);
    ++*n;
    left -= best_g;
  }
  free(cand);
  free(cost);
  free(held);
  free(done);
  free(used);
  *rows = out;
  return 0;
fail:
  free(cand);
  free(cost);
  free(held);
  free(done);
  free(used);
  free(out);
  return -1;
}
