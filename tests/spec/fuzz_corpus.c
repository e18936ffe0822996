/* Runs the fuzz target over a deterministic corpus made from the seed files given as
 * arguments: every truncation, a byte replaced at every position, lines deleted and
 * duplicated, and a fixed pseudo-random set of multi-byte mutations. It proves under the
 * sanitizer build that mutated files neither crash, hang nor leak (the target aborts on a
 * broken invariant, e.g. an error without FILE:LINE:COL). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bytes that matter to YAML and to the loader's own syntax. */
static const char repl[] = ":-[]{},&*!|>'\"#\n 0~$<.9%";

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { /* xorshift64*: the corpus is the same on every run */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
  fclose(f);
  return buf;
}

static long runs;
static void one(const char *d, size_t n) {
  LLVMFuzzerTestOneInput((const uint8_t *)d, n);
  runs++;
}

static void mutate_all(const char *seed, size_t n) {
  char *b = malloc(n * 2 + 64);
  if (!b) abort();
  for (size_t len = 0; len <= n; len++)
    one(seed, len);                /* every truncation */
  for (size_t i = 0; i < n; i++) { /* one replaced byte per position */
    memcpy(b, seed, n);
    b[i] = repl[(i * 7 + 3) % (sizeof repl - 1)];
    one(b, n);
  }
  /* each line deleted, and each line doubled */
  size_t starts[4096], nl = 0;
  starts[nl++] = 0;
  for (size_t i = 0; i < n && nl < 4095; i++)
    if (seed[i] == '\n') starts[nl++] = i + 1;
  starts[nl] = n;
  for (size_t l = 0; l + 1 <= nl && starts[l] < n; l++) {
    size_t a = starts[l], e = starts[l + 1];
    memcpy(b, seed, a);
    memcpy(b + a, seed + e, n - e);
    one(b, n - (e - a));
    memcpy(b, seed, e);
    memcpy(b + e, seed + a, n - a);
    one(b, n + (e - a));
  }
  for (int k = 0; k < 600; k++) { /* two to five random edits */
    size_t m = n;
    memcpy(b, seed, n);
    int edits = 2 + (int)(next() % 4);
    for (int j = 0; j < edits && m > 0; j++) {
      size_t at = (size_t)(next() % m);
      switch (next() % 3) {
      case 0:
        b[at] = repl[next() % (sizeof repl - 1)];
        break;
      case 1: /* delete a run of bytes */
      {
        size_t len = 1 + (size_t)(next() % 8);
        if (at + len > m) len = m - at;
        memmove(b + at, b + at + len, m - at - len);
        m -= len;
        break;
      }
      default: /* copy a run from elsewhere in the seed over this place */
      {
        size_t from = (size_t)(next() % n), len = 1 + (size_t)(next() % 24);
        if (from + len > n) len = n - from;
        if (at + len > m) len = m - at;
        memcpy(b + at, seed + from, len);
      }
      }
    }
    one(b, m);
  }
  free(b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_spec_fuzz_corpus SEED.yaml...\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    size_t n;
    char *seed = read_file(argv[i], &n);
    if (!seed) {
      fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    mutate_all(seed, n);
    free(seed);
  }
  printf("spec fuzz corpus: %ld inputs, no crash, hang or broken invariant\n", runs);
  return 0;
}
