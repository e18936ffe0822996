/* CIFAR data on generated files: the tar reader (ustar prefix, GNU long names, pax headers,
 * base-256 sizes, damaged archives), CIFAR decoding from .tar.gz (two gzip members) and from
 * a directory of .bin files, record errors, pad-crop-flip geometry and determinism, and
 * gp_loader_open end to end. With an argument "python3-path", it checks instead that an
 * archive written by Python's tarfile (PAX format) reads the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/augment.h"
#include "data/cifar.h"
#include "data/loader.h"
#include "data/tar.h"
#include "tar_fixture.h"
#include "tests/support/check.h"

static int failures, passes;
static char root[256];

#define REC10 (1 + GP_CIFAR_PIXELS)
#define N_PER 7 /* records per generated CIFAR-10 batch file */

static uint8_t pixel(int64_t i, int k) {
  return (uint8_t)(i * 7 + k * 13 + (k >> 10) * 5);
}

/* One CIFAR-10 batch: N_PER records from global index first. */
static void batch(buf *out, int64_t first) {
  uint8_t r[REC10];
  for (int64_t i = first; i < first + N_PER; i++) {
    r[0] = (uint8_t)(i % 10);
    for (int k = 0; k < GP_CIFAR_PIXELS; k++)
      r[1 + k] = pixel(i, k);
    put(out, r, sizeof r);
  }
}

/* A cifar-10-binary archive using every header kind, files out of order. */
static void cifar10_tar(buf *t) {
  buf d = {0};
  header(t, "cifar-10-batches-bin/", 0, '5', 0, 0);
  /* pax global header (skipped), then a pax 'x' header naming data_batch_2 with its size. */
  buf g = {0};
  pax_record(&g, "comment", "global");
  header(t, "pax_global_header", g.n, 'g', 0, 0);
  put(t, g.p, g.n);
  pad512(t);
  batch(&d, 1 * N_PER);
  buf x = {0};
  pax_record(&x, "path", "cifar-10-batches-bin/data_batch_2.bin");
  pax_record(&x, "mtime", "1400000000.5");
  char sz[32];
  snprintf(sz, sizeof sz, "%zu", d.n);
  pax_record(&x, "size", sz);
  header(t, "PaxHeaders/data_batch_2.bin", x.n, 'x', 0, 0);
  put(t, x.p, x.n);
  pad512(t);
  header(t, "wrong-name", 3, '0', 0, 0); /* the pax size overrides this size */
  put(t, d.p, d.n);
  pad512(t);
  d.n = 0;
  batch(&d, 0);
  member(t, "cifar-10-batches-bin/data_batch_1.bin", d.p, d.n);
  /* A GNU long name for data_batch_3 (any long path would do). */
  const char *ln = "cifar-10-batches-bin/data_batch_3.bin";
  header(t, "././@LongLink", strlen(ln) + 1, 'L', 0, 0);
  put(t, ln, strlen(ln) + 1);
  pad512(t);
  d.n = 0;
  batch(&d, 2 * N_PER);
  header(t, "truncated-name", d.n, '0', 0, 0);
  put(t, d.p, d.n);
  pad512(t);
  /* ustar prefix + name, and a base-256 size. */
  d.n = 0;
  batch(&d, 3 * N_PER);
  header(t, "cifar-10-batches-bin/data_batch_4.bin", d.n, '0', 20, 1);
  put(t, d.p, d.n);
  pad512(t);
  d.n = 0;
  batch(&d, 4 * N_PER);
  member(t, "cifar-10-batches-bin/data_batch_5.bin", d.p, d.n);
  member(t, "cifar-10-batches-bin/batches.meta.txt", "airplane\n", 9);
  header(t, "cifar-10-batches-bin/link", 0, '2', 0, 0);
  d.n = 0;
  batch(&d, 100);
  member(t, "cifar-10-batches-bin/test_batch.bin", d.p, d.n);
  uint8_t z[1024] = {0};
  put(t, z, sizeof z);
  free(d.p);
  free(g.p);
  free(x.p);
}

static gp_data_spec spec10(const char *dir) {
  gp_data_spec s;
  memset(&s, 0, sizeof s);
  s.dataset = GP_DATA_CIFAR10;
  snprintf(s.path, sizeof s.path, "%s", dir);
  return s;
}

