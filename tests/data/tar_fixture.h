/* Tar archives and gzip files written by the tests themselves (tests/data). */
#ifndef GP_TESTS_TAR_FIXTURE_H
#define GP_TESTS_TAR_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

/* A growing byte buffer: the archive being written. */
typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

void put(buf *b, const void *d, size_t n);
/* Zeros up to the next 512-byte boundary. */
void pad512(buf *b);
/* A header; name longer than 100 goes to prefix when split_at > 0. base256 writes the size
 * the GNU way. type '0' file, '5' directory, 'x' pax, 'g' pax global, 'L' GNU long name. */
void header(buf *b, const char *name, uint64_t size, char type, int split_at, int base256);
/* A regular file member: header, data, padding. */
void member(buf *b, const char *name, const void *data, size_t n);
/* One "LEN key=value\n" pax record. */
void pax_record(buf *rec, const char *key, const char *val);
void write_file(const char *path, const void *d, size_t n);
/* gzip in two members, split at half. */
void write_gz2(const char *path, const uint8_t *d, size_t n);

#endif
