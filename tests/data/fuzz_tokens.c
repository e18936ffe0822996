/* Fuzz target for the translation token reader and its batches (libFuzzer's entry point).
 * Input: byte 0 picks the options (bit 0 TSV or two files, bits 1-2 max_len, bit 3 skip or
 * refuse long pairs, bits 4-5 pad_multiple, bits 6-7 replicas); bytes 1-2 (little-endian)
 * are the source file's length in two-file mode; the rest is the file(s), plain or gzip.
 * Anything must be read or refused with a message; what is read must batch within the
 * budget with every pair once an epoch. Also built into test_fuzz_tokens_corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(gp_status s) {
  if (s != GP_OK && gp_error_message()[0] == 0) abort();
}

static int temp_file(char *path, size_t n, const uint8_t *d, size_t len) {
  snprintf(path, n, "/tmp/gp-fuzz-tok-%d-XXXXXX", (int)getpid());
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, d + off, len - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  return 1;
}

/* The corpus as read must hold ids < vocab and end every sentence with EOS. */
static void check_corpus(const gp_token_corpus *c, const gp_tokens_opts *o) {
  for (int64_t p = 0; p < c->pairs; p++) {
    int64_t s0 = c->src_off[p], s1 = c->src_off[p + 1], t0 = c->tgt_off[p], t1 = c->tgt_off[p + 1];
    if (s1 <= s0 || t1 <= t0 || c->src[s1 - 1] != o->eos_id || c->tgt[t1 - 1] != o->eos_id) abort();
    if (o->max_len && (s1 - s0 > o->max_len || t1 - t0 > o->max_len)) abort();
    for (int64_t i = s0; i < s1; i++)
      if (c->src[i] < 0 || c->src[i] >= o->vocab) abort();
    for (int64_t i = t0; i < t1; i++)
      if (c->tgt[i] < 0 || c->tgt[i] >= o->vocab) abort();
  }
  if (c->pairs + c->skipped != c->lines) abort();
}

/* One epoch (and the start of the next): budget, masks and counts hold, no pair twice. */
static void check_batches(const gp_token_corpus *c, gp_tokens_opts o, int train) {
  o.train = train;
  gp_tokens *t = NULL;
  gp_status s = gp_tokens_open(c, &o, &t);
  refused(s);
  if (s != GP_OK) return;
  uint8_t *seen = calloc((size_t)c->pairs + 1, 1);
  gp_tokens_batch b = {0};
  int more = 1;
  for (int64_t k = 0; k <= gp_tokens_batches(t) && seen; k++) {
    if (gp_tokens_next(t, &b, &more) != GP_OK) abort();
    if (!more) break;
    if (b.B * (b.S > b.T ? b.S : b.T) > o.max_tokens) abort();
    int64_t ns = 0, nt = 0;
    for (int64_t i = 0; i < b.B * b.S; i++)
      ns += b.src_mask[i];
    for (int64_t i = 0; i < b.B * b.T; i++)
      nt += b.tgt_mask[i];
    if (ns != b.src_tokens || nt != b.tgt_tokens) abort();
    for (int64_t i = 0; i < b.B; i++) {
      if (b.pair[i] < 0 || b.pair[i] >= c->pairs) abort();
      if (k < gp_tokens_batches(t) && seen[b.pair[i]]++) abort();
      if (b.tgt_in[i * b.T] != o.bos_id) abort();
    }
  }
  int64_t e, ix;
  gp_tokens_tell(t, &e, &ix);
  if (gp_tokens_seek(t, e, ix) != GP_OK) abort();
  free(seen);
  gp_tokens_batch_free(&b);
  gp_tokens_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3 || size > (1u << 20)) return 0;
  gp_error_clear();
  uint8_t m = data[0];
  size_t split = (size_t)data[1] | (size_t)data[2] << 8, len = size - 3;
  const uint8_t *body = data + 3;
  if (split > len) split = len;
  gp_tokens_opts o;
  gp_tokens_opts_default(&o);
  o.vocab = 1000;
  o.max_len = (int32_t[]){0, 4, 16, 64}[(m >> 1) & 3];
  o.skip_long = !(m & 8);
  o.pad_multiple = (int32_t[]){1, 2, 4, 8}[(m >> 4) & 3];
  o.max_tokens = 64;
  o.replicas = 1 + (m >> 6) % 3;
  o.replica = o.replicas - 1;
  o.seed = m;
  char src[64], tgt[64];
  int tsv = m & 1;
  if (!temp_file(src, sizeof src, body, tsv ? len : split)) return 0;
  if (!tsv && !temp_file(tgt, sizeof tgt, body + split, len - split)) {
    unlink(src);
    return 0;
  }
  gp_token_corpus c;
  gp_status s = gp_token_corpus_read(src, tsv ? NULL : tgt, &o, &c);
  refused(s);
  if (s == GP_OK) {
    check_corpus(&c, &o);
    check_batches(&c, o, 1);
    check_batches(&c, o, 0);
    gp_token_corpus_free(&c);
  }
  unlink(src);
  if (!tsv) unlink(tgt);
  return 0;
}
