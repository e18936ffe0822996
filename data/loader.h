/* Data loaders: batches of (inputs, labels) on the host, from a dataset's files or
 * synthetic. Training splits reshuffle every epoch from (seed, epoch) and drop the last
 * partial batch, so a position (epoch, index) is enough to resume exactly. Evaluation
 * splits are read in order and end with a partial batch. */
#ifndef GP_LOADER_H
#define GP_LOADER_H

#include <stdint.h>

#include "core/spec/spec.h"

typedef struct gp_loader gp_loader;

typedef enum gp_split { GP_SPLIT_TRAIN, GP_SPLIT_TEST } gp_split;

/* Opens a dataset split as the data section says (path "" = the dataset's default place,
 * e.g. /usr/share/datasets/fashion-mnist). Missing, truncated, corrupt or mismatched files
 * give GP_ERR_DATA naming the file. */
gp_status gp_loader_open(const gp_data_spec *spec, gp_split split, uint64_t seed, gp_loader **out);
/* Random inputs (uniform in [-1, 1), normalization ignored) and labels in [0, classes). */
gp_status gp_loader_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, gp_loader **out);
void gp_loader_free(gp_loader *l);

int64_t gp_loader_samples(const gp_loader *l);       /* samples in the split */
gp_shape gp_loader_sample_shape(const gp_loader *l); /* per sample, e.g. [1, 28, 28] */
int64_t gp_loader_classes(const gp_loader *l);

/* Next batch of up to max_batch samples into x (f32, batch x sample) and y (int32).
 * Train: always max_batch (a new epoch starts, reshuffled, when fewer remain);
 * test: *got < max_batch at the end, then 0. */
gp_status gp_loader_next(gp_loader *l, int64_t max_batch, float *x, int32_t *y, int64_t *got);
/* Position for checkpoints: epoch (from 0) and the index of the next sample in it. */
void gp_loader_tell(const gp_loader *l, int64_t *epoch, int64_t *index);
gp_status gp_loader_seek(gp_loader *l, int64_t epoch, int64_t index);

#endif
