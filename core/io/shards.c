/* Tensor sets as one safetensors file or as shards and an index (Hugging Face's layout), so
 * that checkpoints of any size stay files a reader can take one at a time, and a set written
 * by several processes (each its own shards) is committed by one rename of the index. */
#include "core/io/shards.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/json.h"
#include "core/io/target.h"

/* An index this large is not one (a 6B-parameter model's is well under a megabyte). */
#define IX_MAX_BYTES ((long)256 << 20)

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ---- the index ---- */

void gp_shard_index_free(gp_shard_index *ix) {
  if (!ix) return;
  for (int i = 0; i < ix->n; i++) {
    free(ix->names[i]);
    free(ix->files[i]);
  }
  for (int i = 0; i < ix->n_meta; i++) {
    free(ix->meta_keys[i]);
    free(ix->meta_values[i]);
  }
  free(ix->names);
  free(ix->files);
  free(ix->meta_keys);
  free(ix->meta_values);
  memset(ix, 0, sizeof *ix);
}

/* Room for one more pair in a and b (cap entries, grown together). */
static int grow2(char ***a, char ***b, int n, int *cap) {
  if (n < *cap) return 1;
  int nc = *cap ? *cap * 2 : 64;
  char **x = realloc(*a, (size_t)nc * sizeof *x);
  if (!x) return 0;
  *a = x;
  char **y = realloc(*b, (size_t)nc * sizeof *y);
  if (!y) return 0;
  *b = y;
  *cap = nc;
  return 1;
}

static gp_status put2(char ***a, char ***b, int *n, int *cap, const char *x, const char *y) {
  if (!grow2(a, b, *n, cap)) return GP_ERR(GP_ERR_NOMEM, "out of memory for a shard index");
  char *dx = dup_str(x), *dy = dup_str(y);
  if (!dx || !dy) {
    free(dx);
    free(dy);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a shard index");
  }
  (*a)[*n] = dx;
  (*b)[*n] = dy;
  (*n)++;
  return GP_OK;
}

gp_status gp_shard_index_add(gp_shard_index *ix, const char *name, const char *file) {
  return put2(&ix->names, &ix->files, &ix->n, &ix->cap, name, file);
}

gp_status gp_shard_index_meta_set(gp_shard_index *ix, const char *key, const char *value) {
  for (int i = 0; i < ix->n_meta; i++)
    if (strcmp(ix->meta_keys[i], key) == 0) {
      char *v = dup_str(value);
      if (!v) return GP_ERR(GP_ERR_NOMEM, "out of memory for a shard index");
      free(ix->meta_values[i]);
      ix->meta_values[i] = v;
      return GP_OK;
    }
  return put2(&ix->meta_keys, &ix->meta_values, &ix->n_meta, &ix->meta_cap, key, value);
}

const char *gp_shard_index_meta(const gp_shard_index *ix, const char *key) {
  for (int i = 0; i < ix->n_meta; i++)
    if (strcmp(ix->meta_keys[i], key) == 0) return ix->meta_values[i];
  return NULL;
}

int gp_shard_index_has_file(const gp_shard_index *ix, const char *file) {
  for (int i = 0; i < ix->n; i++)
    if (strcmp(ix->files[i], file) == 0) return 1;
  return 0;
}

/* A shard is named by a plain file name in the index's folder. */
static int plain_name(const char *f) {
  return *f && !strchr(f, '/') && strcmp(f, ".") != 0 && strcmp(f, "..") != 0;
}

