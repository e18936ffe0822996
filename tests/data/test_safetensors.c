/* safetensors: round trip, the reference-layout fixture, and malformed files (each must give
 * GP_ERR_DATA naming the file, never a crash). Usage: test_safetensors FIXTURE */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io/safetensors.h"
#include "core/io/target.h"
#include "tests/support/check.h"

static int failures, passes;

static char dir[256];

static void path_in(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp || fwrite(p, 1, n, fp) != n) {
    perror(path);
    exit(1);
  }
  fclose(fp);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)sz + 1);
  *n = fread(p, 1, (size_t)sz, fp);
  fclose(fp);
  return p;
}

/* A file with header length hlen (as written in the first 8 bytes), then json, then
 * data_len bytes of data. */
static void make_raw(const char *path, uint64_t hlen, const char *json, size_t data_len) {
  size_t jn = strlen(json);
  unsigned char *buf = calloc(1, 8 + jn + data_len + 1);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(buf + 8, json, jn);
  for (size_t i = 0; i < data_len; i++)
    buf[8 + jn + i] = (unsigned char)i;
  write_bytes(path, buf, 8 + jn + data_len);
  free(buf);
}

static void make(const char *path, const char *json, size_t data_len) {
  make_raw(path, strlen(json), json, data_len);
}

/* One line with nothing that moves a terminal: no C0, DEL, C1 or U+2028/9. */
static int printable_line(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
        (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)))
      return 0;
  return 1;
}

/* Reading path must fail with code and a message naming the file (and containing want). */
static void expect_error(const char *path, gp_status code, const char *want) {
  gp_st_file *f = (gp_st_file *)1;
  gp_error_clear();
  gp_status st = gp_st_read(path, &f);
  CHECK(st == code, "%s: status %s, want %s", path, gp_status_name(st), gp_status_name(code));
  CHECK(f == NULL, "%s: output not NULL on error", path);
  CHECK(strstr(gp_error_message(), path) != NULL, "%s: message does not name the file", path);
  CHECK(printable_line(gp_error_message()), "%s: not one printable line", path);
  if (want) CHECK(strstr(gp_error_message(), want) != NULL, "%s: message lacks '%s'", path, want);
  if (st == GP_OK) gp_st_free(f);
}

