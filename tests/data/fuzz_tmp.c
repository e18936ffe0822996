#include "tests/data/fuzz_tmp.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int fuzz_tmp_write(const char *tag, const uint8_t *d, size_t n, char *path, size_t cap) {
  snprintf(path, cap, "/tmp/gp-fuzz-%s-%d-XXXXXX", tag, (int)getpid());
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, d + off, n - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  return 0;
}