/* Every sample of a split against the generator: x = p / 255 (no normalization). */
static int check_split(gp_loader *l, int64_t first, int64_t n, int classes) {
  float *x = malloc(sizeof(float) * GP_CIFAR_PIXELS * 4);
  int32_t y[4];
  int64_t got = 0, seen = 0;
  int bad = 0;
  do {
    if (gp_loader_next(l, 4, x, y, &got) != GP_OK) {
      bad++;
      break;
    }
    for (int64_t r = 0; r < got; r++, seen++) {
      int64_t i = first + seen;
      if (y[r] != (int32_t)(i % classes)) bad++;
      for (int k = 0; k < GP_CIFAR_PIXELS; k++)
        if (x[r * GP_CIFAR_PIXELS + k] != (float)pixel(i, k) / 255.0f) bad++;
    }
  } while (got > 0);
  free(x);
  return bad == 0 && seen == n;
}

static void test_tar_reader(const char *tgz) {
  gp_tar *t = NULL;
  CHECK(gp_tar_open(tgz, &t) == GP_OK, "open %s", tgz);
  if (!t) return;
  const char *want[] = {
      "cifar-10-batches-bin/data_batch_2.bin", "cifar-10-batches-bin/data_batch_1.bin",
      "cifar-10-batches-bin/data_batch_3.bin", "cifar-10-batches-bin/data_batch_4.bin",
      "cifar-10-batches-bin/data_batch_5.bin", "cifar-10-batches-bin/batches.meta.txt",
      "cifar-10-batches-bin/test_batch.bin"};
  for (int i = 0; i < 7; i++) {
    const char *name = NULL;
    uint64_t size = 0;
    CHECK(gp_tar_next(t, &name, &size) == GP_OK, "next %d", i);
    CHECK(name && strcmp(name, want[i]) == 0, "member %d is %s, want %s", i, name ? name : "-",
          want[i]);
    uint64_t want_size = i == 5 ? 9 : (uint64_t)N_PER * REC10;
    CHECK(size == want_size, "member %d size %llu", i, (unsigned long long)size);
    if (i == 5) {
      char txt[16] = {0};
      size_t got = 0;
      CHECK(gp_tar_read(t, txt, sizeof txt, &got) == GP_OK && got == 9 &&
                memcmp(txt, "airplane\n", 9) == 0,
            "meta text");
    }
  }
  const char *name = "x";
  uint64_t size = 1;
  CHECK(gp_tar_next(t, &name, &size) == GP_OK && name == NULL, "end of archive");
  gp_tar_close(t);
}

static void expect_err(gp_status st, const char *a, const char *b, const char *what) {
  const char *m = gp_error_message();
  if (getenv("GP_TEST_VERBOSE")) printf("%s: %s\n", what, m);
  CHECK(st == GP_ERR_DATA && strstr(m, a) && (!b || strstr(m, b)), "%s: want '%s' and '%s'", what,
        a, b ? b : "");
}

/* A pax header cut short names the member it heads (by number: its name is in the cut
 * header), not the member before it, whose name the message once gave. */
static void test_truncated_pax(void) {
  buf t = {0}, rec = {0};
  member(&t, "first.bin", "123456789", 9);
  pax_record(&rec, "path", "second-with-a-long-name.bin");
  header(&t, "././@PaxHeader", rec.n, 'x', 0, 0);
  put(&t, rec.p, rec.n / 2); /* the archive ends inside the pax records */
  char p[600];
  snprintf(p, sizeof p, "%s/cut_pax.tar", root);
  write_file(p, t.p, t.n);
  gp_tar *tr = NULL;
  const char *name = NULL;
  uint64_t size = 0;
  CHECK(gp_tar_open(p, &tr) == GP_OK && gp_tar_next(tr, &name, &size) == GP_OK && name &&
            strcmp(name, "first.bin") == 0,
        "the member before the cut pax header");
  gp_error_clear();
  gp_status st = tr ? gp_tar_next(tr, &name, &size) : GP_ERR_DATA;
  const char *m = gp_error_message();
  CHECK(st == GP_ERR_DATA && strstr(m, "member 1 at offset 1024: truncated extended header") &&
            !strstr(m, "first.bin"),
        "a cut pax header: '%s'", m);
  gp_tar_close(tr);
  free(t.p);
  free(rec.p);
}

