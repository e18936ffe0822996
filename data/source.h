/* The data sets behind a loader (internal to data/). A source either has random access to
 * n samples (in-memory MNIST/CIFAR, synthetic, an ImageFolder's file list: the loader
 * orders them by a per-epoch permutation) or is a stream of encoded records read shard by
 * shard (WebDataset: the loader reorders them through a shuffle buffer). The loader's
 * reader thread calls read; its worker threads call decode, which must be thread-safe and
 * a pure function of its arguments, so that batches do not depend on the thread count. */
#ifndef GP_DATA_SOURCE_H
#define GP_DATA_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/spec/spec.h"
#include "core/status.h"
#include "data/loader.h"

#define GP_WHERE_MAX 256

/* One sample of a batch, as the reader hands it to a worker. */
typedef struct gp_item {
  int64_t sample;  /* the id augmentation draws from: dataset index, or position in the epoch */
  int64_t ref;     /* random access: dataset index */
  size_t off, len; /* streams: the encoded bytes, in the batch's byte buffer */
  int32_t label;   /* streams: the record's label */
  char where[GP_WHERE_MAX]; /* streams: "shard: member" for messages */
} gp_item;

/* A record read from a stream; bytes owned by the record and reused. */
typedef struct gp_record {
  uint8_t *bytes;
  size_t len, cap;
  int32_t label;
  char where[GP_WHERE_MAX];
} gp_record;

/* Per-worker scratch memory that decode may grow and reuse; freed by the loader. */
typedef struct gp_scratch {
  void *p[4];
  size_t cap[4];
  void (*free_fn)(struct gp_scratch *s);
} gp_scratch;

typedef struct gp_source gp_source;
struct gp_source {
  int64_t n; /* samples (random access), or -1 for a stream of unknown length */
  int stream;
  int heavy;      /* decoding is costly (JPEG): more worker threads by default */
  int64_t n_hint; /* streams: samples per epoch when the user said (0 = unknown) */
  int64_t classes;
  gp_shape sample;
  int64_t numel;
  const char *name;  /* for messages: "cifar10", "imagenet" */
  const char *where; /* for messages: what is read ("data.train_shards '...', 3 shards", a file
                      * or folder, with a data.*_limit that cut it); NULL: generated */
  /* Streams: restart at the first record of an epoch, reading only replica r of R; sets
   * *by_sample when there are fewer shards than replicas, so the loader must instead keep
   * every R-th record. */
  gp_status (*epoch_begin)(gp_source *s, int64_t epoch, int replica, int replicas, int *by_sample);
  /* Streams: the next record in shard order; *end at the end of the epoch's shards. */
  gp_status (*next)(gp_source *s, gp_record *r, int *end);
  /* Streams: give up on the rest of the current shard after a read error (counted skip). */
  void (*skip_shard)(gp_source *s);
  /* One sample into x (numel floats) and *y. bytes is the item's record for streams. */
  gp_status (*decode)(const gp_source *s, const gp_item *it, const uint8_t *bytes, int64_t epoch,
                      gp_scratch *scratch, float *x, int32_t *y);
  /* The label decode would give *y (with its checks), without decoding the sample: for the
   * rows a caller does not read (gp_loader_want). */
  gp_status (*label)(const gp_source *s, const gp_item *it, int32_t *y);
  void (*free)(gp_source *s);
};

/* Constructors (data/source_mem.c, data/source_image.c). */
gp_status gp_source_open_mem(const gp_data_spec *spec, gp_split split, uint64_t seed,
                             gp_source **out);
gp_status gp_source_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, gp_source **out);
gp_status gp_source_open_imagenet(const gp_data_spec *spec, gp_split split, uint64_t seed,
                                  gp_source **out);

void gp_record_free(gp_record *r);
/* Grows r to hold n bytes. */
gp_status gp_record_reserve(gp_record *r, size_t n);

#endif
