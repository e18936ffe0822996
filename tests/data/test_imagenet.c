/* ImageNet through the loader, on shards and folders written here: WebDataset shards (plain
 * .tar with pax headers and .tar.gz in two gzip members) and an ImageFolder tree of JPEGs.
 * Every batch row is checked against gp_imagenet_sample on the JPEG it must come from; the
 * train order is a permutation per epoch, independent of the thread count, resumable,
 * split between replicas; bad JPEGs and labels are errors naming the member, or counted
 * skips. With "--write DIR" it only writes the data set (for the gpipe-train test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/imgaug.h"
#include "data/loader.h"
#include "jpeg_fixture.h"
#include "tar_fixture.h"
#include "tests/support/check.h"

static int failures, passes;

#define N 30 /* samples: shards of 10 */
#define CLASSES 5
#define SIDE 16
#define NUMEL (3 * SIDE * SIDE)

static uint8_t *jpg[N];
static size_t jpg_n[N];
static int label_of(int i) {
  return (i * 3) % CLASSES;
}

static void make_jpegs(void) {
  for (int i = 0; i < N; i++) {
    int w = 40 + (i % 7) * 6, h = 30 + (i % 5) * 8;
    uint8_t *px = malloc((size_t)w * h * 3);
    jfix_natural(px, w, h, (uint64_t)i + 1);
    jpg[i] = jfix_encode(px, w, h, 3, 90, i % 4 == 3 ? JFIX_PROGRESSIVE : 0, &jpg_n[i]);
    free(px);
  }
}

/* Shard s holds samples 10s..10s+9 as KEY.jpg + KEY.cls; bad_jpg / bad_cls (-1 = none) put
 * damage into one sample. */
static int empty_jpg = -1; /* a sample whose .jpg member is 0 bytes (-1: none) */
static void shard_bytes(buf *t, int s, int bad_jpg, int bad_cls) {
  for (int i = 10 * s; i < 10 * s + 10; i++) {
    char name[64], cls[16];
    if (i == 10 * s + 1) { /* a pax header on one member, as Python's tarfile writes */
      buf x = {0};
      pax_record(&x, "mtime", "1700000000.25");
      header(t, "pax", x.n, 'x', 0, 0);
      put(t, x.p, x.n);
      pad512(t);
      free(x.p);
    }
    snprintf(name, sizeof name, "d%d/sample%04d.jpg", s, i);
    if (i == empty_jpg) {
      member(t, name, "", 0); /* UBSan: a NULL record buffer went to memcpy */
    } else if (i == bad_jpg) {
      member(t, name, jpg[i], jpg_n[i] / 2); /* cut short: undecodable */
    } else {
      member(t, name, jpg[i], jpg_n[i]);
    }
    snprintf(name, sizeof name, "d%d/sample%04d.cls", s, i);
    snprintf(cls, sizeof cls, "%d\n", i == bad_cls ? CLASSES + 2 : label_of(i));
    member(t, name, cls, strlen(cls));
  }
  static const uint8_t z[1024];
  put(t, z, sizeof z);
}

static void write_set(const char *dir, int bad_jpg, int bad_cls) {
  mkdir(dir, 0755);
  char p[600];
  for (int s = 0; s < 3; s++) {
    buf t = {0};
    shard_bytes(&t, s, bad_jpg, bad_cls);
    if (s == 2) {
      snprintf(p, sizeof p, "%s/train-%03d.tar.gz", dir, s);
      write_gz2(p, t.p, t.n);
    } else {
      snprintf(p, sizeof p, "%s/train-%03d.tar", dir, s);
      write_file(p, t.p, t.n);
    }
    free(t.p);
  }
  snprintf(p, sizeof p, "%s/classes.txt", dir);
  write_file(p, "n01\nn02\nn03\nn04\nn05\n", 20);
}