static gp_status parse_index(const char *path, const gp_json *root, gp_shard_index *ix) {
  if (root->type != GP_JSON_OBJECT)
    return GP_ERR(GP_ERR_DATA, "%s: not a shard index (a JSON object with a weight_map)", path);
  const gp_json *map = gp_json_get(root, "weight_map"), *meta = gp_json_get(root, "metadata");
  if (!map || map->type != GP_JSON_OBJECT)
    return GP_ERR(GP_ERR_DATA, "%s: not a shard index (%s)", path,
                  map ? "weight_map is not an object" : "no weight_map");
  for (int64_t i = 0; i < map->n; i++) {
    const gp_json *v = &map->items[i];
    if (v->type != GP_JSON_STRING)
      return GP_ERR(GP_ERR_DATA, "%s: weight_map: '%s' is mapped to a %s, not a file name", path,
                    map->keys[i], gp_json_type_name(v->type));
    if (!map->keys[i][0]) return GP_ERR(GP_ERR_DATA, "%s: weight_map: an empty tensor name", path);
    if (!plain_name(v->str))
      return GP_ERR(GP_ERR_DATA,
                    "%s: weight_map: '%s' is mapped to '%s', not a file in the index's folder",
                    path, map->keys[i], v->str);
    GP_TRY(gp_shard_index_add(ix, map->keys[i], v->str));
  }
  if (meta && meta->type != GP_JSON_OBJECT)
    return GP_ERR(GP_ERR_DATA, "%s: metadata is not an object", path);
  for (int64_t i = 0; meta && i < meta->n; i++) {
    const gp_json *v = &meta->items[i];
    if (strcmp(meta->keys[i], "total_size") == 0) {
      if (v->type != GP_JSON_NUMBER || !v->is_uint)
        return GP_ERR(GP_ERR_DATA, "%s: metadata: total_size is not an integer >= 0", path);
      ix->total_size = v->u;
    } else if (v->type == GP_JSON_STRING) { /* others' numbers (total_parameters) are theirs */
      GP_TRY(gp_shard_index_meta_set(ix, meta->keys[i], v->str));
    }
  }
  return GP_OK;
}