static void test_round_trip(void) {
  char path[512];
  path_in(path, sizeof path, "rt.safetensors");
  float w[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -7.0f};
  int64_t step = 9007199254740993LL; /* 2^53 + 1: must survive without going through double */
  uint8_t u[5] = {0, 1, 2, 254, 255};
  uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};
  int32_t iv[1] = {-123456};
  gp_shape s23 = gp_shape_of(2, (int64_t[]){2, 3}), s0 = gp_shape_of(0, NULL),
           s5 = gp_shape_of(1, (int64_t[]){5}), s3 = gp_shape_of(1, (int64_t[]){3}),
           sz = gp_shape_of(2, (int64_t[]){0, 7}), s111 = gp_shape_of(3, (int64_t[]){1, 1, 1});
  gp_st_writer *wr = gp_st_writer_new();
  CHECK(wr != NULL, "writer");
  /* Added out of alphabetical order: the file must keep the added order. */
  CHECK(gp_st_add(wr, "layer.2/weight", GP_F32, &s23, w) == GP_OK, "add w");
  CHECK(gp_st_add(wr, "step", GP_I64, &s0, &step) == GP_OK, "add step");
  CHECK(gp_st_add(wr, "a \"quoted\"\\name\n\xc3\xa9", GP_U8, &s5, u) == GP_OK, "add u8");
  CHECK(gp_st_add(wr, "half", GP_F16, &s3, h) == GP_OK, "add f16");
  CHECK(gp_st_add(wr, "bf", GP_BF16, &s3, h) == GP_OK, "add bf16");
  CHECK(gp_st_add(wr, "empty", GP_F32, &sz, NULL) == GP_OK, "add empty");
  CHECK(gp_st_add(wr, "i", GP_I32, &s111, iv) == GP_OK, "add i32");
  CHECK(gp_st_add(wr, "step", GP_F32, &s23, w) != GP_OK, "duplicate name accepted");
  CHECK(gp_st_add(wr, "__metadata__", GP_F32, &s23, w) != GP_OK, "reserved name accepted");
  CHECK(gp_st_add(wr, "nodata", GP_F32, &s23, NULL) != GP_OK, "NULL data accepted");
  CHECK(gp_st_meta_set(wr, "format", "gpipe") == GP_OK, "meta");
  CHECK(gp_st_meta_set(wr, "seed", "1") == GP_OK, "meta");
  CHECK(gp_st_meta_set(wr, "seed", "42") == GP_OK, "meta replace");
  /* another process's temporary file for the same path (two runs sharing a checkpoint
   * folder): not written into, not renamed away (a fixed PATH.tmp was both) */
  char other[600];
  snprintf(other, sizeof other, "%s.tmp", path);
  FILE *of = fopen(other, "w");
  CHECK(of && fputs("another writer", of) >= 0 && fclose(of) == 0, "write %s", other);
  CHECK(gp_st_write(wr, path) == GP_OK, "write");
  gp_st_writer_free(wr);
  size_t on = 0;
  unsigned char *ob = read_bytes(other, &on);
  CHECK(ob && on == 14 && memcmp(ob, "another writer", 14) == 0,
        "another writer's temporary file was touched");
  free(ob);
  remove(other);

  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK(access(tmp, F_OK) != 0, "temporary file left behind");

  size_t n = 0;
  unsigned char *raw = read_bytes(path, &n);
  CHECK(raw && n > 8, "file readable");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | raw[i];
  CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
  CHECK(raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}', "header padding");
  size_t want_data = 24 + 8 + 5 + 6 + 6 + 0 + 4;
  CHECK(n == 8 + hlen + want_data, "file size %zu, want %zu", n, (size_t)(8 + hlen + want_data));
  /* tensors back to back in the order added */
  CHECK(memcmp(raw + 8 + hlen, w, 24) == 0, "first tensor at data offset 0");
  CHECK(memcmp(raw + 8 + hlen + 24, &step, 8) == 0, "second tensor follows");
  free(raw);

  gp_st_file *f = NULL;
  CHECK(gp_st_read(path, &f) == GP_OK, "read back");
  if (!f) return;
  CHECK(gp_st_count(f) == 7, "count %d", gp_st_count(f));
  const char *names[] = {"layer.2/weight", "step", "a \"quoted\"\\name\n\xc3\xa9", "half", "bf",
                         "empty",          "i"};
  for (int i = 0; i < 7 && i < gp_st_count(f); i++)
    CHECK(strcmp(gp_st_entry_at(f, i)->name, names[i]) == 0, "entry %d is %s", i,
          gp_st_entry_at(f, i)->name);
  CHECK(gp_st_entry_at(f, 7) == NULL && gp_st_entry_at(f, -1) == NULL, "entry_at out of range");
  const gp_st_entry *e = gp_st_find(f, "layer.2/weight");
  CHECK(e && e->dtype == GP_F32 && gp_shape_equal(&e->shape, &s23), "weight entry");
  if (e) CHECK(memcmp(gp_st_data(f, e), w, sizeof w) == 0, "weight data");
  e = gp_st_find(f, "step");
  CHECK(e && e->dtype == GP_I64 && e->shape.ndim == 0, "scalar entry");
  if (e) CHECK(memcmp(gp_st_data(f, e), &step, 8) == 0, "scalar data");
  e = gp_st_find(f, names[2]);
  CHECK(e && e->dtype == GP_U8 && memcmp(gp_st_data(f, e), u, 5) == 0, "escaped name");
  e = gp_st_find(f, "bf");
  CHECK(e && e->dtype == GP_BF16 && memcmp(gp_st_data(f, e), h, 6) == 0, "bf16");
  e = gp_st_find(f, "empty");
  CHECK(e && e->begin == e->end && gp_shape_equal(&e->shape, &sz), "zero-size tensor");
  e = gp_st_find(f, "i");
  int32_t got_i = 0; /* after an odd-sized tensor: unaligned, so copied out */
  if (e) memcpy(&got_i, gp_st_data(f, e), 4);
  CHECK(e && e->dtype == GP_I32 && got_i == -123456, "i32");
  CHECK(gp_st_find(f, "nope") == NULL, "find absent");
  CHECK(gp_st_meta(f, "format") && strcmp(gp_st_meta(f, "format"), "gpipe") == 0, "meta");
  CHECK(gp_st_meta(f, "seed") && strcmp(gp_st_meta(f, "seed"), "42") == 0, "meta replaced");
  CHECK(gp_st_meta(f, "nope") == NULL, "meta absent");
  gp_st_free(f);

  /* An empty writer makes a valid file with no tensors; overwriting replaces the file. */
  wr = gp_st_writer_new();
  CHECK(gp_st_write(wr, path) == GP_OK, "write empty");
  gp_st_writer_free(wr);
  CHECK(gp_st_read(path, &f) == GP_OK && gp_st_count(f) == 0, "empty file reads");
  gp_st_free(f);

  path_in(path, sizeof path, "no/such/dir/x.safetensors");
  wr = gp_st_writer_new();
  gp_error_clear();
  CHECK(gp_st_write(wr, path) == GP_ERR_IO, "write into a missing directory");
  CHECK(strstr(gp_error_message(), "no/such/dir") != NULL, "write error names the file");
  gp_st_writer_free(wr);
}