static gp_data_spec spec_for(const char *dir) {
  gp_data_spec s;
  memset(&s, 0, sizeof s);
  s.dataset = GP_DATA_IMAGENET;
  snprintf(s.path, sizeof s.path, "%.500s", dir);
  snprintf(s.train_shards, sizeof s.train_shards, "train-{000..001}.tar,train-002.tar.gz");
  snprintf(s.test_shards, sizeof s.test_shards, "%s", s.train_shards);
  snprintf(s.classes_file, sizeof s.classes_file, "classes.txt");
  s.image_size = SIDE;
  s.shuffle_buffer = 8;
  s.augment = 1; /* the model file's default for imagenet */
  return s;
}

static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};

/* The sample whose decode (train: at this epoch and position) is exactly row x; -1 if none. */
static int which(const float *x, int train, uint64_t seed, int64_t epoch, int64_t pos) {
  static float ref[NUMEL];
  gp_image img = {0};
  int found = -1;
  for (int i = 0; i < N && found < 0; i++) {
    if (gp_imagenet_sample(jpg[i], jpg_n[i], train, seed, epoch, pos, SIDE, mean, stdv, &img, ref,
                           "ref") != GP_OK)
      continue;
    if (memcmp(ref, x, sizeof ref) == 0) found = i;
  }
  gp_image_free(&img);
  return found;
}

static void test_eval(const char *dir) {
  gp_data_spec s = spec_for(dir);
  gp_loader_opts o = {.workers = 2, .replicas = 1};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 3, &o, &l) == GP_OK, "open eval shards");
  if (!l) return;
  CHECK(gp_loader_classes(l) == CLASSES && gp_loader_samples(l) == -1, "classes from classes.txt");
  static float x[8 * NUMEL];
  int32_t y[8];
  int64_t got, total = 0;
  int in_order = 1;
  for (int b = 0; b < 5; b++) {
    CHECK(gp_loader_next(l, 8, x, y, &got) == GP_OK, "eval batch");
    for (int k = 0; k < got; k++) {
      int i = (int)total + k;
      in_order &= which(x + k * NUMEL, 0, 3, 0, 0) == i && y[k] == label_of(i);
    }
    total += got;
    if (got == 0) break;
  }
  CHECK(total == N && in_order, "eval: %lld samples, each the centre crop of its JPEG in order",
        (long long)total);
  gp_loader_free(l);
}

/* augment: false: the training split is center-cropped as evaluation is (shuffled all the same) */
static void test_train_no_augment(const char *dir) {
  gp_data_spec s = spec_for(dir);
  s.augment = 0;
  gp_loader_opts o = {.workers = 2, .replicas = 1};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 3, &o, &l) == GP_OK, "open train shards, no augment");
  if (!l) return;
  static float x[6 * NUMEL];
  int32_t y[6];
  int64_t got;
  int seen[N] = {0}, ok = 1;
  for (int b = 0; b < 5; b++) {
    CHECK(gp_loader_next(l, 6, x, y, &got) == GP_OK && got == 6, "train batch, no augment");
    for (int k = 0; k < got; k++) {
      int i = which(x + k * NUMEL, 0, 3, 0, 0);
      ok &= i >= 0 && y[k] == label_of(i) && !seen[i];
      if (i >= 0) seen[i] = 1;
    }
  }
  CHECK(ok, "augment false: each training row is the centre crop of a sample, each sample once");
  gp_loader_free(l);
}

/* Two epochs of train batches at these options: sample index per row. */
static void train_order(const char *dir, gp_loader_opts o, uint64_t seed, int epochs, int *ids,
                        float *keep) {
  gp_data_spec s = spec_for(dir);
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, seed, &o, &l) == GP_OK, "open train shards");
  if (!l) return;
  static float x[6 * NUMEL];
  int32_t y[6];
  int64_t got;
  for (int b = 0; b < 5 * epochs; b++) { /* 30 / 6 = 5 batches per epoch */
    CHECK(gp_loader_next(l, 6, x, y, &got) == GP_OK && got == 6, "train batch");
    int64_t e, idx;
    gp_loader_tell(l, &e, &idx);
    CHECK(e == b / 5 && idx == (b % 5 + 1) * 6, "position %lld,%lld", (long long)e, (long long)idx);
    for (int k = 0; k < 6; k++) {
      int i = ids ? which(x + k * NUMEL, 1, seed, e, (b % 5) * 6 + k) : 0;
      if (ids) ids[b * 6 + k] = i;
      CHECK(!ids || (i >= 0 && y[k] == label_of(i)),
            "train row %d of batch %d is a crop of a sample", k, b);
    }
    if (keep) memcpy(keep + (size_t)b * 6 * NUMEL, x, sizeof x);
  }
  gp_loader_free(l);
}

