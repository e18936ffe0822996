/* Perplexity from a summed negative log-likelihood. */
#ifndef GP_PERPLEXITY_H
#define GP_PERPLEXITY_H

#include <stdint.h>

/* exp(total_nll / tokens): total_nll is the sum of -log p (natural log) over the tokens that
 * count (real target tokens including each sentence's EOS, never padding). tokens <= 0 or a
 * NaN total gives NaN; a mean above ~709 gives +inf (exp overflows, as in PyTorch); a slightly
 * negative total from rounding gives a value just under 1. */
double gp_perplexity(double total_nll, int64_t tokens);

#endif