gp_status gp_shard_index_read(const char *path, gp_shard_index *out) {
  memset(out, 0, sizeof *out);
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return GP_ERR(GP_ERR_IO, "%s: not a regular file", path);
  FILE *fp = fopen(path, "rb");
  if (!fp) return GP_ERR(GP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  long len = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
  gp_status s = GP_OK;
  char *text = NULL;
  if (len < 0 || fseek(fp, 0, SEEK_SET) != 0)
    s = GP_ERR(GP_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  else if (len > IX_MAX_BYTES)
    s = GP_ERR(GP_ERR_DATA, "%s: %ld bytes, over the 256 MiB an index may have", path, len);
  else if (!(text = malloc((size_t)len + 1)))
    s = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  else if (fread(text, 1, (size_t)len, fp) != (size_t)len)
    s = GP_ERR(GP_ERR_IO, "%s: cannot read: %s", path, ferror(fp) ? strerror(errno) : "cut short");
  fclose(fp);
  gp_json *root = NULL;
  if (s == GP_OK) s = gp_json_parse(text, (size_t)len, path, &root);
  if (s == GP_OK) s = parse_index(path, root, out);
  gp_json_free(root);
  free(text);
  if (s != GP_OK) gp_shard_index_free(out);
  return s;
}

static gp_status write_index(FILE *f, void *ctx) {
  const gp_shard_index *ix = ctx;
  fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu", (unsigned long long)ix->total_size);
  for (int i = 0; i < ix->n_meta; i++) {
    fputs(",\n    ", f);
    gp_json_write_str(f, ix->meta_keys[i]);
    fputs(": ", f);
    gp_json_write_str(f, ix->meta_values[i]);
  }
  fputs("\n  },\n  \"weight_map\": {", f);
  for (int i = 0; i < ix->n; i++) {
    fputs(i ? ",\n    " : "\n    ", f);
    gp_json_write_str(f, ix->names[i]);
    fputs(": ", f);
    gp_json_write_str(f, ix->files[i]);
  }
  fputs(ix->n ? "\n  }\n}\n" : "}\n}\n", f);
  return GP_OK;
}

gp_status gp_shard_index_write(const gp_shard_index *ix, const char *path) {
  return gp_io_write_file(path, write_index, (void *)ix);
}

/* ---- writing ---- */

gp_status gp_shards_index_path(const char *path, char *out, size_t n) {
  int len = snprintf(out, n, "%s.index.json", path);
  if (len < 0 || (size_t)len >= n) return GP_ERR(GP_ERR_IO, "%s: path too long", path);
  return GP_OK;
}

/* Shard k (0-based) of each tensor of w: in order, a new shard when the next tensor would take
 * the current one past shard_bytes (Hugging Face's split). Returns the number of shards. */
static int split(const gp_st_writer *w, int64_t shard_bytes, int *shard_of) {
  int k = 0;
  uint64_t in = 0;
  for (int i = 0; i < gp_st_writer_count(w); i++) {
    gp_st_entry e;
    const void *d;
    gp_st_writer_at(w, i, &e, &d);
    if (in > 0 && in + e.end > (uint64_t)shard_bytes) {
      k++;
      in = 0;
    }
    in += e.end;
    shard_of[i] = k;
  }
  return k + 1;
}

static void shard_name(const char *stem, int k, int n, char *buf, size_t len) {
  snprintf(buf, len, "%.900s-%05d-of-%05d.safetensors", stem, k + 1, n);
}

gp_status gp_shards_write_files(const gp_st_writer *w, const char *dir, const char *stem,
                                int64_t shard_bytes, gp_shard_index *ix) {
  int n = gp_st_writer_count(w);
  int *shard_of = malloc(((size_t)n + 1) * sizeof *shard_of);
  if (!shard_of) return GP_ERR(GP_ERR_NOMEM, "out of memory writing shards");
  int shards = n ? split(w, shard_bytes > 0 ? shard_bytes : 1, shard_of) : 0;
  gp_status s = GP_OK;
  char name[1024], path[PATH_MAX + 1024];
  for (int k = 0, first = 0; k < shards && s == GP_OK; k++) {
    shard_name(stem, k, shards, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gp_st_writer *sw = gp_st_writer_new();
    if (!sw) s = GP_ERR(GP_ERR_NOMEM, "out of memory writing shards");
    int i = first;
    for (; s == GP_OK && i < n && shard_of[i] == k; i++) {
      gp_st_entry e;
      const void *d;
      gp_st_writer_at(w, i, &e, &d);
      s = gp_st_add(sw, e.name, e.dtype, &e.shape, d);
      if (s == GP_OK) s = gp_shard_index_add(ix, e.name, name);
      ix->total_size += e.end;
    }
    first = i;
    if (s == GP_OK) s = gp_st_meta_set(sw, "format", "pt");
    if (s == GP_OK) s = gp_st_write(sw, path);
    gp_st_writer_free(sw);
  }
  free(shard_of);
  return s;
}

int gp_shards_remove(const gp_shard_index *old, const gp_shard_index *keep, const char *dir) {
  int gone = 0;
  char path[PATH_MAX + 1024];
  for (int i = 0; i < old->n; i++) {
    const char *f = old->files[i];
    int seen = 0; /* each file once: the map names it per tensor */
    for (int j = 0; j < i && !seen; j++)
      seen = strcmp(old->files[j], f) == 0;
    if (seen || !plain_name(f) || (keep && gp_shard_index_has_file(keep, f))) continue;
    snprintf(path, sizeof path, "%s/%s", dir, f);
    gone += unlink(path) == 0;
  }
  return gone;
}

static uint64_t total_bytes(const gp_st_writer *w) {
  uint64_t t = 0;
  for (int i = 0; i < gp_st_writer_count(w); i++) {
    gp_st_entry e;
    const void *d;
    gp_st_writer_at(w, i, &e, &d);
    t += e.end;
  }
  return t;
}

/* Whether the shards of stem (n of them) would take a name old uses: then the old set's files
 * would be replaced before the commit. */
static int clashes(const gp_shard_index *old, const char *stem, int n) {
  char name[1024];
  for (int k = 0; k < n; k++) {
    shard_name(stem, k, n, name, sizeof name);
    if (gp_shard_index_has_file(old, name)) return 1;
  }
  return 0;
}

static gp_status write_sharded(const gp_st_writer *w, const char *path, const char *ixpath,
                               int64_t shard_bytes, gp_shard_index *old) {
  char dir[PATH_MAX], stem[1024];
  const char *base = gp_io_split_dir(path, dir, sizeof dir);
  size_t bl = strlen(base), sl = strlen(".safetensors");
  if (bl > sl && strcmp(base + bl - sl, ".safetensors") == 0) bl -= sl;
  snprintf(stem, sizeof stem, "%.*s", (int)(bl < 900 ? bl : 900), base);
  int *shard_of = malloc(((size_t)gp_st_writer_count(w) + 1) * sizeof *shard_of);
  if (!shard_of) return GP_ERR(GP_ERR_NOMEM, "out of memory writing shards");
  int n = split(w, shard_bytes, shard_of);
  free(shard_of);
  if (clashes(old, stem, n)) strcat(stem, "-b"); /* the old set used stem's names: it keeps them */
  gp_shard_index ix = {0};
  gp_status s = gp_shards_write_files(w, dir, stem, shard_bytes, &ix);
  for (int i = 0; s == GP_OK && i < gp_st_writer_meta_count(w); i++) {
    const char *k, *v;
    gp_st_writer_meta_at(w, i, &k, &v);
    s = gp_shard_index_meta_set(&ix, k, v);
  }
  if (s == GP_OK) s = gp_shard_index_write(&ix, ixpath); /* the commit */
  if (s == GP_OK) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) unlink(path); /* the file it replaces */
    gp_shards_remove(old, &ix, dir);
  }
  gp_shard_index_free(&ix);
  return s;
}

gp_status gp_shards_write(const gp_st_writer *w, const char *path, int64_t shard_bytes) {
  char ixpath[PATH_MAX + 16], dir[PATH_MAX];
  GP_TRY(gp_shards_index_path(path, ixpath, sizeof ixpath));
  gp_io_split_dir(path, dir, sizeof dir);
  gp_shard_index old = {0};
  struct stat st;
  int had_index = stat(ixpath, &st) == 0;
  /* a damaged index being replaced: its shards cannot be known, and stay */
  if (had_index && gp_shard_index_read(ixpath, &old) != GP_OK) gp_error_clear();
  gp_status s;
  if (total_bytes(w) > (uint64_t)(shard_bytes > 0 ? shard_bytes : 1)) {
    s = write_sharded(w, path, ixpath, shard_bytes > 0 ? shard_bytes : 1, &old);
  } else {
    s = gp_st_write((gp_st_writer *)w, path);
    /* the index goes first: while it is there it is what a reader takes */
    if (s == GP_OK && had_index) {
      if (unlink(ixpath) != 0 && errno != ENOENT)
        s = GP_ERR(GP_ERR_IO, "%s: written, but the index it replaces (%s) cannot be removed: %s",
                   path, ixpath, strerror(errno));
      else
        gp_shards_remove(&old, NULL, dir);
    }
  }
  gp_shard_index_free(&old);
  return s;
}

/* ---- reading ---- */

struct gp_shards {
  char *path;
  gp_st_file *single; /* one file; else an index: */
  gp_shard_index ix;
  int n_files;
  char **files;        /* distinct shard names */
  gp_st_file **hdr;    /* each shard's header (names, shapes) */
  gp_st_file **data;   /* each shard read whole, once a tensor of it is asked for */
  int *file_of;        /* ix entry -> files[] */
  struct named *order; /* ix entries sorted by name, for lookups */
};

typedef struct named {
  const char *name;
  int i;
} named;

void gp_shards_free(gp_shards *s) {
  if (!s) return;
  gp_st_free(s->single);
  for (int i = 0; i < s->n_files; i++) {
    free(s->files[i]);
    gp_st_free(s->hdr[i]);
    gp_st_free(s->data[i]);
  }
  free(s->files);
  free(s->hdr);
  free(s->data);
  free(s->file_of);
  free(s->order);
  gp_shard_index_free(&s->ix);
  free(s->path);
  free(s);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The ix entry of name, or -1. */
static int lookup(const gp_shards *s, const char *name) {
  named key = {name, 0}, *hit = bsearch(&key, s->order, (size_t)s->ix.n, sizeof key, by_name);
  return hit ? hit->i : -1;
}

static int file_index(gp_shards *s, const char *f) {
  for (int i = 0; i < s->n_files; i++)
    if (strcmp(s->files[i], f) == 0) return i;
  return -1;
}

/* Each shard the map names is read (its header) and holds what the map says it does. */
static gp_status open_index(gp_shards *s, const char *ixpath) {
  GP_TRY(gp_shard_index_read(ixpath, &s->ix));
  int n = s->ix.n;
  s->files = calloc((size_t)n + 1, sizeof *s->files);
  s->hdr = calloc((size_t)n + 1, sizeof *s->hdr);
  s->data = calloc((size_t)n + 1, sizeof *s->data);
  s->file_of = calloc((size_t)n + 1, sizeof *s->file_of);
  s->order = calloc((size_t)n + 1, sizeof *s->order);
  if (!s->files || !s->hdr || !s->data || !s->file_of || !s->order)
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", ixpath);
  char dir[PATH_MAX], path[PATH_MAX + 1024];
  gp_io_split_dir(ixpath, dir, sizeof dir);
  for (int i = 0; i < n; i++) {
    int k = file_index(s, s->ix.files[i]);
    if (k < 0) {
      k = s->n_files;
      if (!(s->files[k] = dup_str(s->ix.files[i])))
        return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", ixpath);
      s->n_files++;
      snprintf(path, sizeof path, "%s/%s", dir, s->files[k]);
      struct stat st;
      if (stat(path, &st) != 0)
        return GP_ERR(GP_ERR_DATA,
                      "%s: weight_map names the shard '%s' (for '%s'), which is missing (%s)",
                      ixpath, s->files[k], s->ix.names[i], strerror(errno));
      if (gp_st_read_header(path, &s->hdr[k]) != GP_OK)
        return gp_error_prefix(GP_ERR_DATA, "%s: the shard '%s' is damaged: ", ixpath, s->files[k]);
    }
    s->file_of[i] = k;
    if (!gp_st_find(s->hdr[k], s->ix.names[i]))
      return GP_ERR(GP_ERR_DATA, "%s: weight_map puts '%s' in '%s', which has no such tensor",
                    ixpath, s->ix.names[i], s->files[k]);
    s->order[i] = (named){s->ix.names[i], i};
  }
  qsort(s->order, (size_t)n, sizeof *s->order, by_name);
  for (int i = 1; i < n; i++) /* JSON refuses duplicate keys; kept for indexes built in code */
    if (strcmp(s->order[i].name, s->order[i - 1].name) == 0)
      return GP_ERR(GP_ERR_DATA, "%s: weight_map names '%s' twice", ixpath, s->order[i].name);
  /* a tensor in two shards: the set is two writes mixed, whichever the map picks */
  for (int k = 0; k < s->n_files; k++)
    for (int j = 0; j < gp_st_count(s->hdr[k]); j++) {
      const char *name = gp_st_entry_at(s->hdr[k], j)->name;
      int i = lookup(s, name);
      if (i >= 0 && s->file_of[i] != k)
        return GP_ERR(GP_ERR_DATA, "%s: tensor '%s' is in two shards, '%s' and '%s'", ixpath, name,
                      s->files[s->file_of[i]], s->files[k]);
    }
  return GP_OK;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

gp_status gp_shards_open(const char *path, gp_shards **out) {
  *out = NULL;
  gp_shards *s = calloc(1, sizeof *s);
  char ixpath[PATH_MAX + 16];
  if (!s) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  gp_status st = GP_OK;
  struct stat sb;
  if (ends_with(path, ".index.json"))
    snprintf(ixpath, sizeof ixpath, "%s", path);
  else if (gp_shards_index_path(path, ixpath, sizeof ixpath) != GP_OK || stat(ixpath, &sb) != 0)
    ixpath[0] = 0; /* no index beside it: the file itself */
  gp_error_clear();
  s->path = dup_str(ixpath[0] ? ixpath : path);
  if (!s->path)
    st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  else if (ixpath[0])
    st = open_index(s, ixpath);
  else
    st = gp_st_read(path, &s->single);
  if (st != GP_OK) {
    gp_shards_free(s);
    return st;
  }
  *out = s;
  return GP_OK;
}

const char *gp_shards_path(const gp_shards *s) {
  return s->path;
}

int gp_shards_sharded(const gp_shards *s) {
  return !s->single;
}

const char *gp_shards_meta(const gp_shards *s, const char *key) {
  return s->single ? gp_st_meta(s->single, key) : gp_shard_index_meta(&s->ix, key);
}

int gp_shards_count(const gp_shards *s) {
  return s->single ? gp_st_count(s->single) : s->ix.n;
}

const char *gp_shards_name(const gp_shards *s, int i) {
  return s->single ? gp_st_entry_at(s->single, i)->name : s->ix.names[i];
}

const gp_st_entry *gp_shards_find(const gp_shards *s, const char *name) {
  if (s->single) return gp_st_find(s->single, name);
  int i = lookup(s, name);
  return i < 0 ? NULL : gp_st_find(s->hdr[s->file_of[i]], name);
}

gp_status gp_shards_get(gp_shards *s, const char *name, const gp_st_entry **e, const void **data) {
  *e = NULL;
  *data = NULL;
  if (s->single) {
    if ((*e = gp_st_find(s->single, name))) *data = gp_st_data(s->single, *e);
    return GP_OK;
  }
  int i = lookup(s, name);
  if (i < 0) return GP_OK;
  int k = s->file_of[i];
  if (!s->data[k]) {
    char dir[PATH_MAX], path[PATH_MAX + 1024];
    gp_io_split_dir(s->path, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, s->files[k]);
    GP_TRY(gp_st_read(path, &s->data[k]));
  }
  const gp_st_entry *h = gp_st_find(s->hdr[k], name), *d = gp_st_find(s->data[k], name);
  if (!d || d->dtype != h->dtype || !gp_shape_equal(&d->shape, &h->shape))
    return GP_ERR(GP_ERR_DATA, "%s: the shard '%s' changed while it was read", s->path,
                  s->files[k]);
  *e = d;
  *data = gp_st_data(s->data[k], d);
  return GP_OK;
}