static void test_train(const char *dir) {
  int a[2 * N], b[2 * N], c[2 * N];
  static float xa[2 * N * NUMEL], xb[2 * N * NUMEL];
  train_order(dir, (gp_loader_opts){.workers = 0, .replicas = 1}, 7, 2, a, xa);
  train_order(dir, (gp_loader_opts){.workers = 3, .prefetch = 2, .replicas = 1}, 7, 2, b, xb);
  train_order(dir, (gp_loader_opts){.workers = 1, .replicas = 1}, 8, 2, c, NULL);
  for (int e = 0; e < 2; e++) {
    int seen[N] = {0}, dup = 0;
    for (int k = 0; k < N; k++)
      if (a[e * N + k] >= 0 && seen[a[e * N + k]]++) dup++;
    CHECK(dup == 0, "epoch %d: every sample once", e);
  }
  CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(xa, xb, sizeof xa) == 0,
        "0 or 3 decode threads: the same batches");
  CHECK(memcmp(a, c, sizeof a) != 0, "another seed, another order");
  CHECK(memcmp(a, a + N, N * sizeof *a) != 0, "another epoch, another order");
  int shard_runs = 1;
  for (int k = 1; k < N; k++) /* a shuffle buffer mixes shards: not 10-long runs per shard */
    shard_runs += a[k] / 10 != a[k - 1] / 10;
  CHECK(shard_runs > 6, "the shuffle buffer mixes shards (%d runs)", shard_runs);

  /* resume in the middle of epoch 1 */
  gp_data_spec s = spec_for(dir);
  gp_loader_opts o = {.workers = 2, .replicas = 1};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 7, &o, &l) == GP_OK && gp_loader_seek(l, 1, 12) == GP_OK,
        "seek into epoch 1");
  if (l) {
    static float x[6 * NUMEL];
    int32_t y[6];
    int64_t got;
    gp_loader_next(l, 6, x, y, &got);
    CHECK(memcmp(x, xa + (size_t)(5 + 2) * 6 * NUMEL, sizeof x) == 0, "resumed batch identical");
    gp_loader_free(l);
  }
}

static void test_replicas(const char *dir) {
  for (int R = 3; R <= 4; R++) { /* 3 shards: by shard; 4 replicas: by sample */
    int seen[N] = {0}, total = 0;
    for (int r = 0; r < R; r++) {
      gp_data_spec s = spec_for(dir);
      gp_loader_opts o = {.workers = 1, .replicas = R, .replica = r};
      gp_loader *l = NULL;
      CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open replica");
      if (!l) continue;
      static float x[4 * NUMEL];
      int32_t y[4];
      int64_t got;
      do {
        gp_loader_next(l, 4, x, y, &got);
        for (int k = 0; k < got; k++) {
          int i = which(x + k * NUMEL, 0, 1, 0, 0);
          if (i >= 0) seen[i]++;
          total++;
        }
      } while (got > 0);
      gp_loader_free(l);
    }
    int once = 0;
    for (int i = 0; i < N; i++)
      once += seen[i] == 1;
    CHECK(total == N && once == N, "%d replicas: disjoint and covering (%d of %d once)", R, once,
          N);
  }
}