static void test_archive_errors(const uint8_t *tar, size_t n) {
  char dir[400], p[600];
  gp_loader *l = NULL;
  /* Bad checksum: change one byte of data_batch_1's header (the fourth header block on). */
  snprintf(dir, sizeof dir, "%s/badsum", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar", dir);
  uint8_t *c = malloc(n);
  memcpy(c, tar, n);
  c[0] = 'X'; /* the directory member, member 0 at offset 0 */
  write_file(p, c, n);
  gp_data_spec s = spec10(dir);
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "bad tar header checksum",
             "member 0 at offset 0", "bad checksum");
  /* The intact archive as a plain .tar reads the same as the .tar.gz. */
  snprintf(dir, sizeof dir, "%s/plain", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar", dir);
  write_file(p, tar, n);
  s = spec10(dir);
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open plain tar");
  if (l) CHECK(check_split(l, 100, N_PER, 10), "plain tar test samples");
  gp_loader_free(l);
  l = NULL;
  /* Truncated member: cut inside test_batch.bin, the last member. */
  snprintf(dir, sizeof dir, "%s/trunc", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar", dir);
  write_file(p, tar, n - 1024 - 3000);
  s = spec10(dir);
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l),
             "(cifar-10-batches-bin/test_batch.bin)",
             "bytes run past the end of the archive (a truncated file)", "truncated member");
  CHECK(strstr(gp_error_message(), "cifar-10-binary.tar"), "names the archive");
  /* Truncated gzip: the tail of the compressed file cut off. */
  snprintf(dir, sizeof dir, "%s/truncgz", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar.gz", dir);
  write_gz2(p, tar, n);
  struct stat sb;
  stat(p, &sb);
  CHECK(truncate(p, sb.st_size - 12) == 0, "truncate");
  s = spec10(dir);
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "cifar-10-binary.tar.gz", NULL,
             "gzip trailer cut off");
  CHECK(truncate(p, sb.st_size / 2) == 0, "truncate");
  /* ... naming the member being read (it named the archive alone) */
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "cifar-10-binary.tar.gz: member ",
             "gzip", "gzip cut in half");
  /* An empty member data_batch_4.bin, and a 0-byte archive. */
  snprintf(dir, sizeof dir, "%s/empty_member", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar", dir);
  buf t = {0}, d = {0};
  for (int f = 0; f < 5; f++) {
    char name[64];
    d.n = 0;
    if (f != 3) batch(&d, f * N_PER);
    snprintf(name, sizeof name, "cifar-10-batches-bin/data_batch_%d.bin", f + 1);
    member(&t, name, d.p, d.n);
  }
  write_file(p, t.p, t.n);
  s = spec10(dir);
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "data_batch_4.bin",
             "holds no samples", "empty member");
  write_file(p, "", 0);
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "cifar-10-binary.tar", "empty file",
             "0-byte archive");
  /* A file of a split's name in another folder, first, is not the split's (it was read as
   * data_batch_1 and the real one skipped); a second copy of a member is refused. */
  for (int dup = 0; dup < 2; dup++) {
    snprintf(dir, sizeof dir, "%s/%s", root, dup ? "dup_member" : "foreign_member");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/cifar-10-binary.tar", dir);
    t.n = 0;
    d.n = 0;
    batch(&d, 7 * N_PER); /* samples no split has */
    member(&t, dup ? "cifar-10-batches-bin/test_batch.bin" : "other/test_batch.bin", d.p, d.n);
    for (int f = 0; f < 6; f++) {
      char name[64];
      d.n = 0;
      batch(&d, f * N_PER);
      snprintf(name, sizeof name,
               f < 5 ? "cifar-10-batches-bin/data_batch_%d.bin"
                     : "./cifar-10-batches-bin/test_batch.bin",
               f + 1);
      member(&t, name, d.p, d.n);
    }
    write_file(p, t.p, t.n);
    s = spec10(dir);
    if (dup) {
      expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "test_batch.bin",
                 "in the archive twice", "a member twice");
      continue;
    }
    CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open, a foreign member first");
    if (l) CHECK(check_split(l, 5 * N_PER, N_PER, 10), "the test split from its own member");
    gp_loader_free(l);
    l = NULL;
  }
  free(t.p);
  free(d.p);
  free(c);
}

/* dir with the five training .bin files (no test_batch.bin); d keeps its buffer. */
static void write_train_bins(const char *dir, buf *d) {
  char p[600];
  mkdir(dir, 0755);
  for (int f = 0; f < 5; f++) {
    d->n = 0;
    batch(d, f * N_PER);
    snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f + 1);
    write_file(p, d->p, d->n);
  }
}

/* A folder with some of the .bin files: the missing or bad one is named (it said that neither
 * the archive nor the .bin files were there). */
