/* Token-budget batches over a translation corpus (fairseq's batch_by_size): pairs sorted by
 * length and cut greedily so that B x max(S, T) stays within max_tokens. The cut points
 * depend only on the lengths, so they are computed once; an epoch's plan (which pair fills
 * which slot, and the batch order) is derived from (seed, epoch) alone, which is what makes
 * a position (epoch, index) enough to resume exactly. */
#include "data/tokens.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

#define TOKENS_STREAM 0x746f6b656e73ULL /* "tokens": this module's random stream */

struct gp_tokens {
  const gp_token_corpus *c;
  gp_tokens_opts o;
  int64_t n;       /* pairs */
  int64_t *sorted; /* pairs by (longest side, source, target length, index) */
  int64_t nb;      /* batches of one epoch, all replicas */
  int64_t *bstart; /* [nb + 1]: batch k holds order[bstart[k] .. bstart[k+1]) */
  int64_t per;     /* batches per replica and epoch */
  int64_t plan_epoch;
  int64_t *order; /* plan_epoch's pairs: sorted, equal-length runs shuffled (train) */
  int64_t *bperm; /* plan_epoch's batch order */
  int64_t epoch, index;
};

typedef struct pair_key {
  int64_t longest, src, tgt, idx;
} pair_key;

static int64_t src_len(const gp_token_corpus *c, int64_t i) {
  return c->src_off[i + 1] - c->src_off[i];
}
static int64_t tgt_len(const gp_token_corpus *c, int64_t i) {
  return c->tgt_off[i + 1] - c->tgt_off[i];
}
static int64_t padded(int64_t len, int32_t m) {
  return (len + m - 1) / m * m;
}

