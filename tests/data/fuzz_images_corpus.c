/* Runs the ImageNet data path's fuzz entry point (fuzz_images.c) over a deterministic corpus:
 * valid seeds made here (JPEGs of every colour kind, baseline and progressive; a WebDataset
 * shard plain and gzipped with pax and GNU headers; a two-member gzip stream), every
 * truncation, a changed byte at every position (up to a cap) and random edits. Under
 * ASan/UBSan this is the CI stand-in for a libFuzzer run. `test_fuzz_images_corpus DIR`
 * writes the seeds to DIR instead, as a starting corpus for the libFuzzer binary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/rng.h"
#include "data/cifar.h"
#include "data/jpeg.h"
#include "data/wds.h"
#include "tests/data/jpeg_fixture.h"
#include "tests/data/tar_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void typed_member(buf *b, const char *name, const void *d, size_t n, char type) {
  header(b, name, n, type, 0, 0);
  put(b, d, n);
  pad512(b);
}

/* kind byte + a JPEG of w x h with comps components. */
static buf seed_jpeg(uint8_t kind, int w, int h, int comps, int flags) {
  uint8_t *px = malloc((size_t)w * h * 4);
  jfix_natural(px, w, h, (uint64_t)w * 31 + (uint64_t)h);
  if (comps != 3) /* reuse the RGB bytes as gray or CMYK samples */
    for (int i = 0; i < w * h * comps; i++)
      px[i] = (uint8_t)(px[i % (w * h * 3)] ^ (i & 8));
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, comps, 85, flags, &n);
  buf b = {0};
  put(&b, &kind, 1);
  if (j) put(&b, j, n);
  free(j);
  free(px);
  return b;
}

static buf gzip_of(uint8_t kind, const uint8_t *d, size_t n, int members) {
  buf b = {0};
  put(&b, &kind, 1);
  for (int m = 0; m < members; m++) {
    size_t a = n * (size_t)m / (size_t)members, e = n * (size_t)(m + 1) / (size_t)members;
    z_stream z = {0};
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    uint8_t out[1 << 16];
    z.next_in = (Bytef *)(d + a);
    z.avail_in = (uInt)(e - a);
    z.next_out = out;
    z.avail_out = sizeof out;
    deflate(&z, Z_FINISH);
    put(&b, out, sizeof out - z.avail_out);
    deflateEnd(&z);
  }
  return b;
}

/* A WebDataset shard: two samples with small JPEGs, a pax header, a GNU long name, a folder. */
static buf shard(uint8_t kind) {
  buf t = {0}, img = seed_jpeg(0, 12, 10, 3, 0);
  put(&t, &kind, 1);
  buf tar = {0};
  header(&tar, "train/", 0, '5', 0, 0);
  const char *pax = "26 path=train/n0144_1.jpg\n";
  typed_member(&tar, "././@PaxHeader", pax, strlen(pax), 'x');
  typed_member(&tar, "x", img.p + 1, img.n - 1, '0');
  typed_member(&tar, "train/n0144_1.cls", "3", 1, '0');
  typed_member(&tar, "train/n0144_1.txt", "ignored", 7, '0');
  const char *ln = "train/a-long-folder-name-for-a-gnu-long-name-header-to-be-needed-here-"
                   "and-more/n0144_2.jpeg";
  typed_member(&tar, "././@LongLink", ln, strlen(ln) + 1, 'L');
  typed_member(&tar, "y", img.p + 1, img.n - 1, '0');
  const char *lc = "train/a-long-folder-name-for-a-gnu-long-name-header-to-be-needed-here-"
                   "and-more/n0144_2.cls";
  typed_member(&tar, "././@LongLink", lc, strlen(lc) + 1, 'L');
  typed_member(&tar, "z", " 12\n", 4, '0');
  uint8_t z[1024] = {0};
  put(&tar, z, sizeof z);
  put(&t, tar.p, tar.n);
  free(tar.p);
  free(img.p);
  return t;
}

/* A cifar-10-binary archive: the five train batches, two records each. */
static buf cifar(void) {
  buf t = {0}, tar = {0};
  uint8_t kind = 5, rec[2 * 3073];
  put(&t, &kind, 1);
  for (int k = 1; k <= 5; k++) {
    char name[64];
    for (int i = 0; i < (int)sizeof rec; i++)
      rec[i] = (uint8_t)(i * 7 + k);
    rec[0] = (uint8_t)k;
    rec[3073] = (uint8_t)(9 - k);
    snprintf(name, sizeof name, "cifar-10-batches-bin/data_batch_%d.bin", k);
    typed_member(&tar, name, rec, sizeof rec, '0');
  }
  uint8_t z[1024] = {0};
  put(&tar, z, sizeof z);
  put(&t, tar.p, tar.n);
  free(tar.p);
  return t;
}

