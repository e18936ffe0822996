/* Corpus BLEU and the 13a tokenizer against sacreBLEU's own results on the same text
 * (tests/fixtures/bleu, written by scripts/make_bleu_fixtures.py with sacreBLEU 2.x):
 * counts and lengths exactly, the score to rounding, the printed line byte for byte, and
 * the tokenizer line by line. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/eval/bleu.h"
#include "tests/support/check.h"
#include "tests/eval/fixture.h"

/* Tolerances. The score is computed with the same double operations in the same order as
 * sacreBLEU (log and exp from the C library Python also uses), so only a libm difference in
 * the last bit could separate them; sacreBLEU's own guarantee is the printed 2 decimals. */
#define TOL_SCORE 1e-9
#define TOL_PRECISION 1e-12 /* 100 * c / t: one division, exact to rounding */
#define TOL_BP 1e-15        /* exp(1 - r / s) */

static int failures, passes;
static double max_score_diff;

static const char *const sets[] = {"en",        "es",          "synthetic",     "short",
                                   "tiny",      "unigrams",    "smooth",        "perfect",
                                   "disjoint",  "empty_hyps",  "empty_refs",    "long_hyps",
                                   "multi_ref", "ref_len_tie", "multi_ref_var", "whitespace_markup",
                                   NULL};

static int64_t int_at(const gp_json *a, int i) {
  return a && i < a->n && a->items[i].is_int ? a->items[i].i : -999;
}

static double num(const gp_json *j, const char *key) {
  const gp_json *v = gp_json_get(j, key);
  return v && v->type == GP_JSON_NUMBER ? v->number : NAN;
}

static void check_set(const char *dir, const char *name) {
  char file[128];
  snprintf(file, sizeof file, "%s.json", name);
  gp_json *j = fx_load(dir, file);
  if (!j) {
    failures++;
    return;
  }
  const gp_json *h = fx_array(j, "hyps", name), *r = fx_array(j, "refs", name);
  if (!h || !r || r->n < 1) {
    failures++;
    gp_json_free(j);
    return;
  }
  int n = (int)h->n, nr = (int)r->n;
  const char **hyps = calloc((size_t)n + 1, sizeof *hyps);
  const char **lines = calloc((size_t)(n + 1) * (size_t)nr, sizeof *lines);
  const char **streams[8] = {0};
  CHECK(nr <= 8 && hyps && lines, "%s: %d reference streams", name, nr);
  if (nr > 8 || !hyps || !lines) goto out;
  for (int i = 0; i < n; i++)
    hyps[i] = h->items[i].str;
  for (int k = 0; k < nr; k++) {
    streams[k] = lines + (size_t)k * (size_t)(n + 1);
    CHECK(r->items[k].n == n, "%s: stream %d has %lld lines", name, k, (long long)r->items[k].n);
    for (int i = 0; i < n && i < r->items[k].n; i++)
      streams[k][i] = r->items[k].items[i].type == GP_JSON_STRING ? r->items[k].items[i].str : NULL;
  }

  gp_bleu b;
  gp_status s = gp_bleu_corpus_multi(hyps, (const char *const *const *)streams, nr, n, &b);
  CHECK(s == GP_OK, "%s: corpus BLEU failed", name);
  if (s != GP_OK) goto out;
  const gp_json *counts = gp_json_get(j, "counts"), *totals = gp_json_get(j, "totals");
  const gp_json *prec = gp_json_get(j, "precisions");
  for (int k = 0; k < GP_BLEU_ORDER; k++) {
    CHECK(b.correct[k] == int_at(counts, k), "%s: %d-gram matches %lld, sacreBLEU %lld", name,
          k + 1, (long long)b.correct[k], (long long)int_at(counts, k));
    CHECK(b.total[k] == int_at(totals, k), "%s: %d-grams %lld, sacreBLEU %lld", name, k + 1,
          (long long)b.total[k], (long long)int_at(totals, k));
    double want = prec && k < prec->n ? prec->items[k].number : NAN;
    CHECK(fabs(b.precision[k] - want) <= TOL_PRECISION, "%s: p%d %.17g, sacreBLEU %.17g", name,
          k + 1, b.precision[k], want);
  }
  CHECK(b.sys_len == (int64_t)num(j, "sys_len"), "%s: sys_len %lld", name, (long long)b.sys_len);
  CHECK(b.ref_len == (int64_t)num(j, "ref_len"), "%s: ref_len %lld", name, (long long)b.ref_len);
  CHECK(fabs(b.bp - num(j, "bp")) <= TOL_BP, "%s: BP %.17g, sacreBLEU %.17g", name, b.bp,
        num(j, "bp"));
  double d = fabs(b.score - num(j, "score"));
  if (!(d <= max_score_diff)) max_score_diff = d; /* NaN sticks */
  CHECK(d <= TOL_SCORE, "%s: BLEU %.17g, sacreBLEU %.17g", name, b.score, num(j, "score"));
  char line[256];
  gp_bleu_format(&b, line, sizeof line);
  const gp_json *fmt = gp_json_get(j, "format");
  CHECK(fmt && fmt->str && !strcmp(line, fmt->str), "%s: '%s', sacreBLEU '%s'", name, line,
        fmt && fmt->str ? fmt->str : "?");

  /* the same statistics sentence by sentence, in two shards merged */
  gp_bleu_stats half[2] = {{0}};
  const char *one[8];
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < nr; k++)
      one[k] = streams[k][i];
    CHECK(gp_bleu_add_sentence(&half[i >= n / 2], hyps[i], one, nr) == GP_OK, "%s: line %d", name,
          i);
  }
  gp_bleu_stats_merge(&half[0], &half[1]);
  gp_bleu m;
  gp_bleu_compute(&half[0], &m);
  CHECK(!memcmp(&m, &b, sizeof m), "%s: merged shards differ from the corpus call", name);
  if (nr == 1) {
    gp_bleu c;
    CHECK(gp_bleu_corpus(hyps, streams[0], n, &c) == GP_OK && !memcmp(&c, &b, sizeof c),
          "%s: gp_bleu_corpus differs from gp_bleu_corpus_multi", name);
  }
