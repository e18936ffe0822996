/* Data loaders on small generated MNIST-style sets: decoding and normalization, damaged files,
 * per-epoch shuffling, exact resume with tell/seek, evaluation batches, limits, and the
 * synthetic source. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/loader.h"
#include "idx_fixture.h"
#include "tests/support/check.h"

static int failures, passes;

#define NTRAIN 50
#define NTEST 23
#define PIX 784

static char root[256];

/* A data set directory: train files gzipped, t10k files plain (both are accepted). */
static const char *make_set(const char *name) {
  static char d[512];
  char p[700];
  snprintf(d, sizeof d, "%s/%s", root, name);
  mkdir(d, 0755);
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
  idx_write_images(p, 1, NTRAIN, 28);
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", d);
  idx_write_labels(p, 2, NTRAIN, 10);
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", d);
  idx_write_images(p, 0, NTEST, 28);
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", d);
  idx_write_labels(p, 0, NTEST, 10);
  return d;
}

static gp_data_spec spec_for(const char *dir, int norm) {
  gp_data_spec s;
  memset(&s, 0, sizeof s);
  s.dataset = GP_DATA_FASHION_MNIST;
  snprintf(s.path, sizeof s.path, "%s", dir);
  if (norm) {
    s.n_norm = 1;
    s.mean[0] = 0.2860f;
    s.std[0] = 0.3530f;
  }
  return s;
}

/* Which generated sample a batch row is: pixel 0 holds the index (all sets are < 256). */
static int sample_id(const float *x) {
  return (int)lrintf(x[0] * 255.0f);
}

static void test_decode(const char *dir) {
  gp_data_spec s = spec_for(dir, 1);
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open test split");
  if (!l) return;
  gp_shape sh = gp_loader_sample_shape(l);
  CHECK(sh.ndim == 3 && sh.d[0] == 1 && sh.d[1] == 28 && sh.d[2] == 28, "sample shape");
  CHECK(gp_loader_samples(l) == NTEST && gp_loader_classes(l) == 10, "counts");
  float *x = malloc(sizeof(float) * PIX * 10);
  int32_t y[10];
  int64_t got = -1;
  int bad = 0, seen = 0;
  int64_t sizes[5];
  for (int b = 0; b < 5; b++) {
    CHECK(gp_loader_next(l, 10, x, y, &got) == GP_OK, "next");
    sizes[b] = got;
    if (got == 0) seen = 0; /* the next pass starts again at sample 0 */
    for (int64_t r = 0; r < got; r++, seen++) {
      if (y[r] != seen % 10) bad++;
      for (int k = 0; k < PIX; k++) {
        float want = ((float)idx_pixel((uint32_t)seen, (uint32_t)k) / 255.0f - 0.2860f) / 0.3530f;
        if (x[r * PIX + k] != want) bad++;
      }
    }
  }
  /* 23 samples in batches of 10: 10, 10, 3, then 0 (end of the pass), then a new pass. */
  CHECK(sizes[0] == 10 && sizes[1] == 10 && sizes[2] == 3 && sizes[3] == 0 && sizes[4] == 10,
        "test batch sizes %lld %lld %lld %lld %lld", (long long)sizes[0], (long long)sizes[1],
        (long long)sizes[2], (long long)sizes[3], (long long)sizes[4]);
  CHECK(bad == 0, "%d wrong values or labels", bad);
  /* Seek back to the start: the same first batch. */
  CHECK(gp_loader_seek(l, 0, 0) == GP_OK, "seek");
  CHECK(gp_loader_next(l, 4, x, y, &got) == GP_OK && got == 4 && y[3] == 3, "after seek");
  gp_loader_free(l);

  /* Without normalization: pixel / 255. */
  s = spec_for(dir, 0);
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK, "open unnormalized");
  if (l) {
    CHECK(gp_loader_next(l, 3, x, y, &got) == GP_OK && got == 3, "next");
    bad = 0;
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < PIX; k++)
        bad += x[r * PIX + k] != (float)idx_pixel((uint32_t)r, (uint32_t)k) / 255.0f;
    CHECK(bad == 0, "%d wrong unnormalized values", bad);
    gp_loader_free(l);
  }
  free(x);
}