static void test_bin_missing(void) {
  char dir[400], p[600];
  snprintf(dir, sizeof dir, "%s/bins_missing", root);
  buf d = {0};
  write_train_bins(dir, &d);
  free(d.p);
  gp_data_spec s = spec10(dir);
  gp_loader *l = NULL;
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "test_batch.bin", "cannot open",
             "missing test_batch.bin");
  snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
  remove(p);
  mkdir(p, 0755);
  gp_status st = gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l);
  CHECK(st != GP_OK && strstr(gp_error_message(), "data_batch_1.bin") &&
            strstr(gp_error_message(), "directory"),
        "data_batch_1.bin a folder: %s", gp_error_message());
}

static void test_bin_dir(void) {
  char dir[400], p[600];
  snprintf(dir, sizeof dir, "%s/bins", root);
  buf d = {0};
  write_train_bins(dir, &d);
  d.n = 0;
  batch(&d, 100);
  snprintf(p, sizeof p, "%s/test_batch.bin", dir);
  write_file(p, d.p, d.n - 10); /* not a multiple of the record size */
  gp_data_spec s = spec10(dir);
  s.train_limit = 10;
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 3, NULL, &l) == GP_OK, "open bin dir");
  CHECK(l && gp_loader_samples(l) == 10, "train_limit 10");
  gp_loader_free(l);
  l = NULL;
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "test_batch.bin", "not a multiple",
             "record size");
  /* A label out of range in record 2 of batch 3. */
  d.n = 0;
  batch(&d, 2 * N_PER);
  d.p[2 * REC10] = 10;
  snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
  write_file(p, d.p, d.n);
  s.train_limit = 0;
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "data_batch_3.bin", "record 2",
             "label out of range");
  CHECK(strstr(gp_error_message(), "label 10"), "label value in message");
  /* An empty file is refused naming it (an empty data_batch_4.bin trained on 4/5 of the data,
   * an empty test_batch.bin evaluated 0 samples). */
  snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
  d.n = 0;
  batch(&d, 2 * N_PER);
  write_file(p, d.p, d.n);
  snprintf(p, sizeof p, "%s/data_batch_4.bin", dir);
  write_file(p, "", 0);
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "data_batch_4.bin",
             "holds no samples", "empty train file");
  snprintf(p, sizeof p, "%s/test_batch.bin", dir);
  write_file(p, "", 0);
  expect_err(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l), "test_batch.bin", "holds no samples",
             "empty test file");
  /* CIFAR-100: coarse and fine labels, the fine one used; in the archive's folder. */
  snprintf(dir, sizeof dir, "%s/c100", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/c100/cifar-100-binary", root);
  mkdir(p, 0755);
  for (int split = 0; split < 2; split++) {
    d.n = 0;
    for (int64_t i = 0; i < 9; i++) {
      uint8_t r[2 + GP_CIFAR_PIXELS];
      r[0] = (uint8_t)(i % 20);
      r[1] = (uint8_t)((i + 90 * split) % 100);
      for (int k = 0; k < GP_CIFAR_PIXELS; k++)
        r[2 + k] = pixel(i + 90 * split, k);
      put(&d, r, sizeof r);
    }
    snprintf(p, sizeof p, "%s/c100/cifar-100-binary/%s", root, split ? "test.bin" : "train.bin");
    write_file(p, d.p, d.n);
  }
  s = spec10(dir);
  s.dataset = GP_DATA_CIFAR100;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open cifar100");
  if (l) {
    CHECK(gp_loader_classes(l) == 100, "100 classes");
    CHECK(check_split(l, 90, 9, 100), "cifar100 test samples");
    gp_loader_free(l);
  }
  s.coarse_labels = 1; /* the 20 superclasses: the first label byte */
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open cifar100 coarse");
  if (l) {
    float *x = malloc(sizeof(float) * GP_CIFAR_PIXELS * 9);
    int32_t y[9];
    int64_t got = 0;
    int ok = gp_loader_classes(l) == 20 && gp_loader_next(l, 9, x, y, &got) == GP_OK && got == 9;
    for (int i = 0; ok && i < 9; i++)
      ok = y[i] == i % 20 && x[i * GP_CIFAR_PIXELS + 5] == (float)pixel(i + 90, 5) / 255.0f;
    CHECK(ok, "cifar100 coarse labels");
    free(x);
    gp_loader_free(l);
  }
  s.dataset = GP_DATA_CIFAR10;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_ERR_SPEC &&
            strstr(gp_error_message(), "coarse"),
        "coarse labels on CIFAR-10 refused");
  /* Nothing there, and no path. */
  s = spec10(root);
  expect_err(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l), "data.path", "cifar-10-binary.tar.gz",
             "nothing found");
  s.path[0] = 0;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l) == GP_ERR_SPEC &&
            strstr(gp_error_message(), "data.path"),
        "empty path");
  free(d.p);
}

