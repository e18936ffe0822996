/* Deterministic random numbers. Streams are derived from (seed, name) so that a weight's
 * initial value depends only on the seed and the layer's path, never on K or M. */
#ifndef GP_RNG_H
#define GP_RNG_H

#include <stdint.h>

typedef struct gp_rng {
  uint64_t s[4]; /* xoshiro256** */
} gp_rng;

void gp_rng_seed(gp_rng *r, uint64_t seed);
uint64_t gp_rng_next(gp_rng *r);
float gp_rng_uniform(gp_rng *r);              /* [0, 1) */
float gp_rng_normal(gp_rng *r);               /* N(0, 1), Box-Muller */
uint64_t gp_rng_below(gp_rng *r, uint64_t n); /* uniform in [0, n), unbiased */

/* splitmix64's finalizer, in place, on a uint64_t or a GCC vector of them (the CPU's
 * 8-lane dropout in core/cpu/eltwise.c uses it too, so both compute one function). */
#define GP_SPLITMIX64(x)                                                                           \
  do {                                                                                             \
    (x) += 0x9e3779b97f4a7c15ULL;                                                                  \
    (x) = ((x) ^ ((x) >> 30)) * 0xbf58476d1ce4e5b9ULL;                                             \
    (x) = ((x) ^ ((x) >> 27)) * 0x94d049bb133111ebULL;                                             \
    (x) ^= (x) >> 31;                                                                              \
  } while (0)

/* Inline, with gp_counter_uniform: dropout draws one per element, and as calls they took a
 * quarter of its time (0.93 -> 0.67 ms on 131K floats, one thread). */
static inline uint64_t gp_hash64(uint64_t x) {
  GP_SPLITMIX64(x);
  return x;
}
uint64_t gp_hash_combine(uint64_t h, uint64_t v);
uint64_t gp_hash_str(uint64_t h, const char *s); /* FNV-style fold into h */
/* Stateless uniform in [0, 1) from (key, counter): the dropout mask function, reproducible
 * on every backend (24 random bits, so the value is exact in float). */
static inline float gp_counter_uniform(uint64_t key, uint64_t counter) {
  return (float)(gp_hash64(key ^ gp_hash64(counter)) >> 40) * (1.0f / 16777216.0f);
}

#endif