/* Sample ids of the next n_batches train batches of size b, appended to ids. */
static void take(gp_loader *l, int n_batches, int b, int *ids) {
  float *x = malloc(sizeof(float) * PIX * (size_t)b);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)b);
  for (int i = 0; i < n_batches; i++) {
    int64_t got = 0;
    CHECK(gp_loader_next(l, b, x, y, &got) == GP_OK && got == b, "train batch %d", i);
    for (int r = 0; r < b; r++) {
      ids[i * b + r] = sample_id(x + (size_t)r * PIX);
      CHECK(y[r] == ids[i * b + r] % 10, "label follows its image");
    }
  }
  free(x);
  free(y);
}

static int is_perm(const int *ids, int n) {
  int seen[NTRAIN] = {0};
  for (int i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= NTRAIN || seen[ids[i]]) return 0;
    seen[ids[i]] = 1;
  }
  return 1;
}

static gp_loader *open_train(const char *dir, uint64_t seed) {
  gp_data_spec s = spec_for(dir, 0);
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, seed, NULL, &l) == GP_OK, "open train");
  return l;
}

static void test_shuffle(const char *dir) {
  /* Batches of 10 cover an epoch of 50 exactly. */
  int a[150], b[150], c[50];
  gp_loader *l = open_train(dir, 7);
  if (!l) return;
  take(l, 15, 10, a);
  gp_loader_free(l);
  CHECK(is_perm(a, 50) && is_perm(a + 50, 50) && is_perm(a + 100, 50), "epochs are permutations");
  CHECK(memcmp(a, a + 50, sizeof(int) * 50) != 0 && memcmp(a + 50, a + 100, sizeof(int) * 50),
        "epochs differ");
  int ordered = 1;
  for (int i = 0; i < 50; i++)
    ordered &= a[i] == i;
  CHECK(!ordered, "epoch 0 is shuffled");
  l = open_train(dir, 7);
  take(l, 15, 10, b);
  gp_loader_free(l);
  CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same order");
  l = open_train(dir, 8);
  take(l, 5, 10, c);
  gp_loader_free(l);
  CHECK(memcmp(a, c, sizeof c) != 0, "another seed, another order");

  /* Batches of 8: 6 per epoch, the last 2 samples dropped; the 7th batch opens epoch 1,
   * which is the same permutation the batches of 10 saw. */
  int d[56];
  l = open_train(dir, 7);
  take(l, 6, 8, d);
  int64_t e, i;
  gp_loader_tell(l, &e, &i);
  CHECK(e == 0 && i == 48, "tell after 6 batches: %lld %lld", (long long)e, (long long)i);
  take(l, 1, 8, d + 48);
  gp_loader_tell(l, &e, &i);
  CHECK(e == 1 && i == 8, "tell after the epoch rolled: %lld %lld", (long long)e, (long long)i);
  CHECK(memcmp(d, a, sizeof(int) * 48) == 0, "batches of 8 follow the same permutation");
  CHECK(memcmp(d + 48, a + 50, sizeof(int) * 8) == 0, "epoch 1 starts its permutation");
  gp_loader_free(l);

  /* Batches of 17: 16 samples are left after two batches, one short of a batch. */
  int f[51];
  l = open_train(dir, 7);
  take(l, 2, 17, f);
  gp_loader_tell(l, &e, &i);
  CHECK(e == 0 && i == 34, "tell after 2 of 17: %lld %lld", (long long)e, (long long)i);
  take(l, 1, 17, f + 34);
  gp_loader_tell(l, &e, &i);
  CHECK(e == 1 && i == 17, "a batch never spans epochs: %lld %lld", (long long)e, (long long)i);
  CHECK(memcmp(f + 34, a + 50, sizeof(int) * 17) == 0, "third batch opens epoch 1");
  gp_loader_free(l);
}