static void test_fixture(const char *path) {
  gp_st_file *f = NULL;
  CHECK(gp_st_read(path, &f) == GP_OK, "fixture %s reads", path);
  if (!f) return;
  CHECK(gp_st_count(f) == 7, "fixture count");
  /* the reference layout orders by alignment then name: step (I64) comes first */
  CHECK(strcmp(gp_st_entry_at(f, 0)->name, "step") == 0, "fixture order");
  const gp_st_entry *e = gp_st_find(f, "conv.weight");
  const float w[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 65504.0f};
  CHECK(e && e->dtype == GP_F32 && e->shape.ndim == 2 && e->shape.d[0] == 2 && e->shape.d[1] == 3,
        "conv.weight");
  if (e) CHECK(memcmp(gp_st_data(f, e), w, sizeof w) == 0, "conv.weight values");
  e = gp_st_find(f, "conv.bias");
  CHECK(e && ((const float *)gp_st_data(f, e))[1] == -2.5f, "conv.bias");
  e = gp_st_find(f, "step");
  int64_t step = 0;
  if (e) memcpy(&step, gp_st_data(f, e), 8);
  CHECK(e && e->dtype == GP_I64 && e->shape.ndim == 0 && step == 1234567890123LL, "step");
  e = gp_st_find(f, "ids");
  CHECK(e && e->dtype == GP_I32 && ((const int32_t *)gp_st_data(f, e))[2] == 2147483647, "ids");
  e = gp_st_find(f, "half");
  CHECK(e && e->dtype == GP_F16 && ((const uint16_t *)gp_st_data(f, e))[1] == 0xc000, "half");
  e = gp_st_find(f, "bytes");
  CHECK(e && e->dtype == GP_U8 && ((const uint8_t *)gp_st_data(f, e))[3] == 255, "bytes");
  e = gp_st_find(f, "empty");
  CHECK(e && e->shape.d[0] == 0 && e->shape.d[1] == 4 && e->begin == e->end, "empty");
  CHECK(gp_st_meta(f, "format") && strcmp(gp_st_meta(f, "format"), "pt") == 0, "meta format");
  CHECK(gp_st_meta(f, "note") && strcmp(gp_st_meta(f, "note"), "quote \" and \xc3\xa9") == 0,
        "meta escapes");
  gp_st_free(f);
}

#define T(j) "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" j "}}"

