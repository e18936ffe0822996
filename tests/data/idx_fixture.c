/* Test helpers: small IDX files made on the fly, so no binary fixtures are committed. */
#include "idx_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/support/check.h"

static void die(const char *path, const char *what) {
  char msg[512];
  snprintf(msg, sizeof msg, "test fixture %s: %s", path, what);
  gp_t_die(msg);
}

void file_write(const char *path, const void *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) die(path, "cannot write");
}

unsigned char *file_read(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) die(path, "cannot open");
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)sz + 1);
  if (!p || fread(p, 1, (size_t)sz, fp) != (size_t)sz) die(path, "cannot read");
  fclose(fp);
  *n = (size_t)sz;
  return p;
}

void file_truncate(const char *path, size_t n) {
  if (truncate(path, (off_t)n) != 0) die(path, "cannot truncate");
}

static void gz_put(const char *path, const char *mode, const void *p, size_t n) {
  gzFile g = gzopen(path, mode);
  if (!g || (n && gzwrite(g, p, (unsigned)n) != (int)n) || gzclose(g) != Z_OK)
    die(path, "cannot write gzip");
}

void idx_write(const char *path, int gz, int type, int ndim, const uint32_t *dims, const void *data,
               size_t data_bytes) {
  size_t hn = 4 + 4 * (size_t)ndim, n = hn + data_bytes;
  unsigned char *buf = malloc(n);
  buf[0] = 0;
  buf[1] = 0;
  buf[2] = (unsigned char)type;
  buf[3] = (unsigned char)ndim;
  for (int i = 0; i < ndim; i++)
    for (int b = 0; b < 4; b++)
      buf[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
  if (data_bytes) memcpy(buf + hn, data, data_bytes);
  if (gz == 0) {
    file_write(path, buf, n);
  } else if (gz == 1) {
    gz_put(path, "wb", buf, n);
  } else {
    /* Two members, split inside the header, so the reader must cross the boundary. */
    gz_put(path, "wb", buf, 6);
    gz_put(path, "ab", buf + 6, n - 6);
  }
  free(buf);
}

uint8_t idx_pixel(uint32_t i, uint32_t k) {
  return k == 0 ? (uint8_t)(i % 256) : (uint8_t)((i * 7 + k * 13) % 256);
}

void idx_write_images(const char *path, int gz, uint32_t n, uint32_t side) {
  size_t per = (size_t)side * side;
  uint8_t *px = malloc(n * per + 1);
  for (uint32_t i = 0; i < n; i++)
    for (size_t k = 0; k < per; k++)
      px[i * per + k] = idx_pixel(i, (uint32_t)k);
  idx_write(path, gz, 0x08, 3, (uint32_t[]){n, side, side}, px, n * per);
  free(px);
}

void idx_write_labels(const char *path, int gz, uint32_t n, int classes) {
  uint8_t *lb = malloc(n + 1);
  for (uint32_t i = 0; i < n; i++)
    lb[i] = (uint8_t)(i % (uint32_t)classes);
  idx_write(path, gz, 0x08, 1, (uint32_t[]){n}, lb, n);
  free(lb);
}
