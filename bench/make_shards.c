/* Writes an ImageNet-like WebDataset set for loader benchmarks: DIR/train-{000..S-1}.tar with
 * N JPEGs each (W x H photo-like content, quality 90, labels i % 1000) and
 * DIR/classes.txt. Usage: bench-make-shards DIR S N W H */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/data/jpeg_fixture.h"
#include "tests/data/tar_fixture.h"

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: bench-make-shards DIR SHARDS PER_SHARD WIDTH HEIGHT\n");
    return 2;
  }
  const char *dir = argv[1];
  int shards = atoi(argv[2]), per = atoi(argv[3]), w = atoi(argv[4]), h = atoi(argv[5]);
  if (shards < 1 || per < 1 || w < 8 || h < 8 || w > 8192 || h > 8192) {
    fprintf(stderr, "bench-make-shards: bad sizes\n");
    return 2;
  }
  mkdir(dir, 0755);
  uint8_t *px = malloc((size_t)w * h * 3);
  char path[1024], name[64], cls[16];
  size_t bytes = 0;
  for (int s = 0; s < shards; s++) {
    buf t = {0};
    for (int i = 0; i < per; i++) {
      int k = s * per + i;
      size_t n;
      jfix_photo(px, w, h, (uint64_t)k + 1);
      uint8_t *jpg = jfix_encode(px, w, h, 3, 90, 0, &n);
      if (!jpg) return 1;
      snprintf(name, sizeof name, "%08d.jpg", k);
      member(&t, name, jpg, n);
      snprintf(name, sizeof name, "%08d.cls", k);
      snprintf(cls, sizeof cls, "%d", k % 1000);
      member(&t, name, cls, strlen(cls));
      bytes += n;
      free(jpg);
    }
    static const uint8_t z[1024];
    put(&t, z, sizeof z);
    snprintf(path, sizeof path, "%s/train-%03d.tar", dir, s);
    write_file(path, t.p, t.n);
    free(t.p);
  }
  FILE *f = fopen((snprintf(path, sizeof path, "%s/classes.txt", dir), path), "w");
  for (int c = 0; f && c < 1000; c++)
    fprintf(f, "n%08d\n", c);
  if (f) fclose(f);
  free(px);
  printf("%d shards x %d JPEGs of %dx%d, %.1f KB per JPEG on average\n", shards, per, w, h,
         (double)bytes / 1024.0 / ((double)shards * per));
  return 0;
}
