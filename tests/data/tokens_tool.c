/* Loads a pair of id files through data/tokens.h (vocabulary size = the line count of
 * spm.vocab), runs one train and one eval epoch, checks the budget and that every pair comes
 * once, and prints the counts for tests/data/bible_corpus.sh to compare with wc.
 * Usage: tokens_tool SPM_VOCAB SRC_IDS TGT_IDS */
#include <stdio.h>
#include <stdlib.h>

#include "data/tokens.h"

static int epoch(const gp_token_corpus *c, const gp_tokens_opts *o, double *pad) {
  gp_tokens *t = NULL;
  if (gp_tokens_open(c, o, &t) != GP_OK) return -1;
  char *seen = calloc((size_t)c->pairs + 1, 1);
  gp_tokens_batch b = {0};
  int more, bad = !seen;
  double real = 0, slots = 0;
  for (int64_t k = 0; k < gp_tokens_batches(t) && !bad; k++) {
    if (gp_tokens_next(t, &b, &more) != GP_OK) bad++;
    bad += b.B * (b.S > b.T ? b.S : b.T) > o->max_tokens;
    for (int64_t i = 0; i < b.B && !bad; i++)
      bad += seen[b.pair[i]]++ != 0;
    real += (double)(b.src_tokens + b.tgt_tokens);
    slots += (double)(b.B * (b.S + b.T));
  }
  for (int64_t p = 0; p < c->pairs && !bad; p++)
    bad += !seen[p];
  *pad = slots > 0 ? 1 - real / slots : 0;
  int64_t n = gp_tokens_batches(t);
  free(seen);
  gp_tokens_batch_free(&b);
  gp_tokens_free(t);
  return bad ? -1 : (int)n;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s SPM_VOCAB SRC_IDS TGT_IDS\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  int vocab = 0, ch;
  while (f && (ch = fgetc(f)) != EOF)
    vocab += ch == '\n';
  if (f) fclose(f);
  gp_tokens_opts o;
  gp_tokens_opts_default(&o);
  o.vocab = vocab;
  o.max_tokens = 4096;
  gp_token_corpus c;
  if (gp_token_corpus_read(argv[2], argv[3], &o, &c) != GP_OK) {
    fprintf(stderr, "tokens_tool: %s\n", gp_error_message());
    return 1;
  }
  double pad_train, pad_eval;
  o.train = 1;
  int nb_train = epoch(&c, &o, &pad_train);
  o.train = 0;
  int nb_eval = epoch(&c, &o, &pad_eval);
  printf("vocab %d pairs %lld skipped %lld src_tokens %lld tgt_tokens %lld max %d %d "
         "batches %d padding %.4f\n",
         vocab, (long long)c.pairs, (long long)c.skipped, (long long)c.src_tokens,
         (long long)c.tgt_tokens, c.max_src, c.max_tgt, nb_train, pad_train);
  gp_token_corpus_free(&c);
  if (nb_train < 0 || nb_eval != nb_train || pad_eval != pad_train) {
    fprintf(stderr, "tokens_tool: bad batches (%d train, %d eval)\n", nb_train, nb_eval);
    return 1;
  }
  return 0;
}
