/* gzip streams and IDX files: plain, gzipped and multi-member files decode the same; damaged
 * files (truncated, corrupt, wrong magic, absurd sizes, extra data) give GP_ERR_DATA naming
 * the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/gzstream.h"
#include "data/idx.h"
#include "idx_fixture.h"
#include "tests/support/check.h"

static int failures, passes;

static char dir[256];

static const char *in_dir(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

/* gp_idx_read must fail with GP_ERR_DATA, naming the file and saying want. */
static void expect_bad(const char *path, int type, int ndim, const char *want) {
  gp_idx x;
  gp_error_clear();
  gp_status st = gp_idx_read(path, type, ndim, 0, "image", &x);
  CHECK(st == GP_ERR_DATA, "%s: status %s", path, gp_status_name(st));
  CHECK(strstr(gp_error_message(), path) != NULL, "%s: message does not name the file", path);
  if (want) CHECK(strstr(gp_error_message(), want) != NULL, "%s: message lacks '%s'", path, want);
  CHECK(x.data == NULL, "%s: data left on error", path);
  if (st == GP_OK) gp_idx_free(&x);
}

static void test_decode(void) {
  const char *names[3] = {"img_plain", "img.gz", "img_multi.gz"};
  for (int gz = 0; gz < 3; gz++) {
    const char *p = in_dir(names[gz]);
    idx_write_images(p, gz, 300, 5);
    gp_idx x;
    CHECK(gp_idx_read(p, GP_IDX_U8, 3, 0, "image", &x) == GP_OK, "%s reads", p);
    CHECK(x.type == GP_IDX_U8 && x.ndim == 3 && x.dims[0] == 300 && x.dims[1] == 5 &&
              x.dims[2] == 5 && x.items == 300 && x.item_bytes == 25 && x.elem_size == 1,
          "%s header", p);
    int bad = 0;
    for (uint32_t i = 0; i < 300 && x.data; i++)
      for (uint32_t k = 0; k < 25; k++)
        bad += ((uint8_t *)x.data)[i * 25 + k] != idx_pixel(i, k);
    CHECK(x.data && bad == 0, "%s: %d wrong pixels", p, bad);
    gp_idx_free(&x);
    /* the first items only */
    CHECK(gp_idx_read(p, 0, 0, 7, "image", &x) == GP_OK && x.items == 7 && x.dims[0] == 300,
          "%s limited", p);
    CHECK(x.data && ((uint8_t *)x.data)[6 * 25] == 6, "%s limited data", p);
    gp_idx_free(&x);
  }

  /* Multi-byte types come out in host order. */
  unsigned char be[8] = {0x12, 0x34, 0xff, 0xfe, 0x3f, 0x80, 0x00, 0x00};
  const char *p = in_dir("i16.gz");
  idx_write(p, 1, GP_IDX_I16, 2, (uint32_t[]){1, 2}, be, 4);
  gp_idx x;
  CHECK(gp_idx_read(p, GP_IDX_I16, 2, 0, "value", &x) == GP_OK, "i16 reads");
  CHECK(x.data && ((int16_t *)x.data)[0] == 0x1234 && ((int16_t *)x.data)[1] == -2, "i16 values");
  gp_idx_free(&x);
  p = in_dir("f32");
  idx_write(p, 0, GP_IDX_F32, 1, (uint32_t[]){1}, be + 4, 4);
  CHECK(gp_idx_read(p, GP_IDX_F32, 1, 0, "value", &x) == GP_OK, "f32 reads");
  CHECK(x.data && ((float *)x.data)[0] == 1.0f, "f32 value");
  gp_idx_free(&x);
  /* zero items is a valid, empty file */
  p = in_dir("empty.gz");
  idx_write(p, 1, GP_IDX_U8, 3, (uint32_t[]){0, 28, 28}, NULL, 0);
  CHECK(gp_idx_read(p, GP_IDX_U8, 3, 0, "image", &x) == GP_OK && x.items == 0, "empty file");
  gp_idx_free(&x);
}

