/* Corpus BLEU exactly as sacreBLEU 2.x computes it by default (signature
 * nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x): the mteval-v13a tokenizer,
 * clipped n-gram counts up to 4-grams summed over the corpus, the brevity penalty and the
 * 'exp' (NIST) smoothing of zero counts. See docs/metrics.md. */
#ifndef GP_BLEU_H
#define GP_BLEU_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define GP_BLEU_ORDER 4

/* Sufficient statistics: sums over sentences, so shards (replicas, batches) of a test set
 * can be scored apart and merged. Zero-initialize before the first sentence. */
typedef struct gp_bleu_stats {
  int64_t sys_len, ref_len; /* hypothesis tokens; closest reference length per sentence */
  int64_t correct[GP_BLEU_ORDER], total[GP_BLEU_ORDER]; /* clipped matches; hypothesis n-grams */
} gp_bleu_stats;

typedef struct gp_bleu {
  double score;                    /* 0 to 100 */
  double precision[GP_BLEU_ORDER]; /* percent; a zero count smoothed ('exp') as sacreBLEU */
  double bp;                       /* brevity penalty */
  double ratio;                    /* sys_len / ref_len, 0 when ref_len is 0 */
  int64_t sys_len, ref_len;
  int64_t correct[GP_BLEU_ORDER], total[GP_BLEU_ORDER];
} gp_bleu;

/* sacreBLEU's Tokenizer13a on one line: drops "<skipped>", joins "-\n", turns other
 * newlines into spaces, unescapes &quot; &amp; &lt; &gt; (in that order, one pass each),
 * splits off punctuation by the mteval-v13a rules (period and comma only away from digits,
 * a dash after a digit) and leaves tokens separated by single spaces, splitting on every
 * Unicode whitespace character as Python's str.split() does. Works on UTF-8 bytes; invalid
 * UTF-8 passes through. *out is malloc'd (free it). Errors: GP_ERR_NOMEM. */
gp_status gp_bleu_tokenize_13a(const char *line, char **out);

/* Adds one sentence: the hypothesis against n_refs references (NULL entries are missing
 * references and skipped, as sacreBLEU's None; at least one must be present). Each line is
 * right-stripped of whitespace, then tokenized. The reference length is the one closest to
 * the hypothesis length, the shorter on a tie; n-gram counts are clipped by their largest
 * count in any one reference. Errors: GP_ERR_USAGE (NULL hypothesis, no reference),
 * GP_ERR_NOMEM; st is unchanged on error. */
gp_status gp_bleu_add_sentence(gp_bleu_stats *st, const char *hyp, const char *const *refs,
                               int n_refs);
void gp_bleu_stats_merge(gp_bleu_stats *into, const gp_bleu_stats *from);
/* The score from the statistics (sacreBLEU's compute_bleu with smooth 'exp', order 4). */
void gp_bleu_compute(const gp_bleu_stats *st, gp_bleu *out);

/* Corpus BLEU of n hypotheses with one reference each. n = 0 gives a score of 0.
 * Errors: GP_ERR_USAGE (n < 0, a NULL line, naming its index), GP_ERR_NOMEM. */
gp_status gp_bleu_corpus(const char *const *hyps, const char *const *refs, int n, gp_bleu *out);
/* The same with n_refs reference streams: refs[r][i] is reference r of sentence i (NULL when
 * sentence i has fewer references; every sentence needs one). */
gp_status gp_bleu_corpus_multi(const char *const *hyps, const char *const *const *refs, int n_refs,
                               int n, gp_bleu *out);

/* sacreBLEU's verbose line: "BLEU = 34.56 65.4/40.1/27.3/19.0 (BP = 0.950 ratio = 0.951
 * hyp_len = 1234 ref_len = 1297)". Returns what snprintf returns. */
int gp_bleu_format(const gp_bleu *b, char *buf, size_t n);

#endif