static void test_bad(const char *root) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/bad_jpg", root);
  write_set(dir, 13, -1);
  gp_data_spec s = spec_for(dir);
  gp_loader_opts o = {.workers = 2, .replicas = 1};
  gp_loader *l = NULL;
  static float x[N * NUMEL];
  int32_t y[N];
  int64_t got;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open damaged set");
  gp_status st = gp_loader_next(l, N, x, y, &got);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "train-001.tar") &&
            strstr(gp_error_message(), "sample0013.jpg"),
        "undecodable JPEG names shard and member");
  gp_loader_free(l);
  o.max_skips = 3;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open with skips");
  st = gp_loader_next(l, N, x, y, &got);
  gp_loader_stats stats;
  gp_loader_stats_get(l, &stats);
  CHECK(st == GP_OK && got == N && stats.skipped == 1 && strstr(stats.first_skip, "sample0013"),
        "one counted skip, batch full (%lld skipped)", (long long)stats.skipped);
  CHECK(memcmp(x + 13 * NUMEL, x + 12 * NUMEL, NUMEL * sizeof(float)) == 0,
        "the skipped sample replaced by its neighbour");
  gp_loader_free(l);
  /* The same bad file counts again in the next pass; past the budget the error says so. */
  o.max_skips = 1;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open with one skip");
  int ok = gp_loader_next(l, N, x, y, &got) == GP_OK && got == N;
  ok &= gp_loader_next(l, N, x, y, &got) == GP_OK && got == 0; /* the pass ends */
  st = gp_loader_next(l, N, x, y, &got);
  CHECK(ok && st == GP_ERR_DATA && strstr(gp_error_message(), "sample0013.jpg") &&
            strstr(gp_error_message(), "(more than max_skips = 1 bad samples)"),
        "second pass: the skip budget ran out, said so: %s", gp_error_message());
  gp_loader_free(l);

  snprintf(dir, sizeof dir, "%s/empty_jpg", root);
  empty_jpg = 0; /* the first record read: its buffer not yet made */
  write_set(dir, -1, -1);
  empty_jpg = -1;
  s = spec_for(dir);
  o.max_skips = 0;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open a set with an empty image");
  st = gp_loader_next(l, N, x, y, &got);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "sample0000.jpg") &&
            strstr(gp_error_message(), "undecodable JPEG"),
        "a 0-byte image names its member: %s", gp_error_message());
  gp_loader_free(l);

  snprintf(dir, sizeof dir, "%s/bad_cls", root);
  write_set(dir, -1, 24);
  s = spec_for(dir);
  o.max_skips = 0;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open bad label set");
  st = gp_loader_next(l, N, x, y, &got);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "sample0024.cls") &&
            strstr(gp_error_message(), "outside 0..4"),
        "label out of range names its member (the .cls, not the image): %s", gp_error_message());
  gp_loader_free(l);

  s = spec_for(root);
  snprintf(s.train_shards, sizeof s.train_shards, "missing-{0..1}.tar");
  s.classes_file[0] = 0;
  s.num_classes = CLASSES;
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, &o, &l) == GP_OK, "open (shards opened lazily)");
  if (!l) return;
  st = gp_loader_next(l, 4, x, y, &got);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "missing-"), "a missing shard is named");
  gp_loader_free(l);
}

/* Test shards that hold no sample: the pass is an error naming them (it reported loss 0 over
 * 0 samples). An archive of end blocks only is a valid, empty tar. */
static void test_empty_test_split(const char *root) {
  char dir[600], p[700];
  snprintf(dir, sizeof dir, "%s/empty_test", root);
  mkdir(dir, 0755);
  static const uint8_t z[1024];
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/test-%d.tar", dir, i);
    write_file(p, z, sizeof z);
  }
  const char *specs[] = {"test-0.tar", "test-{0..1}.tar"},
             *want[] = {"holds no samples", "2 shards"};
  for (int i = 0; i < 2; i++) {
    gp_data_spec s = spec_for(dir);
    snprintf(s.test_shards, sizeof s.test_shards, "%s", specs[i]);
    s.classes_file[0] = 0;
    s.num_classes = CLASSES;
    gp_loader_opts o = {.workers = i, .replicas = 1};
    gp_loader *l = NULL;
    CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open empty test shards");
    if (!l) continue;
    static float x[4 * NUMEL];
    int32_t y[4];
    int64_t got = -1;
    gp_status st = gp_loader_next(l, 4, x, y, &got);
    CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "test-0.tar") &&
              strstr(gp_error_message(), want[i]),
          "empty test shards '%s' refused: %s", specs[i], gp_error_message());
    gp_loader_free(l);
  }
}

/* An empty item in a shard list is refused naming the setting; joined onto data.path it
 * used to name the data folder itself, all of whose shards (test shards too) were read. */