static int cmp_key(const void *x, const void *y) {
  const pair_key *a = x, *b = y;
  if (a->longest != b->longest) return a->longest < b->longest ? -1 : 1;
  if (a->src != b->src) return a->src < b->src ? -1 : 1;
  if (a->tgt != b->tgt) return a->tgt < b->tgt ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

void gp_tokens_free(gp_tokens *t) {
  if (!t) return;
  free(t->sorted);
  free(t->bstart);
  free(t->order);
  free(t->bperm);
  free(t);
}

/* Sorts the pairs by length and cuts the batches. */
static gp_status make_batches(gp_tokens *t) {
  const gp_token_corpus *c = t->c;
  const gp_tokens_opts *o = &t->o;
  int64_t n = t->n, m = n > 0 ? n : 1;
  pair_key *k = malloc((size_t)m * sizeof *k);
  t->sorted = malloc((size_t)m * sizeof *t->sorted);
  t->order = malloc((size_t)m * sizeof *t->order);
  t->bstart = malloc((size_t)(m + 1) * sizeof *t->bstart);
  if (!k || !t->sorted || !t->order || !t->bstart) {
    free(k);
    return GP_ERR(GP_ERR_NOMEM, "tokens: out of memory for %lld pairs", (long long)n);
  }
  for (int64_t i = 0; i < n; i++) {
    k[i] = (pair_key){0, src_len(c, i), tgt_len(c, i), i};
    k[i].longest = k[i].src > k[i].tgt ? k[i].src : k[i].tgt;
    if (padded(k[i].longest, o->pad_multiple) > o->max_tokens) {
      int64_t line = c->line ? c->line[i] : i + 1, len = k[i].longest;
      free(k);
      return GP_ERR(GP_ERR_USAGE,
                    "tokens: the pair of line %lld (%lld tokens, padded %lld) does not fit "
                    "max_tokens %lld; read the corpus with the same options",
                    (long long)line, (long long)len, (long long)padded(len, o->pad_multiple),
                    (long long)o->max_tokens);
    }
  }
  qsort(k, (size_t)n, sizeof *k, cmp_key);
  int64_t nb = 0, start = 0, S = 0, T = 0;
  for (int64_t i = 0; i < n; i++) {
    t->sorted[i] = k[i].idx;
    int64_t s = padded(k[i].src, o->pad_multiple), tt = padded(k[i].tgt, o->pad_multiple);
    int64_t S2 = s > S ? s : S, T2 = tt > T ? tt : T, cnt = i - start + 1;
    int64_t width = S2 > T2 ? S2 : T2;
    if (cnt > 1 && (cnt * width > o->max_tokens || (o->max_batch > 0 && cnt > o->max_batch))) {
      t->bstart[nb++] = start;
      start = i;
      S2 = s;
      T2 = tt;
    }
    S = S2;
    T = T2;
  }
  if (n > 0) t->bstart[nb++] = start;
  t->bstart[nb] = n;
  t->nb = nb;
  free(k);
  return GP_OK;
}

gp_status gp_tokens_open(const gp_token_corpus *c, const gp_tokens_opts *o, gp_tokens **out) {
  *out = NULL;
  GP_TRY(gp_tokens_opts_check(o));
  gp_tokens *t = calloc(1, sizeof *t);
  if (!t) return GP_ERR(GP_ERR_NOMEM, "tokens: out of memory");
  t->c = c;
  t->o = *o;
  t->n = c->pairs;
  t->plan_epoch = -1;
  gp_status st = make_batches(t);
  if (st == GP_OK) {
    int64_t R = o->replicas;
    t->per = o->train ? t->nb / R : (t->nb + R - 1) / R;
    t->bperm = malloc((size_t)(t->nb > 0 ? t->nb : 1) * sizeof *t->bperm);
    if (!t->bperm)
      st = GP_ERR(GP_ERR_NOMEM, "tokens: out of memory");
    else if (o->train && t->per == 0)
      st = GP_ERR(GP_ERR_USAGE,
                  "tokens: %lld pairs make %lld batch(es) of max_tokens %lld, fewer than the "
                  "%d replicas: nothing to train on",
                  (long long)t->n, (long long)t->nb, (long long)o->max_tokens, o->replicas);
  }
  if (st != GP_OK) {
    gp_tokens_free(t);
    return st;
  }
  *out = t;
  return GP_OK;
}

int64_t gp_tokens_batches(const gp_tokens *t) {
  return t->per;
}

int64_t gp_tokens_total_batches(const gp_tokens *t) {
  return t->nb;
}

/* Fills order and bperm for an epoch: sorted order with each run of equal (source, target)
 * lengths shuffled, and a shuffled batch order (train); the sorted order as is (eval). */
static void plan(gp_tokens *t, int64_t epoch) {
  if (t->plan_epoch == epoch) return;
  memcpy(t->order, t->sorted, (size_t)t->n * sizeof *t->order);
  for (int64_t k = 0; k < t->nb; k++)
    t->bperm[k] = k;
  t->plan_epoch = epoch;
  if (!t->o.train) return;
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(gp_hash_combine(t->o.seed, TOKENS_STREAM), (uint64_t)epoch));
  const gp_token_corpus *c = t->c;
  for (int64_t a = 0, b; a < t->n; a = b) {
    int64_t ls = src_len(c, t->order[a]), lt = tgt_len(c, t->order[a]);
    for (b = a + 1; b < t->n && src_len(c, t->order[b]) == ls && tgt_len(c, t->order[b]) == lt;)
      b++;
    for (int64_t i = b - a - 1; i > 0; i--) {
      int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1), x = t->order[a + i];
      t->order[a + i] = t->order[a + j];
      t->order[a + j] = x;
    }
  }
  for (int64_t i = t->nb - 1; i > 0; i--) {
    int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1), x = t->bperm[i];
    t->bperm[i] = t->bperm[j];
    t->bperm[j] = x;
  }
}

void gp_tokens_batch_free(gp_tokens_batch *b) {
  if (!b) return;
  free(b->src);
  free(b->tgt_in);
  free(b->tgt_out);
  free(b->src_mask);
  free(b->tgt_mask);
  free(b->pair);
  memset(b, 0, sizeof *b);
}