/* The seeds must be valid, or the mutations explore only the first refusal. */
static int seed_ok(const buf *s) {
  if (s->p[0] <= 1) {
    gp_image img = {0};
    gp_status st = gp_jpeg_decode(s->p + 1, s->n - 1, 0, "seed", &img);
    gp_image_free(&img);
    return st == GP_OK;
  }
  if (s->p[0] == 5) {
    const char *path = "/tmp/gp-fuzz-img-seed-cifar.tar";
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(s->p + 1, 1, s->n - 1, f);
    fclose(f);
    uint8_t *px = NULL, *lb = NULL;
    int64_t n = 0;
    gp_status st = gp_cifar_read(path, 10, 0, 1, 0, &px, &lb, &n);
    free(px);
    free(lb);
    remove(path);
    return st == GP_OK && n == 10;
  }
  if (s->p[0] != 2) return 1;
  const char *path = "/tmp/gp-fuzz-img-seed.tar";
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fwrite(s->p + 1, 1, s->n - 1, f);
  fclose(f);
  gp_wds *w = NULL;
  gp_wds_sample smp;
  int samples = 0;
  gp_status st = gp_wds_open(path, &w);
  while (st == GP_OK && (st = gp_wds_next(w, &smp)) == GP_OK && smp.key)
    samples += smp.label == (samples ? 12 : 3);
  gp_wds_close(w);
  remove(path);
  return st == GP_OK && samples == 2;
}

/* With a folder argument: write the seeds there, a starting corpus for the libFuzzer binary. */
static int write_seeds(const char *dir, const buf *seeds, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char p[1024];
    snprintf(p, sizeof p, "%s/seed-%02zu", dir, i);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(seeds[i].p, 1, seeds[i].n, f) != seeds[i].n) {
      fprintf(stderr, "cannot write %s\n", p);
      return 1;
    }
    fclose(f);
  }
  return 0;
}

int main(int argc, char **argv) {
  buf sh = shard(2), sh3 = shard(3), cf = cifar();
  buf seeds[] = {
      seed_jpeg(0, 24, 16, 3, 0),
      seed_jpeg(0, 20, 20, 3, JFIX_PROGRESSIVE),
      seed_jpeg(0, 17, 9, 1, 0),
      seed_jpeg(0, 8, 8, 4, 0),
      seed_jpeg(0, 9, 7, 4, JFIX_YCCK | JFIX_PROGRESSIVE),
      seed_jpeg(1, 40, 30, 3, 0),
      seed_jpeg(1, 30, 44, 3, JFIX_PROGRESSIVE),
      sh,
      gzip_of(2, sh.p + 1, sh.n - 1, 2),
      sh3,
      gzip_of(4, (const uint8_t *)"gzip stream in two members, some text to compress", 50, 2),
      cf,
      gzip_of(5, cf.p + 1, cf.n - 1, 2),
  };
  if (argc > 1) {
    int rc = write_seeds(argv[1], seeds, sizeof seeds / sizeof seeds[0]);
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
      free(seeds[i].p);
    return rc;
  }
  long runs = 0;
  gp_rng r;
  gp_rng_seed(&r, 17);
  uint8_t *m = malloc(1 << 20);
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    buf s = seeds[i];
    if (s.n < 20 || !seed_ok(&s)) {
      printf("FAIL: seed %zu was not made or is invalid (%s)\n0 passed, 1 failed\n", i,
             gp_error_message());
      return 1;
    }
    for (size_t len = 1; len <= s.n; len += 1 + len / 64, runs++) /* truncations */
      LLVMFuzzerTestOneInput(s.p, len);
    for (size_t pos = 1; pos < s.n && pos < 600; pos++, runs++) { /* a changed byte */
      memcpy(m, s.p, s.n);
      m[pos] ^= (uint8_t)(1 + gp_rng_below(&r, 255));
      LLVMFuzzerTestOneInput(m, s.n);
    }
    for (int k = 0; k < 2500; k++, runs++) { /* random edits */
      memcpy(m, s.p, s.n);
      for (int e = 0; e < 3; e++)
        m[1 + gp_rng_below(&r, s.n - 1)] = (uint8_t)gp_rng_below(&r, 256);
      LLVMFuzzerTestOneInput(m, s.n);
    }
    free(s.p);
  }
  free(m);
  printf("%ld inputs decoded or refused without a crash\n1 passed, 0 failed\n", runs);
  return 0;
}