static void test_resume(const char *dir) {
  /* Batches of 7 (7 per epoch, 1 dropped): stop at several points, reopen, seek, go on. */
  int ref[7 * 20];
  gp_loader *l = open_train(dir, 99);
  if (!l) return;
  take(l, 20, 7, ref);
  gp_loader_free(l);
  int stops[] = {0, 1, 6, 7, 9, 19};
  for (size_t s = 0; s < sizeof stops / sizeof stops[0]; s++) {
    int got[7 * 20];
    int k = stops[s];
    l = open_train(dir, 99);
    take(l, k, 7, got);
    int64_t e, i;
    gp_loader_tell(l, &e, &i);
    gp_loader_free(l);
    l = open_train(dir, 99);
    CHECK(gp_loader_seek(l, e, i) == GP_OK, "seek %lld %lld", (long long)e, (long long)i);
    take(l, 20 - k, 7, got + 7 * k);
    gp_loader_free(l);
    CHECK(memcmp(got, ref, sizeof ref) == 0, "resume after %d batches differs", k);
  }
  l = open_train(dir, 99);
  CHECK(gp_loader_seek(l, 0, NTRAIN + 1) != GP_OK, "seek past the end refused");
  CHECK(gp_loader_seek(l, -1, 0) != GP_OK, "negative epoch refused");
  float x[PIX * 64];
  int32_t y[64];
  int64_t got;
  CHECK(gp_loader_next(l, 51, x, y, &got) != GP_OK, "batch larger than the split refused");
  CHECK(gp_loader_next(l, 0, x, y, &got) != GP_OK, "batch of 0 refused");
  gp_loader_free(l);
}

static void test_limits(const char *dir) {
  gp_data_spec s = spec_for(dir, 0);
  s.train_limit = 20;
  s.test_limit = 5;
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l) == GP_OK && gp_loader_samples(l) == 20,
        "train limit");
  if (l) {
    int ids[40];
    take(l, 2, 20, ids);
    int ok = 1;
    for (int i = 0; i < 40; i++)
      ok &= ids[i] < 20;
    CHECK(ok && is_perm(ids, 20), "limited train split uses the first 20");
  }
  gp_loader_free(l);
  l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK && gp_loader_samples(l) == 5,
        "test limit");
  gp_loader_free(l);
  s.test_limit = 1000; /* more than there are: all */
  l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &l) == GP_OK && gp_loader_samples(l) == NTEST,
        "limit above the count");
  gp_loader_free(l);
}

/* Opening the split must fail with code, naming file (a path suffix) in the message. */
static void expect_open_error(const gp_data_spec *s, gp_split split, gp_status code,
                              const char *file, const char *want) {
  gp_loader *l = (gp_loader *)1;
  gp_error_clear();
  gp_status st = gp_loader_open(s, split, 1, NULL, &l);
  CHECK(st == code, "%s: status %s, want %s", file, gp_status_name(st), gp_status_name(code));
  CHECK(l == NULL, "%s: loader set on error", file);
  if (file) CHECK(strstr(gp_error_message(), file) != NULL, "message does not name %s", file);
  if (want) CHECK(strstr(gp_error_message(), want) != NULL, "%s: message lacks '%s'", file, want);
  if (st == GP_OK) gp_loader_free(l);
}

/* A split whose IDX headers say 0 images: refused when opened (a test pass over it reported
 * loss 0 and accuracy 0 over 0 samples). `prefix` "t10k" or "train", `gz` ".gz" or "". */
static void expect_empty_split(const char *name, gp_split split, const char *prefix,
                               const char *gz) {
  const char *d = make_set(name);
  char p[700];
  snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte%s", d, prefix, gz);
  idx_write_labels(p, gz[0] != 0, 0, 10);
  snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", d, prefix, gz);
  idx_write_images(p, gz[0] != 0, 0, 28);
  gp_data_spec s = spec_for(d, 1);
  expect_open_error(&s, split, GP_ERR_DATA, p, "holds no samples");
}

