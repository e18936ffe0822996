/* The fuzz entry points' temporary files: parsers that take a path get the input there. */
#ifndef GP_TEST_FUZZ_TMP_H
#define GP_TEST_FUZZ_TMP_H

#include <stddef.h>
#include <stdint.h>

/* Writes d[0..n) to a new file /tmp/gp-fuzz-TAG-PID-XXXXXX, its name in path (cap >= 64).
 * Returns 0, or -1 when no file could be made (the caller skips the input). */
int fuzz_tmp_write(const char *tag, const uint8_t *d, size_t n, char *path, size_t cap);

#endif
