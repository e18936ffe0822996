/* Data loaders: batches of (inputs, labels) on the host, from a dataset's files or
 * synthetic. Worker threads decode and augment the next batches into a bounded queue while
 * the caller trains; which thread decodes a sample never changes what it decodes, so the
 * batches are a function of (data, seed) alone.
 *
 * Training splits: random-access data sets (MNIST, CIFAR, an ImageFolder) visit a fresh
 * permutation each epoch derived from (seed, epoch); streamed shards (WebDataset) are read
 * in a per-epoch shard order through a shuffle buffer. The last partial batch of an epoch
 * is dropped, so a position (epoch, index) is all a checkpoint needs to resume the exact
 * same batches. Evaluation splits are read in order and end with a partial batch.
 * Replica r of R (data parallelism) sees a disjoint 1/R of every epoch. */
#ifndef GP_LOADER_H
#define GP_LOADER_H

#include <stdint.h>

#include "core/spec/spec.h"

typedef struct gp_loader gp_loader;

typedef enum gp_split { GP_SPLIT_TRAIN, GP_SPLIT_TEST } gp_split;

typedef struct gp_loader_opts {
  int workers;            /* decode threads: -1 automatic, 0 on the caller's thread */
  int prefetch;           /* batches prepared ahead (>= 1; 0 = 3) */
  int64_t shuffle_buffer; /* streams: records the train order is drawn from (0 = 2048) */
  int64_t max_skips;      /* bad samples replaced, counted, before it is an error */
  int replica, replicas;  /* this is replica `replica` of `replicas` (0 of 1) */
} gp_loader_opts;

/* The options a data section asks for. */
gp_loader_opts gp_loader_opts_of(const gp_data_spec *spec);

/* Opens a dataset split as the data section says (path "" = the dataset's default place,
 * e.g. /usr/share/datasets/fashion-mnist). Missing, truncated, corrupt or mismatched files
 * give GP_ERR_DATA naming the file. opts NULL = gp_loader_opts_of(spec). */
gp_status gp_loader_open(const gp_data_spec *spec, gp_split split, uint64_t seed,
                         const gp_loader_opts *opts, gp_loader **out);
/* Random inputs (uniform in [-1, 1), normalization ignored) and labels in [0, classes). */
gp_status gp_loader_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, const gp_loader_opts *opts,
                                   gp_loader **out);
void gp_loader_free(gp_loader *l);

/* Samples in the split as this replica sees it; -1 for streamed shards whose size is not
 * known (data.train_samples says it). */
int64_t gp_loader_samples(const gp_loader *l);
gp_shape gp_loader_sample_shape(const gp_loader *l); /* per sample, e.g. [1, 28, 28] */
int64_t gp_loader_classes(const gp_loader *l);
/* For messages: the data set ("fashion-mnist") and what is read (a file, folder or shard list,
 * with a data.*_limit that cut it); NULL for generated data. */
const char *gp_loader_name(const gp_loader *l);
const char *gp_loader_where(const gp_loader *l);

/* Next batch of up to max_batch samples into x (f32, batch x sample) and y (int32).
 * Train: always max_batch (a new epoch starts, reshuffled, when fewer remain);
 * test: *got < max_batch at the end, then 0 once, then the next pass. A bad sample
 * (undecodable, label out of range) is an error naming the file and member, unless
 * max_skips allows it: then it is counted and replaced by another sample of the batch. */
gp_status gp_loader_next(gp_loader *l, int64_t max_batch, float *x, int32_t *y, int64_t *got);
/* Position for checkpoints: epoch (from 0) and the index of the next sample in it. */
void gp_loader_tell(const gp_loader *l, int64_t *epoch, int64_t *index);
gp_status gp_loader_seek(gp_loader *l, int64_t epoch, int64_t index);

/* What the caller reads of each batch from the next one on (several processes: see
 * gp_batch_source_want): with images 0 no sample is decoded; else only the rows of share
 * `replica` of `replicas` of each batch (gp_batch_share) are decoded, augmented and written to
 * x, and x's other rows are left as they were. Every row's label is read all the same. Those
 * rows are what the whole batch's decode gives, a skipped sample's stand-in included (a row
 * not read is decoded when a bad row read needs it in its place); bad samples are counted (and
 * max_skips applies) among the rows read, and a row not read has its own label unless that is
 * bad. GP_ERR_USAGE when replica is not in [0, replicas). */
gp_status gp_loader_want(gp_loader *l, int images, int replica, int replicas);

typedef struct gp_loader_stats {
  int workers;     /* decode threads in use */
  double wait_s;   /* the caller's time blocked in gp_loader_next */
  int64_t batches; /* returned so far */
  int64_t samples;
  int64_t skipped;      /* bad samples replaced */
  int64_t decoded;      /* samples decoded (not only labelled: gp_loader_want) */
  char first_skip[512]; /* the first skipped sample's error */
} gp_loader_stats;
void gp_loader_stats_get(const gp_loader *l, gp_loader_stats *out);

#endif