static void test_bad_files(void) {
  char p[700];
  const char *d;
  gp_data_spec s;

  d = make_set("trunc_images");
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", d);
  file_truncate(p, 16 + 5 * PIX + 100);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TEST, GP_ERR_DATA, p,
                    "expected 18032 bytes of image data, the file ended after 4020");

  d = make_set("trunc_gzip");
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
  size_t n;
  unsigned char *raw = file_read(p, &n);
  file_truncate(p, n - 10);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, p, "truncated");

  d = make_set("corrupt_gzip");
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
  raw[n - 6] ^= 0x40; /* the stored CRC */
  file_write(p, raw, n);
  free(raw);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, p, "corrupt gzip");

  d = make_set("wrong_magic");
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", d);
  idx_write_images(p, 0, NTEST, 28);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TEST, GP_ERR_DATA, p, "magic");

  d = make_set("wrong_dims");
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", d);
  idx_write_images(p, 0, NTEST, 32);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TEST, GP_ERR_DATA, p, "32x32, expected 28x28");

  d = make_set("count_mismatch");
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", d);
  idx_write_labels(p, 0, NTEST - 1, 10);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TEST, GP_ERR_DATA, p, "23 images");

  expect_empty_split("zero_test", GP_SPLIT_TEST, "t10k", "");
  expect_empty_split("zero_train", GP_SPLIT_TRAIN, "train", ".gz");

  d = make_set("label_range");
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", d);
  idx_write_labels(p, 1, NTRAIN, 11); /* sample 10 has label 10 */
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, p, "label 10 of sample 10");

  d = make_set("missing");
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", d);
  remove(p);
  s = spec_for(d, 1);
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, p, "cannot open");
  snprintf(p, sizeof p, "%s/no-such-dir/train-images-idx3-ubyte.gz", root);
  snprintf(s.path, sizeof s.path, "%s/no-such-dir", root);
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, p, "No such file");

  d = make_set("good");
  s = spec_for(d, 1);
  s.dataset = GP_DATA_CIFAR10;
  /* CIFAR is supported (tests/data/test_cifar.c); an MNIST directory holds none of it. */
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_DATA, d, "data.path");
  s.dataset = GP_DATA_IMAGENET; /* neither shards nor an ImageFolder val/ tree there */
  expect_open_error(&s, GP_SPLIT_TEST, GP_ERR_DATA, d, "val/");
  s = spec_for(d, 1);
  s.n_norm = 3;
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_SPEC, NULL, "channel");
  s = spec_for(d, 1);
  s.std[0] = 0;
  expect_open_error(&s, GP_SPLIT_TRAIN, GP_ERR_SPEC, NULL, "std");
  s = spec_for(d, 1);
  s.dataset = GP_DATA_MNIST; /* same file names, another default place */
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &l) == GP_OK, "mnist with a path");
  gp_loader_free(l);
}

