/* The real Fashion-MNIST files from Debian's dataset-fashion-mnist, when installed: both
 * splits open with their published sizes, and the train pixel mean is the published 0.2860.
 * Exits 77 (skipped) when the files are absent. Usage: test_fashion_real [DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/loader.h"

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  char probe[600];
  snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
  if (access(probe, R_OK) != 0) {
    printf("skipped: %s is not installed\n", probe);
    return 77;
  }
  int fail = 0;
  gp_data_spec s;
  memset(&s, 0, sizeof s);
  s.dataset = GP_DATA_FASHION_MNIST;
  snprintf(s.path, sizeof s.path, "%s", dir);
  gp_loader *train = NULL, *test = NULL;
  if (gp_loader_open(&s, GP_SPLIT_TRAIN, 1, NULL, &train) != GP_OK ||
      gp_loader_open(&s, GP_SPLIT_TEST, 1, NULL, &test) != GP_OK) {
    fprintf(stderr, "FAIL: %s\n", gp_error_message());
    gp_loader_free(train);
    return 1;
  }
  if (gp_loader_samples(train) != 60000 || gp_loader_samples(test) != 10000) {
    fprintf(stderr, "FAIL: %lld train and %lld test samples, expected 60000 and 10000\n",
            (long long)gp_loader_samples(train), (long long)gp_loader_samples(test));
    fail = 1;
  }
  /* One epoch in batches of 1000 visits every train sample once (60000 = 60 x 1000). */
  enum { B = 1000 };
  float *x = malloc(sizeof(float) * B * 784);
  int32_t y[B];
  double sum = 0;
  long hist[10] = {0};
  for (int b = 0; b < 60 && !fail; b++) {
    int64_t got = 0;
    if (gp_loader_next(train, B, x, y, &got) != GP_OK || got != B) {
      fprintf(stderr, "FAIL: batch %d: %s\n", b, gp_error_message());
      fail = 1;
    }
    for (int i = 0; i < B * 784; i++)
      sum += x[i];
    for (int i = 0; i < B; i++)
      hist[y[i]]++;
  }
  double mean = sum / (60000.0 * 784.0);
  printf("train pixel mean %.4f\n", mean);
  if (!fail && (mean < 0.2850 || mean > 0.2870)) {
    fprintf(stderr, "FAIL: train pixel mean %.4f, expected 0.2860 +- 0.001\n", mean);
    fail = 1;
  }
  for (int c = 0; c < 10 && !fail; c++)
    if (hist[c] != 6000) {
      fprintf(stderr, "FAIL: class %d has %ld train samples, expected 6000\n", c, hist[c]);
      fail = 1;
    }
  free(x);
  gp_loader_free(train);
  gp_loader_free(test);
  return fail;
}
