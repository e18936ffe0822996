/* Tar archives and gzip files written by the tests themselves: every header kind the reader
 * must handle (ustar with prefix, GNU base-256 sizes, pax records), and multi-member gzip. */
#include "tar_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

void put(buf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

void pad512(buf *b) {
  static const uint8_t z[512];
  put(b, z, (512 - b->n % 512) % 512);
}

/* A header; name longer than 100 goes to prefix when split_at > 0. base256 writes the size
 * the GNU way. */
void header(buf *b, const char *name, uint64_t size, char type, int split_at, int base256) {
  uint8_t h[512] = {0};
  if (split_at > 0) {
    memcpy(h + 345, name, (size_t)split_at);
    snprintf((char *)h, 100, "%s", name + split_at + 1);
  } else {
    snprintf((char *)h, 100, "%s", name);
  }
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  if (base256) {
    h[124] = 0x80;
    for (int i = 0; i < 8; i++)
      h[135 - i] = (uint8_t)(size >> (8 * i));
  } else {
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
  }
  memcpy(h + 136, "14000000000", 12);
  h[156] = (uint8_t)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  memset(h + 148, ' ', 8);
  for (int i = 0; i < 512; i++)
    sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  put(b, h, 512);
}

void member(buf *b, const char *name, const void *data, size_t n) {
  header(b, name, n, '0', 0, 0);
  put(b, data, n);
  pad512(b);
}

void pax_record(buf *rec, const char *key, const char *val) {
  char line[600];
  int body = (int)(strlen(key) + strlen(val) + 3); /* " k=v\n" less the length digits */
  int len = body + 1;
  while ((int)snprintf(NULL, 0, "%d", len) + body != len)
    len++;
  snprintf(line, sizeof line, "%d %s=%s\n", len, key, val);
  put(rec, line, strlen(line));
}

void write_file(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(d, 1, n, f);
  fclose(f);
}

/* gzip in two members, split at half. */
void write_gz2(const char *path, const uint8_t *d, size_t n) {
  gzFile g = gzopen(path, "wb");
  gzwrite(g, d, (unsigned)(n / 2));
  gzclose(g);
  g = gzopen(path, "ab");
  gzwrite(g, d + n / 2, (unsigned)(n - n / 2));
  gzclose(g);
}