static void test_synthetic(void) {
  gp_shape sh = gp_shape_of(3, (int64_t[]){3, 4, 5});
  gp_loader *a = NULL, *b = NULL, *c = NULL, *t = NULL;
  CHECK(gp_loader_open_synthetic(&sh, 7, 40, GP_SPLIT_TRAIN, 5, NULL, &a) == GP_OK, "synthetic");
  CHECK(gp_loader_open_synthetic(&sh, 7, 40, GP_SPLIT_TRAIN, 5, NULL, &b) == GP_OK, "synthetic");
  CHECK(gp_loader_open_synthetic(&sh, 7, 40, GP_SPLIT_TRAIN, 6, NULL, &c) == GP_OK, "synthetic");
  CHECK(gp_loader_open_synthetic(&sh, 7, 33, GP_SPLIT_TEST, 5, NULL, &t) == GP_OK, "synthetic");
  if (!a || !b || !c || !t) return;
  CHECK(gp_loader_samples(a) == 40 && gp_loader_classes(a) == 7, "synthetic counts");
  gp_shape got_sh = gp_loader_sample_shape(a);
  CHECK(gp_shape_equal(&got_sh, &sh), "synthetic shape");
  enum { B = 8, N = 60 };
  float xa[B * N], xb[B * N], xc[B * N];
  int32_t ya[B], yb[B], yc[B];
  int64_t got;
  int range_ok = 1, same = 1, differs = 0, label_hist[7] = {0};
  for (int i = 0; i < 12; i++) {
    gp_loader_next(a, B, xa, ya, &got);
    gp_loader_next(b, B, xb, yb, &got);
    gp_loader_next(c, B, xc, yc, &got);
    same &= memcmp(xa, xb, sizeof xa) == 0 && memcmp(ya, yb, sizeof ya) == 0;
    differs |= memcmp(xa, xc, sizeof xa) != 0;
    for (int k = 0; k < B * N; k++)
      range_ok &= xa[k] >= -1.0f && xa[k] < 1.0f;
    for (int k = 0; k < B; k++) {
      range_ok &= ya[k] >= 0 && ya[k] < 7;
      if (ya[k] >= 0 && ya[k] < 7) label_hist[ya[k]]++;
    }
  }
  CHECK(same, "same seed, same synthetic data");
  CHECK(differs, "another seed, other data");
  CHECK(range_ok, "inputs in [-1, 1), labels in [0, 7)");
  int used = 0;
  for (int k = 0; k < 7; k++)
    used += label_hist[k] > 0;
  CHECK(used == 7, "all labels drawn (%d of 7)", used);
  /* a sample keeps its values wherever the shuffle puts it: resume through seek */
  int64_t e, i;
  gp_loader_tell(a, &e, &i);
  CHECK(gp_loader_seek(b, e, i) == GP_OK, "seek");
  gp_loader_next(a, B, xa, ya, &got);
  gp_loader_next(b, B, xb, yb, &got);
  CHECK(memcmp(xa, xb, sizeof xa) == 0, "synthetic resume");
  int64_t sizes[3];
  float big[16 * N];
  int32_t yy[16];
  for (int k = 0; k < 3; k++)
    gp_loader_next(t, 16, big, yy, &sizes[k]);
  CHECK(sizes[0] == 16 && sizes[1] == 16 && sizes[2] == 1, "synthetic test split batches");
  gp_loader_free(a);
  gp_loader_free(b);
  gp_loader_free(c);
  gp_loader_free(t);

  gp_loader *l = NULL;
  gp_shape bad = gp_shape_of(2, (int64_t[]){0, 4});
  CHECK(gp_loader_open_synthetic(&bad, 7, 10, GP_SPLIT_TRAIN, 1, NULL, &l) != GP_OK, "bad shape");
  CHECK(gp_loader_open_synthetic(&sh, 0, 10, GP_SPLIT_TRAIN, 1, NULL, &l) != GP_OK, "0 classes");
  CHECK(gp_loader_open_synthetic(&sh, 7, -1, GP_SPLIT_TRAIN, 1, NULL, &l) != GP_OK, "-1 samples");
  CHECK(l == NULL, "no loader on error");
}

/* Reads `steps` batches of b (train) or a whole pass and a bit (test) into one buffer. */
static void read_run(gp_loader *l, int64_t b, int steps, float *x, int32_t *y, int64_t *gots) {
  memset(x, 0, (size_t)steps * b * PIX * sizeof *x);
  memset(y, 0, (size_t)steps * b * sizeof *y);
  for (int k = 0; k < steps; k++)
    gp_loader_next(l, b, x + (size_t)k * b * PIX, y + (size_t)k * b, &gots[k]);
}

/* Decode threads and the prefetch depth never change the batches, in either split, across
 * epoch boundaries, passes and seeks; replicas split every epoch into disjoint parts. */