static void test_empty_item(const char *dir) {
  const char *specs[] = {"train-000.tar,,",
                         ",train-000.tar",
                         "train-000.tar, ,train-001.tar",
                         "train-000.tar,",
                         "@",
                         " "};
  for (int i = 0; i < 6; i++) {
    for (int split = 0; split < 2; split++) {
      gp_data_spec s = spec_for(dir);
      snprintf(split ? s.test_shards : s.train_shards, sizeof s.train_shards, "%s", specs[i]);
      gp_loader_opts o = {.workers = 1, .replicas = 1};
      gp_loader *l = NULL;
      gp_status st = gp_loader_open(&s, split ? GP_SPLIT_TEST : GP_SPLIT_TRAIN, 1, &o, &l);
      const char *m = gp_error_message();
      CHECK(st == GP_ERR_SPEC && !l &&
                strstr(m, split ? "data.test_shards" : "data.train_shards") &&
                strstr(m, "empty item"),
            "shards '%s' (%s) refused: %s", specs[i], split ? "test" : "train", m);
      gp_loader_free(l);
    }
  }
}

/* `batches` batches of b from a loader of dir's split told (images, r, R) (R = 0: told
 * nothing), at most 3 bad samples skipped; its stats in *st. */
static void read_told(const char *dir, int train, int workers, int images, int r, int R, int b,
                      int batches, float *x, int32_t *y, gp_loader_stats *st) {
  gp_data_spec s = spec_for(dir);
  gp_loader_opts o = {.workers = workers, .replicas = 1, .max_skips = 3};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, train ? GP_SPLIT_TRAIN : GP_SPLIT_TEST, 5, &o, &l) == GP_OK &&
            (R == 0 || gp_loader_want(l, images, r, R) == GP_OK),
        "open %s told (%d, %d, %d)", dir, images, r, R);
  memset(st, 0, sizeof *st);
  if (!l) return;
  for (int k = 0; k < batches; k++) {
    int64_t got;
    CHECK(gp_loader_next(l, b, x + (size_t)k * b * NUMEL, y + k * b, &got) == GP_OK && got == b,
          "batch %d of %s told (%d, %d, %d)", k, dir, images, r, R);
  }
  gp_loader_stats_get(l, st);
  gp_loader_free(l);
}

/* Rows [lo, hi) of x alike in a and b. */
static int rows_alike(const float *a, const float *b, int64_t lo, int64_t hi) {
  return memcmp(a + lo * NUMEL, b + lo * NUMEL, (size_t)(hi - lo) * NUMEL * sizeof(float)) == 0;
}

/* gp_loader_want (a process that reads a share of every batch, or no image): the rows read are
 * the whole batch's decode, bit for bit (augmented training rows, and the stand-in of a bad
 * sample even where it lies outside the share: decoded then), every label too (a bad one
 * replaced as ever), and only those samples are decoded. A row not read whose image alone is
 * bad keeps its own label (the whole decode gives it its stand-in's). */
