/* Text generation by a language model through the trainer's stages with the decoding cache
 * (core/eval/kvdec.h): each prompt's ids are fed one position a step, then N ids are drawn,
 * greedily at temperature 0, else sampled from the softmax of logits / temperature cut to the
 * top_k most likely and to the smallest set whose probability reaches top_p. */
#ifndef GP_EVAL_GENERATE_H
#define GP_EVAL_GENERATE_H

#include "core/train/trainer.h"

typedef struct gp_generate_opts {
  int64_t n;          /* ids to generate after each prompt */
  double temperature; /* 0: greedy (argmax) */
  int64_t top_k;      /* 0: all */
  double top_p;       /* (0, 1]; 1: all */
  uint64_t seed;
  int32_t eos; /* generation of a prompt stops after it; < 0: never */
  /* the model inputs fed each step: ids, and (-1 where the model has none) segment ids (1),
   * positions (0, 1, ...), a padding mask (1) and labels (-100, ignored) */
  int ids, seg, pos, mask, label;
} gp_generate_opts;

/* Continues each of the n prompts (prompt[i], len[i] ids); out[i] (malloc'ed, out_len[i] ids)
 * gets the generated ids. A prompt whose length plus o->n passes the model's positions is
 * refused in one line before anything runs. */
gp_status gp_generate(gp_trainer *t, const gp_generate_opts *o, const int32_t *const *prompt,
                      const int64_t *len, int64_t n, int32_t **out, int64_t *out_len);

/* The id drawn from logits z[0 .. V) by o's rule with uniform u in [0, 1) (exposed for tests). */
int32_t gp_generate_pick(const float *z, int64_t V, const gp_generate_opts *o, double u);

#endif
