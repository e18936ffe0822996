/* CIFAR-10 and CIFAR-100 in their binary distribution: the .tar.gz as downloaded (read as a
 * stream) or a directory holding the extracted .bin files. */
#ifndef GP_CIFAR_H
#define GP_CIFAR_H

#include <stdint.h>

#include "core/status.h"

#define GP_CIFAR_SIDE 32
#define GP_CIFAR_PIXELS (3 * GP_CIFAR_SIDE * GP_CIFAR_SIDE) /* planes R, G, B, row by row */

/* Reads the train (data batches 1..5, or train.bin) or test split of CIFAR-`classes`
 * (10 or 100; CIFAR-100 gives fine labels, or the 20 coarse ones when coarse) found at path: the
 * archive itself, a directory with the archive, or a directory with the .bin files (directly or in
 * the archive's folder). limit > 0 keeps the first limit samples. *pixels (n x GP_CIFAR_PIXELS) and
 * *labels (n) are malloc'ed. */
gp_status gp_cifar_read(const char *path, int classes, int coarse, int train, int64_t limit,
                        uint8_t **pixels, uint8_t **labels, int64_t *n);

#endif
