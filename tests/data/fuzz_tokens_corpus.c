/* Runs the token reader's fuzz entry point (fuzz_tokens.c) over a deterministic corpus: valid
 * seeds (TSV and two files, plain and gzip in two members), every truncation, a changed byte
 * at every position (up to a cap) and random edits. Under ASan/UBSan this is the CI stand-in
 * for a libFuzzer run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEED_MAX (1 << 16)

typedef struct buf {
  uint8_t *p;
  size_t n;
} buf;

/* 40 lines of ids < 1000 (vocab 1000 in the fuzz target), some sentences empty. */
static size_t text(char *out, size_t cap, int side, int tsv, int lines) {
  size_t n = 0;
  for (int i = 0; i < lines; i++) {
    for (int k = 0; k < 2; k++) {
      if (!tsv && k != side) continue;
      int len = (i * 7 + k * 3) % 11;
      for (int j = 0; j < len && n + 8 < cap; j++)
        n += (size_t)snprintf(out + n, cap - n, j ? " %d" : "%d", (i * 97 + j * 31 + k) % 1000);
      if (tsv && k == 0 && n + 1 < cap) out[n++] = '\t';
    }
    if (n + 1 < cap) out[n++] = '\n';
  }
  return n;
}

/* gzip in two members, through a temp file. */
static size_t gzip2(const char *in, size_t n, uint8_t *out, size_t cap) {
  const char *path = "/tmp/gp-fuzz-tok-seed.gz";
  for (int k = 0; k < 2; k++) {
    gzFile f = gzopen(path, k ? "ab" : "wb");
    size_t a = k ? n / 2 : 0, b = k ? n : n / 2;
    if (!f) return 0;
    gzwrite(f, in + a, (unsigned)(b - a));
    gzclose(f);
  }
  FILE *f = fopen(path, "rb");
  size_t got = f ? fread(out, 1, cap, f) : 0;
  if (f) fclose(f);
  remove(path);
  return got;
}

static buf seed(int tsv, int gz, uint8_t mode) {
  static char t[2][8192];
  buf b = {malloc(SEED_MAX), 3};
  size_t n0 = text(t[0], sizeof t[0], 0, tsv, 40), n1 = tsv ? 0 : text(t[1], sizeof t[1], 1, 0, 40);
  size_t a = n0, c = n1;
  if (gz) {
    a = gzip2(t[0], n0, b.p + 3, SEED_MAX / 2);
    c = tsv ? 0 : gzip2(t[1], n1, b.p + 3 + a, SEED_MAX / 2 - 3);
  } else {
    memcpy(b.p + 3, t[0], n0);
    memcpy(b.p + 3 + n0, t[1], n1);
  }
  b.p[0] = (uint8_t)(mode | (tsv ? 1 : 0));
  b.p[1] = (uint8_t)(a & 0xff);
  b.p[2] = (uint8_t)(a >> 8);
  b.n = 3 + a + c;
  return b;
}

int main(void) {
  /* option bytes: max_len 16 with pad 2 (2 replicas, then 1); max_len 4 refused; no max_len
   * with pad 8 and 3 replicas; the defaults */
  buf seeds[] = {seed(1, 0, 0x54), seed(0, 0, 0x14), seed(1, 1, 0x0a), seed(0, 1, 0xb0),
                 seed(0, 0, 0x00)};
  long runs = 0;
  gp_rng r;
  gp_rng_seed(&r, 13);
  uint8_t *m = malloc(SEED_MAX);
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    buf s = seeds[i];
    if (s.n < 40) {
      printf("FAIL: seed %zu was not made\n0 passed, 1 failed\n", i);
      return 1;
    }
    for (size_t len = 3; len <= s.n; len += 1 + len / 32, runs++) /* truncations */
      LLVMFuzzerTestOneInput(s.p, len);
    for (size_t pos = 0; pos < s.n && pos < 700; pos++, runs++) { /* a changed byte */
      memcpy(m, s.p, s.n);
      if (m[pos] >= '0' && m[pos] <= '9' && pos >= 3 && (pos & 1)) /* mostly still valid */
        m[pos] = (uint8_t)('0' + (m[pos] - '0' + 1 + gp_rng_below(&r, 9)) % 10);
      else
        m[pos] ^= (uint8_t)(1 + gp_rng_below(&r, 255));
      LLVMFuzzerTestOneInput(m, s.n);
    }
    for (int k = 0; k < 300; k++, runs++) { /* a few random edits, some of them separators */
      memcpy(m, s.p, s.n);
      for (int e = 0; e < 3; e++) {
        size_t at = 3 + gp_rng_below(&r, s.n - 3);
        uint64_t v = gp_rng_below(&r, 8);
        m[at] = v == 0 ? ' ' : v == 1 ? '\t' : v == 2 ? '\n' : (uint8_t)gp_rng_below(&r, 256);
      }
      LLVMFuzzerTestOneInput(m, s.n);
    }
    free(s.p);
  }
  free(m);
  printf("%ld inputs read or refused without a crash\n1 passed, 0 failed\n", runs);
  return 0;
}