static void test_threads(const char *dir) {
  enum { B = 7, STEPS = 20 };
  static float xr[STEPS * B * PIX], xt[STEPS * B * PIX];
  int32_t yr[STEPS * B], yt[STEPS * B];
  int64_t gr[STEPS], gt[STEPS];
  const int workers[] = {1, 2, 3, 4}, prefetch[] = {1, 2, 5, 3};
  for (int split = 0; split < 2; split++) {
    gp_data_spec s = spec_for(dir, 1);
    gp_loader_opts o0 = {.workers = 0, .replicas = 1};
    gp_loader *ref = NULL;
    CHECK(gp_loader_open(&s, split ? GP_SPLIT_TEST : GP_SPLIT_TRAIN, 9, &o0, &ref) == GP_OK,
          "open inline");
    if (!ref) return;
    read_run(ref, B, STEPS, xr, yr, gr);
    for (int w = 0; w < 4; w++) {
      gp_loader_opts o = {.workers = workers[w], .prefetch = prefetch[w], .replicas = 1};
      gp_loader *l = NULL;
      CHECK(gp_loader_open(&s, split ? GP_SPLIT_TEST : GP_SPLIT_TRAIN, 9, &o, &l) == GP_OK,
            "open threaded");
      if (!l) continue;
      read_run(l, B, STEPS, xt, yt, gt);
      CHECK(memcmp(gr, gt, sizeof gr) == 0 && memcmp(xr, xt, sizeof xr) == 0 &&
                memcmp(yr, yt, sizeof yr) == 0,
            "%s split, %d workers, prefetch %d: the same batches as inline",
            split ? "test" : "train", workers[w], prefetch[w]);
      gp_loader_stats st;
      gp_loader_stats_get(l, &st);
      CHECK(st.workers == workers[w] && st.batches == STEPS && st.wait_s >= 0, "stats");
      /* resume mid-epoch on a threaded loader: the rest is the same */
      CHECK(gp_loader_seek(l, 1, 2 * B) == GP_OK, "seek");
      CHECK(gp_loader_seek(ref, 1, 2 * B) == GP_OK, "seek");
      read_run(ref, B, 5, xr, yr, gr);
      read_run(l, B, 5, xt, yt, gt);
      CHECK(memcmp(xr, xt, 5 * B * PIX * sizeof(float)) == 0 && memcmp(gr, gt, 5 * sizeof *gr) == 0,
            "seek with %d workers", workers[w]);
      gp_loader_free(l);
      gp_loader_free(ref);
      ref = NULL;
      CHECK(gp_loader_open(&s, split ? GP_SPLIT_TEST : GP_SPLIT_TRAIN, 9, &o0, &ref) == GP_OK,
            "reopen inline");
      if (!ref) return;
      read_run(ref, B, STEPS, xr, yr, gr);
    }
    gp_loader_free(ref);
  }
  /* Replicas: in every epoch, the R replicas see disjoint samples covering R * (n / R). */
  enum { R = 3 };
  gp_data_spec s = spec_for(dir, 0);
  int seen[NTRAIN];
  for (int epoch = 0; epoch < 2; epoch++) {
    memset(seen, 0, sizeof seen);
    int per = 0;
    for (int r = 0; r < R; r++) {
      gp_loader_opts o = {.workers = r % 2 ? 2 : 0, .replicas = R, .replica = r};
      gp_loader *l = NULL;
      CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 4, &o, &l) == GP_OK, "open replica");
      if (!l) return;
      per = (int)gp_loader_samples(l);
      int64_t got;
      float x[NTRAIN / R * PIX];
      int32_t y[NTRAIN / R];
      gp_loader_seek(l, epoch, 0);
      gp_loader_next(l, per, x, y, &got);
      for (int k = 0; k < got; k++)
        seen[sample_id(x + k * PIX)]++;
      gp_loader_free(l);
    }
    int once = 0, twice = 0;
    for (int k = 0; k < NTRAIN; k++) {
      once += seen[k] == 1;
      twice += seen[k] > 1;
    }
    CHECK(per == NTRAIN / R && once == R * per && twice == 0,
          "epoch %d: %d replicas x %d samples, disjoint (%d seen once, %d more often)", epoch, R,
          per, once, twice);
  }
  gp_loader_opts bad = {.workers = 0, .replicas = 2, .replica = 2};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 4, &bad, &l) == GP_ERR_USAGE && !l, "replica 2 of 2");
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/gp_loader_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  char dir[512];
  snprintf(dir, sizeof dir, "%s", make_set("set"));
  test_decode(dir);
  test_shuffle(dir);
  test_resume(dir);
  test_threads(dir);
  test_limits(dir);
  test_bad_files();
  test_synthetic();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
