/* Perplexity from a summed negative log-likelihood. */
#include "core/eval/perplexity.h"

#include <math.h>

double gp_perplexity(double total_nll, int64_t tokens) {
  if (tokens <= 0 || isnan(total_nll)) return NAN;
  return exp(total_nll / (double)tokens);
}
