/* Fuzz target for the ImageNet data path (libFuzzer's entry point): the first byte picks —
 * JPEG decode (full size and DCT-scaled), gp_imagenet_sample (train and eval), a WebDataset
 * shard, a raw tar walk, a raw gzip stream, a CIFAR-10 archive or .bin file — and the rest
 * is the input. Any bytes must be read
 * or refused with a message, never crash, hang or leak. Also built into
 * test_fuzz_images_corpus, which runs it over deterministic mutations of valid seeds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "data/cifar.h"
#include "data/gzstream.h"
#include "data/imgaug.h"
#include "data/jpeg.h"
#include "data/tar.h"
#include "data/wds.h"
#include "tests/data/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decoding is linear in the declared pixel count; the library accepts up to 2^28 (0.8 GB of
 * RGB), which would only measure the fuzzer's memory limit. */
#define FUZZ_MAX_PIXELS (1 << 22)

/* A refusal must say something: an empty message is a bug, so crash for the fuzzer. */
static void refused(gp_status s) {
  if (s != GP_OK && gp_error_message()[0] == 0) abort();
}

static int small_enough(const uint8_t *d, size_t n) {
  int w = 0, h = 0;
  gp_status s = gp_jpeg_info(d, n, "fuzz.jpg", &w, &h);
  refused(s);
  return s == GP_OK && (int64_t)w * h <= FUZZ_MAX_PIXELS;
}

static void jpeg(const uint8_t *d, size_t n) {
  if (!small_enough(d, n)) return;
  gp_image img = {0};
  gp_status s = gp_jpeg_decode(d, n, 0, "fuzz.jpg", &img);
  refused(s);
  if (s == GP_OK && (img.w <= 0 || img.h <= 0 || !img.px)) abort();
  refused(gp_jpeg_decode(d, n, 24, "fuzz.jpg", &img));
  gp_image_free(&img);
}

static void sample(const uint8_t *d, size_t n) {
  if (!small_enough(d, n)) return;
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  float out[3 * 32 * 32];
  gp_image img = {0};
  for (int train = 0; train < 2; train++)
    refused(gp_imagenet_sample(d, n, train, 1, 2, 3, 32, mean, sd, &img, out, "fuzz.jpg"));
  gp_image_free(&img);
}

static gp_status with_file(const uint8_t *d, size_t n, int kind) {
  char path[64];
  if (fuzz_tmp_write("img", d, n, path, sizeof path) != 0) return GP_OK;
  gp_status s = GP_OK;
  if (kind == 2) {
    gp_wds *w = NULL;
    s = gp_wds_open(path, &w);
    gp_wds_sample smp;
    while (s == GP_OK && (s = gp_wds_next(w, &smp)) == GP_OK && smp.key) {
      if (!smp.jpg || !smp.where || !smp.label_where || smp.label < 0) abort();
      refused(gp_wds_check_label(&smp, 10));
    }
    gp_wds_close(w);
  } else if (kind == 3) {
    gp_tar *t = NULL;
    s = gp_tar_open(path, &t);
    const char *name = NULL;
    uint64_t size = 0;
    uint8_t buf[4096];
    while (s == GP_OK && (s = gp_tar_next(t, &name, &size)) == GP_OK && name) {
      size_t got = sizeof buf;
      while (s == GP_OK && got == sizeof buf) /* read every other member's data */
        s = size % 2 ? gp_tar_read(t, buf, sizeof buf, &got) : (got = 0, GP_OK);
    }
    gp_tar_close(t);
  } else if (kind == 5) {
    /* the file as cifar-10-binary.tar(.gz), or as an extracted data_batch_1.bin */
    uint8_t *px = NULL, *lb = NULL;
    int64_t n = 0;
    s = gp_cifar_read(path, 10, 0, 1, 64, &px, &lb, &n);
    for (int64_t i = 0; s == GP_OK && i < n; i++)
      if (lb[i] >= 10) abort();
    free(px);
    free(lb);
  } else {
    gp_gzstream *g = NULL;
    s = gp_gzstream_open(path, &g);
    uint8_t buf[4096];
    size_t got = sizeof buf;
    while (s == GP_OK && got == sizeof buf)
      s = gp_gzstream_read(g, buf, sizeof buf, &got);
    gp_gzstream_close(g);
  }
  unlink(path);
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  gp_error_clear();
  int kind = data[0] % 6;
  if (kind == 0)
    jpeg(data + 1, size - 1);
  else if (kind == 1)
    sample(data + 1, size - 1);
  else
    refused(with_file(data + 1, size - 1, kind));
  return 0;
}