static gp_status reserve(gp_tokens_batch *b, int64_t need) {
  if (need <= b->cap_) return GP_OK;
  void *p[6] = {realloc(b->src, (size_t)need * 4), NULL, NULL, NULL, NULL, NULL};
  if (p[0]) b->src = p[0];
  if (p[0] && (p[1] = realloc(b->tgt_in, (size_t)need * 4))) b->tgt_in = p[1];
  if (p[1] && (p[2] = realloc(b->tgt_out, (size_t)need * 4))) b->tgt_out = p[2];
  if (p[2] && (p[3] = realloc(b->src_mask, (size_t)need))) b->src_mask = p[3];
  if (p[3] && (p[4] = realloc(b->tgt_mask, (size_t)need))) b->tgt_mask = p[4];
  if (p[4] && (p[5] = realloc(b->pair, (size_t)need * 8))) b->pair = p[5];
  if (!p[5])
    return GP_ERR(GP_ERR_NOMEM, "tokens: out of memory for a batch of %lld", (long long)need);
  b->cap_ = need;
  return GP_OK;
}

static gp_status fill(const gp_tokens *t, int64_t k, gp_tokens_batch *b) {
  const gp_token_corpus *c = t->c;
  const gp_tokens_opts *o = &t->o;
  const int64_t *pairs = t->order + t->bstart[k];
  int64_t B = t->bstart[k + 1] - t->bstart[k], S = 0, T = 0;
  for (int64_t i = 0; i < B; i++) {
    if (src_len(c, pairs[i]) > S) S = src_len(c, pairs[i]);
    if (tgt_len(c, pairs[i]) > T) T = tgt_len(c, pairs[i]);
  }
  S = padded(S, o->pad_multiple);
  T = padded(T, o->pad_multiple);
  GP_TRY(reserve(b, B * (S > T ? S : T)));
  b->B = B;
  b->S = S;
  b->T = T;
  b->src_tokens = b->tgt_tokens = 0;
  for (int64_t i = 0; i < B; i++) {
    int64_t p = pairs[i], ls = src_len(c, p), lt = tgt_len(c, p);
    const int32_t *s = c->src + c->src_off[p], *g = c->tgt + c->tgt_off[p];
    int32_t *src = b->src + i * S, *in = b->tgt_in + i * T, *out = b->tgt_out + i * T;
    uint8_t *sm = b->src_mask + i * S, *tm = b->tgt_mask + i * T;
    b->pair[i] = p;
    for (int64_t j = 0; j < S; j++) {
      src[j] = j < ls ? s[j] : o->pad_id;
      sm[j] = j < ls;
    }
    /* The stored target ends with EOS: tgt_out is it as is, tgt_in is BOS then all but EOS. */
    for (int64_t j = 0; j < T; j++) {
      out[j] = j < lt ? g[j] : o->pad_id;
      in[j] = j == 0 ? o->bos_id : j < lt ? g[j - 1] : o->pad_id;
      tm[j] = j < lt;
    }
    b->src_tokens += ls;
    b->tgt_tokens += lt;
  }
  return GP_OK;
}

gp_status gp_tokens_next(gp_tokens *t, gp_tokens_batch *b, int *more) {
  *more = 1;
  if (t->index >= t->per) {
    if (!t->o.train) {
      *more = 0;
      b->B = b->S = b->T = b->src_tokens = b->tgt_tokens = 0;
      return GP_OK;
    }
    t->epoch++;
    t->index = 0;
  }
  plan(t, t->epoch);
  int64_t g = t->index * t->o.replicas + t->o.replica;
  if (g >= t->nb) { /* eval: filler for the last round */
    t->index++;
    b->B = b->S = b->T = b->src_tokens = b->tgt_tokens = 0;
    return GP_OK;
  }
  GP_TRY(fill(t, t->bperm[g], b));
  t->index++;
  return GP_OK;
}

void gp_tokens_tell(const gp_tokens *t, int64_t *epoch, int64_t *index) {
  *epoch = t->epoch;
  *index = t->index;
}

gp_status gp_tokens_seek(gp_tokens *t, int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0 || index > t->per)
    return GP_ERR(GP_ERR_USAGE, "tokens: position (epoch %lld, batch %lld) is outside [0, %lld]",
                  (long long)epoch, (long long)index, (long long)t->per);
  t->epoch = epoch;
  t->index = index;
  return GP_OK;
}