static void test_damaged(void) {
  char want[128];
  /* truncated image data, plain and inside a complete gzip stream */
  const char *p = in_dir("trunc_plain");
  idx_write_images(p, 0, 10, 4);
  file_truncate(p, 16 + 150);
  expect_bad(p, GP_IDX_U8, 3, "expected 160 bytes of image data, the file ended after 150");
  p = in_dir("trunc_data.gz");
  unsigned char px[100] = {0};
  idx_write(p, 1, GP_IDX_U8, 3, (uint32_t[]){10, 4, 4}, px, 100);
  expect_bad(p, GP_IDX_U8, 3, "expected 160 bytes of image data, the file ended after 100");
  p = in_dir("trunc_header");
  idx_write_images(p, 0, 10, 4);
  file_truncate(p, 9);
  expect_bad(p, GP_IDX_U8, 3, "IDX header");
  p = in_dir("trunc_magic");
  file_write(p, "\0\0\x08", 3);
  expect_bad(p, GP_IDX_U8, 3, "IDX header");
  p = in_dir("zero_bytes");
  file_write(p, "", 0);
  expect_bad(p, GP_IDX_U8, 3, "IDX header");

  /* a gzip stream cut short, and one with damaged bytes: big enough that it is not stored */
  p = in_dir("cut.gz");
  idx_write_images(p, 1, 2000, 28);
  size_t n = 0;
  unsigned char *raw = file_read(p, &n);
  file_truncate(p, n / 2);
  expect_bad(p, GP_IDX_U8, 3, "truncated");
  p = in_dir("cut_trailer.gz"); /* only the CRC and length trailer missing */
  file_write(p, raw, n - 4);
  expect_bad(p, GP_IDX_U8, 3, NULL);
  p = in_dir("corrupt.gz");
  for (size_t i = n / 3; i < n / 3 + 16; i++)
    raw[i] ^= 0x5a;
  file_write(p, raw, n);
  /* Damaged deflate data may decode to more bytes before zlib notices; either way it fails. */
  expect_bad(p, GP_IDX_U8, 3, NULL);
  p = in_dir("bad_crc.gz");
  for (size_t i = n / 3; i < n / 3 + 16; i++)
    raw[i] ^= 0x5a;
  raw[n - 8] ^= 1;
  file_write(p, raw, n);
  expect_bad(p, GP_IDX_U8, 3, "gzip");
  p = in_dir("bad_gzip_header.gz");
  raw[3] = 0xff; /* reserved flag bits */
  file_write(p, raw, n);
  expect_bad(p, GP_IDX_U8, 3, "gzip");
  free(raw);

  /* magic and sizes */
  p = in_dir("labels_as_images.gz");
  idx_write_labels(p, 1, 10, 10);
  expect_bad(p, GP_IDX_U8, 3, "magic 0x00000801, expected 0x00000803");
  p = in_dir("i8_images");
  idx_write(p, 0, GP_IDX_I8, 3, (uint32_t[]){1, 1, 1}, "x", 1);
  expect_bad(p, GP_IDX_U8, 3, "expected 0x00000803");
  p = in_dir("not_idx");
  file_write(p, "P5\n28 28\n255\n", 13);
  expect_bad(p, 0, 0, "not an IDX file");
  p = in_dir("bad_type");
  idx_write(p, 0, 0x07, 1, (uint32_t[]){1}, "x", 1);
  expect_bad(p, 0, 0, "not an IDX file (magic 0x00000701)");
  p = in_dir("zero_dims");
  file_write(p, "\0\0\x08\0", 4);
  expect_bad(p, 0, 0, "not an IDX file");
  p = in_dir("nine_dims");
  idx_write(p, 0, GP_IDX_U8, 9, (uint32_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, "x", 1);
  expect_bad(p, 0, 0, "not an IDX file");
  /* Absurd sizes are refused from the header; a large claim on a short file costs only what
   * the file holds before it is found truncated. */
  p = in_dir("huge");
  idx_write(p, 0, GP_IDX_U8, 3, (uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu}, "x", 1);
  expect_bad(p, GP_IDX_U8, 3, "more than");
  p = in_dir("big_claim.gz");
  idx_write(p, 1, GP_IDX_U8, 3, (uint32_t[]){1000000, 100, 100}, "abc", 3);
  snprintf(want, sizeof want, "expected %llu bytes of image data, the file ended after 3",
           10000000000ULL);
  expect_bad(p, GP_IDX_U8, 3, want);
  p = in_dir("extra.gz");
  idx_write(p, 1, GP_IDX_U8, 1, (uint32_t[]){3}, "abcd", 4);
  expect_bad(p, GP_IDX_U8, 1, "more data than the header declares");
  gp_idx x;
  CHECK(gp_idx_read(p, GP_IDX_U8, 1, 2, "label", &x) == GP_OK, "limited read ignores the rest");
  gp_idx_free(&x);

  p = in_dir("missing.gz");
  expect_bad(p, GP_IDX_U8, 3, "cannot open");
}

static void test_gzstream(void) {
  const char *p = in_dir("stream.gz");
  char text[5000];
  for (int i = 0; i < 5000; i++)
    text[i] = (char)('a' + i % 26);
  idx_write(p, 2, GP_IDX_U8, 1, (uint32_t[]){4992}, text, 4992);
  gp_gzstream *s = NULL;
  CHECK(gp_gzstream_open(p, &s) == GP_OK, "open");
  if (!s) return;
  char buf[6000];
  size_t got = 0, total = 0;
  /* odd-sized reads across the member boundary */
  for (;;) {
    CHECK(gp_gzstream_read(s, buf + total, 37, &got) == GP_OK, "read");
    total += got;
    if (got < 37) break;
  }
  CHECK(total == 5000 && gp_gzstream_offset(s) == 5000, "total %zu", total);
  CHECK(memcmp(buf + 8, text, 4992) == 0, "stream content");
  CHECK(gp_gzstream_read(s, buf, 10, &got) == GP_OK && got == 0, "read at end");
  CHECK(strcmp(gp_gzstream_path(s), p) == 0, "path");
  gp_gzstream_close(s);
  gp_gzstream_close(NULL);

  /* Only another gzip member may follow a member. */
  size_t n = 0;
  unsigned char *raw = file_read(p, &n);
  unsigned char *more = malloc(n + 3);
  memcpy(more, raw, n);
  memcpy(more + n, "xyz", 3);
  p = in_dir("garbage.gz");
  file_write(p, more, n + 3);
  CHECK(gp_gzstream_open(p, &s) == GP_OK, "open garbage.gz");
  gp_error_clear();
  CHECK(s && gp_gzstream_read(s, buf, sizeof buf, &got) == GP_ERR_DATA && got == 5000,
        "trailing garbage: got %zu", got);
  CHECK(strstr(gp_error_message(), "unexpected bytes after the end") != NULL, "garbage message");
  gp_gzstream_close(s);
  free(more);
  free(raw);

  /* A plain file passes through, however it starts. */
  p = in_dir("plain.txt");
  file_write(p, "\x1fplain", 6);
  CHECK(gp_gzstream_open(p, &s) == GP_OK, "open plain");
  CHECK(s && gp_gzstream_read(s, buf, sizeof buf, &got) == GP_OK && got == 6 &&
            memcmp(buf, "\x1fplain", 6) == 0,
        "plain content");
  gp_gzstream_close(s);
}

/* Every truncation of a small gzipped file fails; random damage fails or decodes, never
 * crashes (meaningful under ASan). */
static void test_mutations(void) {
  const char *src = in_dir("mut_src.gz"), *p = in_dir("mut.gz");
  idx_write_images(src, 1, 10, 4);
  size_t n = 0;
  unsigned char *raw = file_read(src, &n), *m = malloc(n);
  gp_idx x;
  for (size_t len = 0; len < n; len++) {
    file_write(p, raw, len);
    gp_error_clear();
    gp_status st = gp_idx_read(p, GP_IDX_U8, 3, 0, "image", &x);
    CHECK(st == GP_ERR_DATA, "truncated to %zu of %zu bytes: %s", len, n, gp_status_name(st));
    if (st == GP_OK) gp_idx_free(&x);
  }
  uint64_t r = 0x9e3779b97f4a7c15ULL;
  int ok = 0;
  for (int it = 0; it < 2000; it++) {
    memcpy(m, raw, n);
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    m[r % n] ^= (unsigned char)(1 + (r >> 40) % 255);
    file_write(p, m, n);
    gp_status st = gp_idx_read(p, GP_IDX_U8, 3, 0, "image", &x);
    CHECK(st == GP_OK || st == GP_ERR_DATA, "mutation %d: %s", it, gp_status_name(st));
    ok += st == GP_OK;
    if (st == GP_OK) gp_idx_free(&x);
  }
  CHECK(ok < 1000, "%d of 2000 damaged files read as valid", ok);
  free(m);
  free(raw);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gp_idx_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_decode();
  test_damaged();
  test_gzstream();
  test_mutations();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
