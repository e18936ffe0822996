/* xoshiro256** streams and stateless counter hashing. */
#include "core/rng.h"

#include <math.h>

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t gp_hash_combine(uint64_t h, uint64_t v) {
  return gp_hash64(h ^ gp_hash64(v));
}

uint64_t gp_hash_str(uint64_t h, const char *s) {
  uint64_t f = 0xcbf29ce484222325ULL;
  for (; *s; s++)
    f = (f ^ (unsigned char)*s) * 0x100000001b3ULL;
  return gp_hash_combine(h, f);
}

void gp_rng_seed(gp_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) {
    x = gp_hash64(x);
    r->s[i] = x;
  }
}

uint64_t gp_rng_next(gp_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

float gp_rng_uniform(gp_rng *r) {
  return (float)(gp_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float gp_rng_normal(gp_rng *r) {
  double u1 = ((double)(gp_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (double)(gp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t gp_rng_below(gp_rng *r, uint64_t n) {
  uint64_t lim = (uint64_t)-1 - ((uint64_t)-1 % n), x;
  do
    x = gp_rng_next(r);
  while (x >= lim);
  return x % n;
}