static void test_malformed(void) {
  char p[512];
  struct {
    const char *name, *json, *want;
    size_t data;
  } cases[] = {
      {"bad_json1", "{\"t\":{\"dtype\":\"F32\",}}", "JSON at byte", 8},
      {"bad_json2", "{\"t\" {}}", "JSON at byte", 8},
      {"bad_json3", "[1, 2]", "not a JSON object", 8},
      {"bad_json4", "{\"a\":1} x", "after the value", 0},
      {"bad_json5", "{\"t\":\"\xff\"}", "UTF-8", 0},
      {"bad_json6", "{\"a\":{},\"a\":{}}", "duplicate key", 0},
      {"unterminated", "{\"t\":{\"dtype\":\"F32", "unterminated", 0},
      {"unknown_dtype", "{\"t\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
       "unknown dtype 'F64'", 8},
      {"dtype_number", "{\"t\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype", 4},
      {"neg_dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", ">= 0", 4},
      {"frac_dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", ">= 0", 4},
      {"huge_dims",
       "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
       "\"data_offsets\":[0,4]}}",
       "more bytes", 4},
      {"too_many_dims",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
       "dimensions", 1},
      {"missing_key", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", "data_offsets", 8},
      {"extra_key", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}",
       "unknown key", 8},
      {"offsets_out_of_range", T("[0,8]"), "outside", 4},
      {"offsets_reversed", T("[8,0]"), "end before", 8},
      {"offsets_three", T("[0,4,8]"), "two integers", 8},
      {"offsets_negative", T("[-8,0]"), "two integers", 8},
      {"offsets_huge", T("[18446744073709551608,18446744073709551615]"), "outside", 8},
      {"offsets_overflow", T("[0,18446744073709551616]"), "two integers", 8},
      {"size_mismatch", T("[0,12]"), "needs 8", 12},
      {"overlap",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       "overlap", 12},
      {"overlap_same",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
       "overlap", 8},
      {"meta_number", "{\"__metadata__\":{\"k\":1}}", "not a string", 0},
      {"meta_array", "{\"__metadata__\":[]}", "not an object", 0},
      {"entry_not_object", "{\"t\":[]}", "not an object", 0},
      /* text from the file is shown escaped: one line, no terminal control */
      {"dtype_line_break", "{\"t\":{\"dtype\":\"F32\\n\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "tensor 't': unknown dtype 'F32\\n'", 4},
      {"name_escape",
       "{\"a\\u001b[2J\\u2028\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"k\\r\":1}}",
       "tensor 'a\\x1b[2J\\u2028': unknown key 'k\\r'", 4},
      {"meta_key_c1", "{\"__metadata__\":{\"k\\u009b\\u0085\":1}}",
       "value of 'k\\u009b\\u0085' is a number", 0},
      {"overlap_names",
       "{\"a\\t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\\u2029\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       "tensors 'a\\t' [0, 8] and 'b\\u2029' [4, 12] overlap", 12},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    path_in(p, sizeof p, cases[i].name);
    make(p, cases[i].json, cases[i].data);
    expect_error(p, GP_ERR_DATA, cases[i].want);
  }

  /* Deep nesting must be refused, not recursed into. */
  char deep[4200];
  size_t k = 0;
  deep[k++] = '{';
  deep[k++] = '"';
  deep[k++] = 'a';
  deep[k++] = '"';
  deep[k++] = ':';
  for (int i = 0; i < 2000; i++)
    deep[k++] = '[';
  for (int i = 0; i < 2000; i++)
    deep[k++] = ']';
  deep[k++] = '}';
  deep[k] = 0;
  path_in(p, sizeof p, "deep");
  make(p, deep, 0);
  expect_error(p, GP_ERR_DATA, "nested too deeply");

  const char *good = T("[0,8]");
  path_in(p, sizeof p, "truncated_header");
  make_raw(p, strlen(good) + 100, good, 0);
  expect_error(p, GP_ERR_DATA, "past the end");
  path_in(p, sizeof p, "huge_header");
  make_raw(p, (uint64_t)1 << 40, good, 8);
  expect_error(p, GP_ERR_DATA, "100 MB");
  path_in(p, sizeof p, "max_header");
  make_raw(p, UINT64_MAX, good, 8);
  expect_error(p, GP_ERR_DATA, "100 MB");
  path_in(p, sizeof p, "short_file");
  write_bytes(p, "\x10\0\0", 3);
  expect_error(p, GP_ERR_DATA, "too short");
  path_in(p, sizeof p, "empty_file");
  write_bytes(p, "", 0);
  expect_error(p, GP_ERR_DATA, "too short");
  path_in(p, sizeof p, "zero_header");
  make_raw(p, 0, "", 0);
  expect_error(p, GP_ERR_DATA, NULL);
  path_in(p, sizeof p, "truncated_data");
  make(p, good, 7);
  expect_error(p, GP_ERR_DATA, "outside");

  path_in(p, sizeof p, "missing.safetensors");
  expect_error(p, GP_ERR_IO, "cannot open");
  expect_error(dir, GP_ERR_IO, "not a regular file");

  /* Valid corner cases: gaps between tensors and trailing padding spaces are accepted. */
  path_in(p, sizeof p, "gap");
  make(p,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}   ",
       6);
  gp_st_file *f = NULL;
  CHECK(gp_st_read(p, &f) == GP_OK, "gap file reads");
  if (f) {
    const gp_st_entry *e = gp_st_find(f, "a");
    CHECK(e && ((const uint8_t *)gp_st_data(f, e))[0] == 4, "data at offset 4");
    gp_st_free(f);
  }
}

/* Every truncation and many random byte changes of a valid file: errors, never crashes
 * (run under ASan to make that meaningful). */
static void test_mutations(void) {
  char src[512], p[512];
  path_in(src, sizeof src, "mut_src.safetensors");
  float w[4] = {1, 2, 3, 4};
  gp_shape s = gp_shape_of(2, (int64_t[]){2, 2});
  gp_st_writer *wr = gp_st_writer_new();
  gp_st_add(wr, "w", GP_F32, &s, w);
  gp_st_add(wr, "v", GP_F32, &s, w);
  gp_st_meta_set(wr, "k", "v");
  CHECK(gp_st_write(wr, src) == GP_OK, "write mutation source");
  gp_st_writer_free(wr);
  size_t n = 0;
  unsigned char *raw = read_bytes(src, &n);
  if (!raw) return;
  path_in(p, sizeof p, "mut");
  for (size_t len = 0; len < n; len++) {
    write_bytes(p, raw, len);
    gp_st_file *f = NULL;
    gp_error_clear();
    gp_status st = gp_st_read(p, &f);
    CHECK(st == GP_ERR_DATA, "truncated to %zu bytes: %s", len, gp_status_name(st));
    CHECK(strstr(gp_error_message(), p) != NULL, "truncation message names the file");
    gp_st_free(f);
  }
  unsigned char *m = malloc(n);
  uint64_t x = 88172645463325252ULL;
  int ok = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(m, raw, n);
    for (int j = 0; j < 1 + it % 3; j++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      m[x % n] = (unsigned char)(x >> 32);
    }
    write_bytes(p, m, n);
    gp_st_file *f = NULL;
    gp_error_clear();
    gp_status st = gp_st_read(p, &f);
    CHECK(st == GP_OK || st == GP_ERR_DATA, "mutation %d: %s", it, gp_status_name(st));
    if (st != GP_OK) CHECK(strstr(gp_error_message(), p) != NULL, "mutation message names file");
    ok += st == GP_OK;
    gp_st_free(f);
  }
  CHECK(ok < 3000, "no mutation was detected");
  free(m);
  free(raw);
}