out:
  free(hyps);
  free(lines);
  gp_json_free(j);
}

static void check_tokenizer(const char *dir) {
  gp_json *j = fx_load(dir, "tok13a.json");
  const gp_json *pairs = j ? fx_array(j, "pairs", "tok13a.json") : NULL;
  if (!pairs) {
    failures++;
    gp_json_free(j);
    return;
  }
  int bad = 0;
  for (int64_t i = 0; i < pairs->n; i++) {
    const gp_json *p = &pairs->items[i];
    char *got = NULL;
    if (p->n != 2 || gp_bleu_tokenize_13a(p->items[0].str, &got) != GP_OK) {
      bad++;
      continue;
    }
    if (strcmp(got, p->items[1].str) && ++bad <= 5)
      printf("  13a line %lld: '%s'\n    got  '%s'\n    want '%s'\n", (long long)i, p->items[0].str,
             got, p->items[1].str);
    free(got);
  }
  CHECK(bad == 0 && pairs->n > 500, "13a tokenizer: %d of %lld lines differ from sacreBLEU", bad,
        (long long)pairs->n);
  gp_json_free(j);
}

static void check_api(void) {
  gp_bleu b;
  const char *h[] = {"a b", NULL}, *r[] = {"a b", "c"};
  CHECK(gp_bleu_corpus(h, r, 2, &b) == GP_ERR_USAGE, "a NULL hypothesis is refused");
  CHECK(strstr(gp_error_message(), "hypothesis 1") != NULL, "names it: %s", gp_error_message());
  const char *h2[] = {"a b", "c"}, *r2[] = {"a b", NULL};
  CHECK(gp_bleu_corpus(h2, r2, 2, &b) == GP_ERR_USAGE, "a sentence without reference");
  CHECK(strstr(gp_error_message(), "sentence 1") != NULL, "names it: %s", gp_error_message());
  CHECK(gp_bleu_corpus(h2, r2, -1, &b) == GP_ERR_USAGE, "n < 0");
  CHECK(gp_bleu_corpus(NULL, NULL, 0, &b) == GP_OK && b.score == 0 && b.bp == 1 && b.sys_len == 0,
        "an empty corpus scores 0");
  gp_bleu_stats st = {0};
  const char *none[] = {NULL, NULL};
  CHECK(gp_bleu_add_sentence(&st, "x", none, 2) == GP_ERR_USAGE && st.sys_len == 0,
        "all references missing: refused, stats unchanged");
  /* Invalid UTF-8 passes through byte for byte; Python (surrogateescape) tokenizes
   * "\udcff.\udcfe" to "\udcff . \udcfe", the same bytes. */
  char *t = NULL;
  CHECK(gp_bleu_tokenize_13a("\xff.\xfe", &t) == GP_OK && t && !strcmp(t, "\xff . \xfe"),
        "invalid UTF-8: '%s'", t ? t : "");
  free(t);
  /* a long line: 20000 tokens glued with punctuation, well past any fixed buffer (a perfect
   * match scores exp(log(100)), not exactly 100, in sacreBLEU too) */
  size_t n = 20000 * 4;
  char *big = malloc(n + 1);
  for (size_t i = 0; i < n; i += 4)
    memcpy(big + i, "ab.,", 4);
  big[n] = 0;
  const char *bh[] = {big}, *br[] = {big};
  CHECK(gp_bleu_corpus(bh, br, 1, &b) == GP_OK && fabs(b.score - 100) < 1e-9 && b.sys_len == 60000,
        "long line: BLEU %.3f, %lld tokens", b.score, (long long)b.sys_len);
  free(big);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/fixtures/bleu";
  for (int i = 0; sets[i]; i++)
    check_set(dir, sets[i]);
  check_tokenizer(dir);
  check_api();
  printf("max |BLEU - sacreBLEU| over %d sets: %.3g\n", (int)(sizeof sets / sizeof *sets) - 1,
         max_score_diff);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