static void test_want(const char *root) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/want", root);
  write_set(dir, 10, 24); /* sample 10's JPEG cut short, sample 24's label out of range */
  static float xa[N * NUMEL], xb[N * NUMEL];
  int32_t ya[N], yb[N];
  gp_loader_stats sa, sb;
  read_told(dir, 0, 2, 1, 0, 0, N, 1, xa, ya, &sa); /* the test split in order: row i, sample i */
  CHECK(sa.skipped == 2 && sa.decoded == N && ya[10] == ya[9] && ya[24] == ya[23] &&
            rows_alike(xa, xa + NUMEL, 9, 10),
        "told nothing: %lld skipped, %lld decoded", (long long)sa.skipped, (long long)sa.decoded);
  /* share 1 of 3, rows 10..19: bad row 10 takes row 9, decoded for it */
  read_told(dir, 0, 2, 1, 1, 3, N, 1, xb, yb, &sb);
  CHECK(rows_alike(xa, xb, 10, 20) && !memcmp(ya, yb, sizeof ya) && sb.decoded == 11 &&
            sb.skipped == 2,
        "share 1 of 3: rows 10..19 and every label; %lld decoded, %lld skipped",
        (long long)sb.decoded, (long long)sb.skipped);
  /* share 1 of 2, rows 15..29: the bad label in it; row 10 not read, its own label */
  read_told(dir, 0, 0, 1, 1, 2, N, 1, xb, yb, &sb);
  CHECK(rows_alike(xa, xb, 15, 30) && !memcmp(ya + 11, yb + 11, sizeof ya - 11 * sizeof *ya) &&
            !memcmp(ya, yb, 10 * sizeof *ya) && yb[10] == label_of(10) && sb.decoded == 15 &&
            sb.skipped == 1,
        "share 1 of 2: rows 15..29, the labels; %lld decoded, %lld skipped", (long long)sb.decoded,
        (long long)sb.skipped);
  read_told(dir, 0, 2, 0, 0, 1, N, 1, xb, yb, &sb);
  CHECK(sb.decoded == 0 && sb.skipped == 1 && yb[24] == ya[24] && yb[10] == label_of(10),
        "no image: none decoded, the labels (%lld decoded)", (long long)sb.decoded);
  /* training batches of 6, augmented and shuffled over 2 epochs: share 3 of 4 is row 5 */
  snprintf(dir, sizeof dir, "%s/good", root);
  read_told(dir, 1, 0, 1, 0, 0, 6, 5, xa, ya, &sa);
  read_told(dir, 1, 2, 1, 3, 4, 6, 5, xb, yb, &sb);
  int ok = !memcmp(ya, yb, sizeof ya);
  for (int k = 0; k < 5; k++)
    ok &= rows_alike(xa + k * 6 * NUMEL, xb + k * 6 * NUMEL, 5, 6);
  CHECK(ok, "training, share 3 of 4: the augmented rows and the labels as told nothing");
  read_told(dir, 1, 0, 1, 3, 4, 6, 5, xb, yb, &sb);
  CHECK(sa.decoded == 30 && sb.decoded == 5, "training: %lld decoded of 5 (told nothing: %lld)",
        (long long)sb.decoded, (long long)sa.decoded);
}

/* An ImageFolder tree at d: train/ and val/ each with the N images in class folders n01..;
 * val/ lacks class skip_val (-1: none). */
static void make_folder(const char *d, int skip_val) {
  char p[800];
  mkdir(d, 0755);
  for (int split = 0; split < 2; split++) {
    snprintf(p, sizeof p, "%s/%s", d, split ? "val" : "train");
    mkdir(p, 0755);
    for (int c = 0; c < CLASSES; c++) {
      if (split && c == skip_val) continue;
      snprintf(p, sizeof p, "%s/%s/n0%d", d, split ? "val" : "train", c + 1);
      mkdir(p, 0755);
    }
    for (int i = 0; i < N; i++) {
      if (split && label_of(i) == skip_val) continue;
      snprintf(p, sizeof p, "%s/%s/n0%d/img%02d.JPEG", d, split ? "val" : "train", label_of(i) + 1,
               i);
      write_file(p, jpg[i], jpg_n[i]);
    }
  }
}

static gp_data_spec folder_spec(const char *d) {
  gp_data_spec s;
  memset(&s, 0, sizeof s);
  s.dataset = GP_DATA_IMAGENET;
  snprintf(s.path, sizeof s.path, "%.500s", d);
  s.image_size = SIDE;
  return s;
}

