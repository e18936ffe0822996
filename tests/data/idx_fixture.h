/* Test helpers: write small IDX files (plain or gzipped) and damaged variants of them. */
#ifndef GP_TEST_IDX_FIXTURE_H
#define GP_TEST_IDX_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

/* IDX header for type/dims followed by data (data_bytes bytes, already big-endian).
 * gz: 0 plain, 1 gzip, 2 gzip in two members. Exits the test on failure to write. */
void idx_write(const char *path, int gz, int type, int ndim, const uint32_t *dims, const void *data,
               size_t data_bytes);
/* u8 images [n, side, side]: pixel k of image i = (i * 7 + k * 13) % 256, pixel 0 = i % 256. */
void idx_write_images(const char *path, int gz, uint32_t n, uint32_t side);
/* u8 labels [n]: label i = i % classes. */
void idx_write_labels(const char *path, int gz, uint32_t n, int classes);
uint8_t idx_pixel(uint32_t i, uint32_t k);
/* Whole-file helpers. */
unsigned char *file_read(const char *path, size_t *n);
void file_write(const char *path, const void *p, size_t n);
void file_truncate(const char *path, size_t n);

#endif
