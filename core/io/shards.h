/* Sets of named tensors of any size: one safetensors file, or Hugging Face-style shards and an
 * index beside them (X.safetensors.index.json = {"metadata": {"total_size": N, ...strings},
 * "weight_map": {tensor: shard file}}), written so that a crash leaves the old set or the new
 * one whole, and read by name across shards. */
#ifndef GP_SHARDS_H
#define GP_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "core/io/safetensors.h"

/* --save-shard-size's default: the largest file written before the set is sharded */
#define GP_SHARD_BYTES_DEFAULT ((int64_t)4 << 30)

/* An index: its weight_map in order (file names are in the index's folder), its metadata
 * strings, and total_size (the bytes of tensor data of all shards). Zeroed is empty. */
typedef struct gp_shard_index {
  int n, cap;
  char **names, **files;
  int n_meta, meta_cap;
  char **meta_keys, **meta_values;
  uint64_t total_size;
} gp_shard_index;

void gp_shard_index_free(gp_shard_index *ix); /* leaves it zeroed */
gp_status gp_shard_index_add(gp_shard_index *ix, const char *name, const char *file);
gp_status gp_shard_index_meta_set(gp_shard_index *ix, const char *key, const char *value);
const char *gp_shard_index_meta(const gp_shard_index *ix, const char *key); /* NULL: absent */
/* Whether ix names `file` among its shards. */
int gp_shard_index_has_file(const gp_shard_index *ix, const char *file);
/* Parses and checks an index: JSON, a weight_map object of strings, shard names that are plain
 * file names (no folder, so removing a replaced set's files never leaves its folder). The
 * shards are not opened (gp_shards_open checks them). GP_ERR_IO when it cannot be read,
 * GP_ERR_DATA in one line naming path otherwise. */
gp_status gp_shard_index_read(const char *path, gp_shard_index *out);
/* Writes ix to path through a temporary file, fsynced, renamed and the folder synced: the
 * commit of a sharded set. */
gp_status gp_shard_index_write(const gp_shard_index *ix, const char *path);

/* w's tensors as shards dir/STEM-00001-of-0000N.safetensors, in order, each with at most
 * shard_bytes of tensor data (a larger tensor goes alone), each fsynced and renamed into place;
 * every tensor and its file go into ix, their bytes into ix->total_size. Nothing is committed:
 * no index is written. */
gp_status gp_shards_write_files(const gp_st_writer *w, const char *dir, const char *stem,
                                int64_t shard_bytes, gp_shard_index *ix);

/* Writes w (tensors and metadata) as path (X.safetensors), replacing what was there: one file
 * when its tensor data is at most shard_bytes, else shards named X-0000k-of-0000N.safetensors
 * beside it and X.safetensors.index.json with w's metadata. The commit is one rename (of the
 * file, or of the index); the files of the set it replaces are removed only after it (an index
 * replaced by one file: the index first, so that from then on the file is what is read). */
gp_status gp_shards_write(const gp_st_writer *w, const char *path, int64_t shard_bytes);

/* path + ".index.json" into out. */
gp_status gp_shards_index_path(const char *path, char *out, size_t n);
/* Unlinks the shards that old names in dir and keep (NULL: nothing) does not; returns how
 * many went. */
int gp_shards_remove(const gp_shard_index *old, const gp_shard_index *keep, const char *dir);

/* A set opened for reading: X.safetensors itself, or its index (X.safetensors.index.json,
 * given as such or found beside an X.safetensors; where both exist the index is the set, see
 * gp_shards_write). Opening an index reads every shard's header and checks the weight_map
 * against them; tensor data is read a shard at a time, when first asked for. */
typedef struct gp_shards gp_shards;
gp_status gp_shards_open(const char *path, gp_shards **out);
void gp_shards_free(gp_shards *s);
const char *gp_shards_path(const gp_shards *s); /* the file opened (the index, when sharded) */
int gp_shards_sharded(const gp_shards *s);
/* The metadata: the file's __metadata__, or the index's metadata strings. NULL: absent. */
const char *gp_shards_meta(const gp_shards *s, const char *key);
int gp_shards_count(const gp_shards *s);
const char *gp_shards_name(const gp_shards *s, int i);
/* The tensor's dtype and shape (NULL: no such tensor); no data is read. */
const gp_st_entry *gp_shards_find(const gp_shards *s, const char *name);
/* The tensor and its data (*e NULL: no such tensor), reading its shard if not yet read. */
gp_status gp_shards_get(gp_shards *s, const char *name, const gp_st_entry **e, const void **data);

#endif