/* The temporary files a signal handler removes: the recorded ones, until they are released;
 * past the slots, names are not recorded (and nothing else is removed). */
static void test_temp_registry(void) {
  char a[600], b[600], extra[GP_IO_TEMP_SLOTS + 1][600];
  snprintf(a, sizeof a, "%s/a.tmp.1", dir);
  snprintf(b, sizeof b, "%s/b.tmp.1", dir);
  FILE *f = fopen(a, "w");
  CHECK(f && fclose(f) == 0, "create %s", a);
  f = fopen(b, "w");
  CHECK(f && fclose(f) == 0, "create %s", b);
  gp_io_temp_claim(a);
  gp_io_temp_claim(b);
  gp_io_temp_release(b);
  gp_io_temp_remove_all();
  CHECK(access(a, F_OK) != 0, "a recorded temporary file was not removed");
  CHECK(access(b, F_OK) == 0, "a released temporary file was removed");
  gp_io_temp_release(a);
  for (int i = 0; i <= GP_IO_TEMP_SLOTS; i++) {
    snprintf(extra[i], sizeof extra[i], "%s/x%d.tmp.1", dir, i);
    f = fopen(extra[i], "w");
    CHECK(f && fclose(f) == 0, "create %s", extra[i]);
    gp_io_temp_claim(extra[i]);
  }
  gp_io_temp_remove_all();
  for (int i = 0; i <= GP_IO_TEMP_SLOTS; i++) {
    CHECK((access(extra[i], F_OK) != 0) == (i < GP_IO_TEMP_SLOTS), "slot %d", i);
    gp_io_temp_release(extra[i]);
  }
  CHECK(access(b, F_OK) == 0, "an unrecorded file was removed");
  /* released slots are free again */
  gp_io_temp_claim(b);
  gp_io_temp_remove_all();
  CHECK(access(b, F_OK) != 0, "a slot was not freed by its release");
  gp_io_temp_release(b);
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gp_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip();
  if (argc > 1) test_fixture(argv[1]);
  test_malformed();
  test_mutations();
  test_temp_registry();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
