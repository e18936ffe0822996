/* safetensors: read and write weights in the format other frameworks load.
 * Layout: u64 LE header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [b, e]}, "__metadata__": {str: str}}, then the data. */
#ifndef GP_SAFETENSORS_H
#define GP_SAFETENSORS_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct gp_st_entry {
  char *name;
  gp_dtype dtype;
  gp_shape shape;
  uint64_t begin, end; /* byte offsets into the data section */
} gp_st_entry;

typedef struct gp_st_file gp_st_file;

/* Reads and validates the whole file (header JSON, offsets inside the file, no overlap,
 * sizes = numel * dtype size). Errors name the file: GP_ERR_IO if it cannot be read,
 * GP_ERR_DATA if it is malformed. */
gp_status gp_st_read(const char *path, gp_st_file **out);
/* gp_st_read of the header alone (names, dtypes, shapes, metadata): the data is not read, and
 * gp_st_data gives NULL. For an index over shards, which checks every shard it names. */
gp_status gp_st_read_header(const char *path, gp_st_file **out);
void gp_st_free(gp_st_file *f);
int gp_st_count(const gp_st_file *f);
const gp_st_entry *gp_st_entry_at(const gp_st_file *f, int i);
const gp_st_entry *gp_st_find(const gp_st_file *f, const char *name); /* NULL if absent */
const void *gp_st_data(const gp_st_file *f, const gp_st_entry *e);
const char *gp_st_meta(const gp_st_file *f, const char *key); /* NULL if absent */

typedef struct gp_st_writer gp_st_writer;

gp_st_writer *gp_st_writer_new(void); /* NULL on out of memory */
void gp_st_writer_free(gp_st_writer *w);
/* Records a tensor; data is host memory that must stay valid until gp_st_write returns.
 * Tensors are written in the order added. Duplicate names are an error. */
gp_status gp_st_add(gp_st_writer *w, const char *name, gp_dtype dtype, const gp_shape *shape,
                    const void *data);
gp_status gp_st_meta_set(gp_st_writer *w, const char *key, const char *value);
/* Writes atomically: path.tmp, fsync, rename, fsync of the directory. */
gp_status gp_st_write(gp_st_writer *w, const char *path);

/* What a writer holds, in the order added (core/io/shards.c splits it into shards). */
int gp_st_writer_count(const gp_st_writer *w);
/* Tensor i: its entry (begin = 0, end = its size in bytes) and its data. */
void gp_st_writer_at(const gp_st_writer *w, int i, gp_st_entry *e, const void **data);
int gp_st_writer_meta_count(const gp_st_writer *w);
void gp_st_writer_meta_at(const gp_st_writer *w, int i, const char **key, const char **value);

#endif