static void test_loader_tgz(const char *dir) {
  gp_data_spec s = spec10(dir);
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open test split");
  if (l) {
    gp_shape sh = gp_loader_sample_shape(l);
    CHECK(sh.ndim == 3 && sh.d[0] == 3 && sh.d[1] == 32 && sh.d[2] == 32, "shape");
    CHECK(gp_loader_classes(l) == 10 && gp_loader_samples(l) == N_PER, "test counts");
    CHECK(check_split(l, 100, N_PER, 10), "test samples byte for byte");
    gp_loader_free(l);
  }
  /* Train, in batch order 1..5 whatever the archive order: read it as a test split would by
   * checking the set of sample ids seen in one shuffled epoch. */
  s.test_limit = 3;
  l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK && gp_loader_samples(l) == 3,
        "test_limit");
  gp_loader_free(l);
  l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 5, NULL, &l) == GP_OK, "open train split");
  if (!l) return;
  CHECK(gp_loader_samples(l) == 5 * N_PER, "train count");
  int64_t n = 5 * N_PER;
  float *x = malloc(sizeof(float) * GP_CIFAR_PIXELS * (size_t)n);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  int64_t got = 0;
  CHECK(gp_loader_next(l, n, x, y, &got) == GP_OK && got == n, "whole epoch");
  int seen[5 * N_PER] = {0}, bad = 0;
  for (int64_t r = 0; r < got; r++) {
    /* Identify the sample by its pixels: pixel(i, 0) = 7 i. */
    int64_t i = -1;
    for (int64_t c = 0; c < n; c++)
      if ((uint8_t)(x[r * GP_CIFAR_PIXELS] * 255.0f + 0.5f) == pixel(c, 0) &&
          (uint8_t)(x[r * GP_CIFAR_PIXELS + 1] * 255.0f + 0.5f) == pixel(c, 1))
        i = c;
    if (i < 0 || seen[i]++ || y[r] != i % 10) bad++;
    for (int k = 0; i >= 0 && k < GP_CIFAR_PIXELS; k++)
      if (x[r * GP_CIFAR_PIXELS + k] != (float)pixel(i, k) / 255.0f) bad++;
  }
  CHECK(bad == 0, "train epoch is a permutation of the 35 samples (%d bad)", bad);
  free(x);
  free(y);
  gp_loader_free(l);
}