static void test_folder(const char *root) {
  char d[700];
  snprintf(d, sizeof d, "%s/folder", root);
  make_folder(d, -1);
  gp_data_spec s = folder_spec(d);
  gp_loader_opts o = {.workers = 2, .replicas = 1};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open ImageFolder");
  if (!l) return;
  CHECK(gp_loader_samples(l) == N && gp_loader_classes(l) == CLASSES, "folder counts");
  static float x[N * NUMEL];
  int32_t y[N];
  int64_t got;
  gp_loader_next(l, N, x, y, &got);
  int ok = got == N;
  for (int k = 0; k < got; k++) { /* sorted by class folder, then name */
    int i = which(x + k * NUMEL, 0, 1, 0, 0);
    ok &= i >= 0 && y[k] == label_of(i) && (k == 0 || y[k] >= y[k - 1]);
  }
  CHECK(ok, "folder eval: every image, labels from folders, in folder order");
  gp_loader_free(l);
  CHECK(gp_loader_open(&s, GP_SPLIT_TRAIN, 1, &o, &l) == GP_OK, "open ImageFolder train");
  if (!l) return;
  CHECK(gp_loader_next(l, 10, x, y, &got) == GP_OK && got == 10, "folder train batch");
  gp_loader_free(l);
  l = NULL;
  /* an image that cannot be reached is an error, not an image left out */
  char ln[800];
  snprintf(ln, sizeof ln, "%s/val/n01/gone.JPEG", d);
  CHECK(symlink("/nonexistent/gone.JPEG", ln) == 0, "symlink");
  gp_status st = gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "gone.JPEG") &&
            strstr(gp_error_message(), "a symbolic link to nothing"),
        "dangling image link: %s", gp_error_message());
  gp_loader_free(l);
  remove(ln);
}

/* A val/ lacking a class keeps train/'s labels (its own folders shifted every later label);
 * a val/ class that train/ lacks is refused when opened, naming the folder. */
static void test_folder_val_classes(const char *root) {
  char d[700], p[800];
  snprintf(d, sizeof d, "%s/folder_val", root);
  make_folder(d, 1); /* val/ has no n02 */
  gp_data_spec s = folder_spec(d);
  gp_loader_opts o = {.workers = 1, .replicas = 1};
  gp_loader *l = NULL;
  CHECK(gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l) == GP_OK, "open val/ lacking a class");
  if (!l) return;
  CHECK(gp_loader_classes(l) == CLASSES, "val/ has train/'s %d classes (%lld)", CLASSES,
        (long long)gp_loader_classes(l));
  static float x[N * NUMEL];
  int32_t y[N];
  int64_t got = 0;
  gp_loader_next(l, N, x, y, &got);
  int ok = got == N - N / CLASSES;
  for (int k = 0; k < got; k++) {
    int i = which(x + k * NUMEL, 0, 1, 0, 0);
    ok &= i >= 0 && y[k] == label_of(i);
  }
  CHECK(ok, "val/ lacking a class: every label as in train/ (%lld images)", (long long)got);
  gp_loader_free(l);
  snprintf(p, sizeof p, "%s/val/n06", d);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/val/n06/extra.jpg", d);
  write_file(p, jpg[0], jpg_n[0]);
  l = NULL;
  gp_status st = gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l);
  CHECK(st == GP_ERR_DATA && !l && strstr(gp_error_message(), "val/n06") &&
            strstr(gp_error_message(), "/train"),
        "a val/ class that train/ lacks is refused naming it: %s", gp_error_message());
  gp_loader_free(l);
  /* classes.txt rules both splits: val/n06 is refused unless listed. */
  snprintf(p, sizeof p, "%s/classes.txt", d);
  write_file(p, "n01\nn02\nn03\nn04\nn05\n", 20);
  snprintf(s.classes_file, sizeof s.classes_file, "classes.txt");
  l = NULL;
  st = gp_loader_open(&s, GP_SPLIT_TEST, 1, &o, &l);
  CHECK(st == GP_ERR_DATA && !l && strstr(gp_error_message(), "val/n06") &&
            strstr(gp_error_message(), "classes.txt"),
        "with classes.txt, val/n06 is refused naming classes.txt: %s", gp_error_message());
  gp_loader_free(l);
}

int main(int argc, char **argv) {
  make_jpegs();
  if (argc == 3 && !strcmp(argv[1], "--write")) {
    write_set(argv[2], -1, -1);
    return 0;
  }
  char root[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/gp_imagenet_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  char dir[600];
  snprintf(dir, sizeof dir, "%s/good", root);
  write_set(dir, -1, -1);
  test_eval(dir);
  test_train_no_augment(dir);
  test_train(dir);
  test_replicas(dir);
  test_empty_item(dir);
  test_empty_test_split(root);
  test_bad(root);
  test_want(root);
  test_folder(root);
  test_folder_val_classes(root);
  for (int i = 0; i < N; i++)
    free(jpg[i]);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