static void test_augment(const char *dir) {
  uint8_t src[GP_CIFAR_PIXELS], dst[GP_CIFAR_PIXELS];
  for (int k = 0; k < GP_CIFAR_PIXELS; k++)
    src[k] = (uint8_t)(k % 251 + 1); /* never 0, so padding shows */
  int bad = 0;
  for (int dy = 0; dy <= 8; dy += 3)
    for (int dx = 0; dx <= 8; dx += 2)
      for (int flip = 0; flip < 2; flip++) {
        gp_crop c = {dy, dx, flip};
        gp_augment_crop(src, dst, 3, 32, 32, 4, c);
        for (int ch = 0; ch < 3; ch++)
          for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
              int wx = flip ? 31 - x : x;
              int sy = y + dy - 4, sx = wx + dx - 4; /* padded (y+dy, wx+dx) */
              int want =
                  sy < 0 || sy >= 32 || sx < 0 || sx >= 32 ? 0 : src[ch * 1024 + sy * 32 + sx];
              if (dst[ch * 1024 + y * 32 + x] != want) bad++;
            }
      }
  CHECK(bad == 0, "crop windows (%d wrong pixels)", bad);
  int differ = 0, flips = 0, same = 1;
  for (int64_t i = 0; i < 200; i++) {
    gp_crop a = gp_augment_draw(9, 2, i, 4), b = gp_augment_draw(9, 2, i, 4);
    gp_crop e = gp_augment_draw(9, 3, i, 4);
    if (a.dy != b.dy || a.dx != b.dx || a.flip != b.flip) same = 0;
    if (a.dy < 0 || a.dy > 8 || a.dx < 0 || a.dx > 8) same = 0;
    differ += a.dy != e.dy || a.dx != e.dx || a.flip != e.flip;
    flips += a.flip;
  }
  CHECK(same, "draws repeat for (seed, epoch, sample) and stay in range");
  CHECK(differ > 100 && flips > 60 && flips < 140, "draws vary (%d differ, %d flips)", differ,
        flips);
  /* Through the loader: a batch after seek equals the batch of an uninterrupted run, and the
   * augmented epoch differs from the plain one. */
  gp_data_spec s = spec10(dir);
  s.augment = 1;
  s.n_norm = 3;
  for (int c = 0; c < 3; c++) {
    s.mean[c] = 0.5f;
    s.std[c] = 0.25f;
  }
  gp_loader *a = NULL, *b = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 4, NULL, &a) == GP_OK, "open a");
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 4, NULL, &b) == GP_OK, "open b");
  if (!a || !b) return;
  size_t sz = GP_CIFAR_PIXELS * 8;
  float *xa = malloc(sizeof(float) * sz), *xb = malloc(sizeof(float) * sz);
  int32_t ya[8], yb[8];
  int64_t got = 0, e = 0, i = 0;
  for (int k = 0; k < 6; k++)
    gp_loader_next(a, 8, xa, ya, &got);
  gp_loader_tell(a, &e, &i);
  gp_loader_next(a, 8, xa, ya, &got);
  CHECK(gp_loader_seek(b, e, i) == GP_OK, "seek");
  gp_loader_next(b, 8, xb, yb, &got);
  CHECK(memcmp(xa, xb, sizeof(float) * sz) == 0 && memcmp(ya, yb, sizeof ya) == 0,
        "resumed augmented batch (epoch %lld index %lld) is exact", (long long)e, (long long)i);
  int pad_seen = 0;
  for (size_t k = 0; k < sz; k++)
    pad_seen += xa[k] == -2.0f; /* (0 - 0.5) / 0.25: a padded pixel */
  CHECK(pad_seen > 0, "some padding is visible in 8 augmented samples");
  free(xa);
  free(xb);
  gp_loader_free(a);
  gp_loader_free(b);
}

static int python_interop(const char *python) {
  char dir[400], cmd[2000];
  snprintf(dir, sizeof dir, "%s/py", root);
  mkdir(dir, 0755);
  snprintf(cmd, sizeof cmd,
           "%s -c \"import tarfile,io,sys\n"
           "def px(i,k): return (i*7+k*13+(k>>10)*5)&255\n"
           "def batch(first): return b''.join(bytes([i%%10])+bytes(px(i,k) for k in range(3072))"
           " for i in range(first,first+%d))\n"
           "t=tarfile.open(sys.argv[1],'w:gz',format=tarfile.PAX_FORMAT)\n"
           "for n,f in [('data_batch_%%d.bin'%%(j+1),j*%d) for j in "
           "range(5)]+[('test_batch.bin',100)]:\n"
           "  d=batch(f); ti=tarfile.TarInfo('cifar-10-batches-bin/'+n); ti.size=len(d);"
           " ti.mtime=1400000000.25; t.addfile(ti,io.BytesIO(d))\n"
           "t.close()\" %s/cifar-10-binary.tar.gz",
           python, N_PER, N_PER, dir);
  if (system(cmd) != 0) {
    printf("FAIL: python3 could not write the archive\n");
    return 1;
  }
  gp_data_spec s = spec10(dir);
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open python archive");
  if (l) CHECK(check_split(l, 100, N_PER, 10), "python archive test samples");
  gp_loader_free(l);
  l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l) == GP_OK &&
            gp_loader_samples(l) == 5 * N_PER,
        "python archive train split");
  gp_loader_free(l);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}

static void remove_root(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/gp_cifar_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  if (argc > 1) {
    int rc = access(argv[1], X_OK) != 0 ? 77 : python_interop(argv[1]);
    remove_root();
    return rc;
  }
  buf t = {0};
  cifar10_tar(&t);
  char dir[400], p[600];
  snprintf(dir, sizeof dir, "%s/tgz", root);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/cifar-10-binary.tar.gz", dir);
  write_gz2(p, t.p, t.n);
  test_tar_reader(p);
  test_loader_tgz(dir);
  test_archive_errors(t.p, t.n);
  test_truncated_pax();
  test_bin_dir();
  test_bin_missing();
  test_augment(dir);
  free(t.p);
  remove_root();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
