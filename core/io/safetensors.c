/* safetensors reader and writer. The reader trusts nothing in the file: every length and
 * offset is checked against the file size before it is used, so a corrupt or hostile file
 * gives an error naming it, never a crash or an oversized allocation. */
#include "core/io/safetensors.h"

#include "core/strbuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/io/json.h"
#include "core/io/target.h"

/* A header this large is not a weights file (real headers are kilobytes). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
#define ST_META_KEY "__metadata__"

struct gp_st_file {
  char *path;
  int n;
  gp_st_entry *entries;
  int n_meta;
  char **meta_keys, **meta_values;
  uint64_t data_size;
  unsigned char *data;
};

void gp_st_free(gp_st_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++)
    free(f->entries[i].name);
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_values[i]);
  }
  free(f->entries);
  free(f->meta_keys);
  free(f->meta_values);
  free(f->data);
  free(f->path);
  free(f);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Reads exactly n bytes; a short read is a truncated file (GP_ERR_DATA), a read error I/O. */
static gp_status read_exact(FILE *fp, const char *path, void *buf, size_t n, const char *what) {
  size_t got = fread(buf, 1, n, fp);
  if (got == n) return GP_OK;
  if (ferror(fp)) return GP_ERR(GP_ERR_IO, "%s: cannot read %s: %s", path, what, strerror(errno));
  return GP_ERR(GP_ERR_DATA, "%s: file ended while reading %s (%zu of %zu bytes)", path, what, got,
                n);
}

static gp_status bad(const char *path, const char *name, const char *msg) {
  if (name) return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': %s", path, name, msg);
  return GP_ERR(GP_ERR_DATA, "%s: %s", path, msg);
}

static gp_status parse_meta(gp_st_file *f, const gp_json *m) {
  if (m->type != GP_JSON_OBJECT) return bad(f->path, NULL, "__metadata__ is not an object");
  f->meta_keys = calloc((size_t)m->n + 1, sizeof(char *));
  f->meta_values = calloc((size_t)m->n + 1, sizeof(char *));
  if (!f->meta_keys || !f->meta_values) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", f->path);
  for (int64_t i = 0; i < m->n; i++) {
    if (m->items[i].type != GP_JSON_STRING)
      return GP_ERR(GP_ERR_DATA, "%s: __metadata__ value of '%s' is a %s, not a string", f->path,
                    m->keys[i], gp_json_type_name(m->items[i].type));
    f->meta_keys[i] = dup_str(m->keys[i]);
    f->meta_values[i] = dup_str(m->items[i].str);
    f->n_meta = (int)i + 1;
    if (!f->meta_keys[i] || !f->meta_values[i])
      return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", f->path);
  }
  return GP_OK;
}

static gp_status parse_entry(gp_st_file *f, const char *name, const gp_json *v, gp_st_entry *e) {
  if (v->type != GP_JSON_OBJECT) return bad(f->path, name, "entry is not an object");
  for (int64_t i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") &&
        strcmp(v->keys[i], "data_offsets"))
      return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': unknown key '%s'", f->path, name, v->keys[i]);
  const gp_json *dt = gp_json_get(v, "dtype"), *sh = gp_json_get(v, "shape"),
                *off = gp_json_get(v, "data_offsets");
  if (!dt || !sh || !off) return bad(f->path, name, "entry needs dtype, shape and data_offsets");
  if (dt->type != GP_JSON_STRING) return bad(f->path, name, "dtype is not a string");
  if (!gp_dtype_parse(dt->str, &e->dtype))
    return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': unknown dtype '%s'", f->path, name, dt->str);
  if (sh->type != GP_JSON_ARRAY) return bad(f->path, name, "shape is not an array");
  if (sh->n > GP_MAX_DIMS)
    return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': shape has %lld dimensions, at most %d supported",
                  f->path, name, (long long)sh->n, GP_MAX_DIMS);
  e->shape.ndim = (int)sh->n;
  uint64_t numel = 1, size = gp_dtype_size(e->dtype);
  int zero = 0;
  for (int i = 0; i < e->shape.ndim; i++) {
    const gp_json *d = &sh->items[i];
    if (d->type != GP_JSON_NUMBER || !d->is_int || d->i < 0)
      return bad(f->path, name, "shape dimensions must be integers >= 0");
    e->shape.d[i] = d->i;
    zero |= d->i == 0;
  }
  if (off->type != GP_JSON_ARRAY || off->n != 2 || off->items[0].type != GP_JSON_NUMBER ||
      off->items[1].type != GP_JSON_NUMBER || !off->items[0].is_uint || !off->items[1].is_uint)
    return bad(f->path, name, "data_offsets must be two integers >= 0");
  e->begin = off->items[0].u;
  e->end = off->items[1].u;
  if (e->begin > e->end)
    return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                  f->path, name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > f->data_size)
    return GP_ERR(GP_ERR_DATA,
                  "%s: tensor '%s': data_offsets [%llu, %llu] are outside the %llu-byte data "
                  "section",
                  f->path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                  (unsigned long long)f->data_size);
  /* numel * size must fit in the data section; bounding by it also rules out overflow. */
  for (int i = 0; i < e->shape.ndim && !zero; i++) {
    uint64_t di = (uint64_t)e->shape.d[i];
    if (numel > f->data_size / di / size)
      return GP_ERR(GP_ERR_DATA, "%s: tensor '%s': shape needs more bytes than the file holds",
                    f->path, name);
    numel *= di;
  }
  if (zero) numel = 0;
  if (e->end - e->begin != numel * size)
    return GP_ERR(GP_ERR_DATA,
                  "%s: tensor '%s': data_offsets span %llu bytes but %s of %llu elements needs "
                  "%llu",
                  f->path, name, (unsigned long long)(e->end - e->begin), gp_dtype_name(e->dtype),
                  (unsigned long long)numel, (unsigned long long)(numel * size));
  e->name = dup_str(name);
  if (!e->name) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", f->path);
  return GP_OK;
}

static int by_begin(const void *a, const void *b) {
  const gp_st_entry *x = *(const gp_st_entry *const *)a, *y = *(const gp_st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by begin, each tensor must start at or after the previous one ends. Gaps are
 * allowed (the reference writer never makes them, but they do no harm to a reader). */
static gp_status check_overlap(gp_st_file *f) {
  if (f->n < 2) return GP_OK;
  const gp_st_entry **order = malloc((size_t)f->n * sizeof *order);
  if (!order) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", f->path);
  for (int i = 0; i < f->n; i++)
    order[i] = &f->entries[i];
  qsort(order, (size_t)f->n, sizeof *order, by_begin);
  gp_status st = GP_OK;
  const gp_st_entry *prev = NULL;
  for (int i = 0; i < f->n; i++) {
    const gp_st_entry *e = order[i];
    if (e->begin == e->end) continue;
    if (prev && e->begin < prev->end) {
      st = GP_ERR(GP_ERR_DATA, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                  f->path, prev->name, (unsigned long long)prev->begin,
                  (unsigned long long)prev->end, e->name, (unsigned long long)e->begin,
                  (unsigned long long)e->end);
      break;
    }
    prev = e;
  }
  free(order);
  return st;
}

static gp_status parse_header(gp_st_file *f, const char *text, size_t len) {
  gp_json *root = NULL;
  GP_TRY(gp_json_parse(text, len, f->path, &root));
  gp_status st = GP_OK;
  if (root->type != GP_JSON_OBJECT) {
    st = bad(f->path, NULL, "header is not a JSON object");
    goto done;
  }
  if (root->n > 1000000) {
    st = bad(f->path, NULL, "header lists more than a million tensors");
    goto done;
  }
  f->entries = calloc((size_t)root->n + 1, sizeof *f->entries);
  if (!f->entries) {
    st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", f->path);
    goto done;
  }
  for (int64_t i = 0; i < root->n && st == GP_OK; i++) {
    if (strcmp(root->keys[i], ST_META_KEY) == 0) {
      st = parse_meta(f, &root->items[i]);
      continue;
    }
    st = parse_entry(f, root->keys[i], &root->items[i], &f->entries[f->n]);
    if (st == GP_OK) f->n++;
  }
  if (st == GP_OK) st = check_overlap(f);
done:
  gp_json_free(root);
  return st;
}

static gp_status read_file(gp_st_file *f, FILE *fp, int header_only) {
  struct stat sb;
  if (fstat(fileno(fp), &sb) != 0)
    return GP_ERR(GP_ERR_IO, "%s: cannot stat: %s", f->path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return GP_ERR(GP_ERR_IO, "%s: not a regular file", f->path);
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8)
    return GP_ERR(GP_ERR_DATA, "%s: file is %llu bytes, too short for a safetensors header",
                  f->path, (unsigned long long)size);
  unsigned char lenb[8];
  GP_TRY(read_exact(fp, f->path, lenb, 8, "the header length"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = (n << 8) | lenb[i];
  if (n > ST_MAX_HEADER)
    return GP_ERR(GP_ERR_DATA, "%s: header length %llu is over the 100 MB limit", f->path,
                  (unsigned long long)n);
  if (n > size - 8)
    return GP_ERR(GP_ERR_DATA, "%s: header length %llu runs past the end of the %llu-byte file",
                  f->path, (unsigned long long)n, (unsigned long long)size);
  if (n < 2)
    return GP_ERR(GP_ERR_DATA, "%s: header length %llu is too short", f->path,
                  (unsigned long long)n);
  char *text = malloc((size_t)n);
  if (!text) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for the header", f->path);
  gp_status st = read_exact(fp, f->path, text, (size_t)n, "the header");
  f->data_size = size - 8 - n;
  if (st == GP_OK) st = parse_header(f, text, (size_t)n);
  free(text);
  GP_TRY(st);
  if (header_only) return GP_OK;
  /* The data section gets its own allocation so that it is aligned whatever the header
   * length; +1 so that an empty section still gets a valid pointer. */
  f->data = malloc((size_t)f->data_size + 1);
  if (!f->data)
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for %llu bytes of tensor data", f->path,
                  (unsigned long long)f->data_size);
  return read_exact(fp, f->path, f->data, (size_t)f->data_size, "tensor data");
}

static gp_status read_path(const char *path, int header_only, gp_st_file **out) {
  *out = NULL;
  gp_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = dup_str(path))) {
    free(f);
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  }
  /* checked before the open, which blocks on a FIFO until a writer comes */
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    gp_st_free(f);
    return GP_ERR(GP_ERR_IO, "%s: not a regular file", path);
  }
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    gp_status st = GP_ERR(GP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    gp_st_free(f);
    return st;
  }
  gp_status st = read_file(f, fp, header_only);
  fclose(fp);
  if (st != GP_OK) {
    gp_st_free(f);
    return st;
  }
  *out = f;
  return GP_OK;
}

gp_status gp_st_read(const char *path, gp_st_file **out) {
  return read_path(path, 0, out);
}

gp_status gp_st_read_header(const char *path, gp_st_file **out) {
  return read_path(path, 1, out);
}

int gp_st_count(const gp_st_file *f) {
  return f->n;
}

const gp_st_entry *gp_st_entry_at(const gp_st_file *f, int i) {
  return i >= 0 && i < f->n ? &f->entries[i] : NULL;
}

const gp_st_entry *gp_st_find(const gp_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
  return NULL;
}

const void *gp_st_data(const gp_st_file *f, const gp_st_entry *e) {
  return f->data ? f->data + e->begin : NULL;
}

const char *gp_st_meta(const gp_st_file *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
  return NULL;
}

/* ---- writer ---- */

typedef struct st_item {
  char *name;
  gp_dtype dtype;
  gp_shape shape;
  const void *data;
  uint64_t bytes;
} st_item;

struct gp_st_writer {
  int n, cap;
  st_item *items;
  int n_meta, meta_cap;
  char **meta_keys, **meta_values;
};

gp_st_writer *gp_st_writer_new(void) {
  return calloc(1, sizeof(gp_st_writer));
}

void gp_st_writer_free(gp_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++)
    free(w->items[i].name);
  for (int i = 0; i < w->n_meta; i++) {
    free(w->meta_keys[i]);
    free(w->meta_values[i]);
  }
  free(w->items);
  free(w->meta_keys);
  free(w->meta_values);
  free(w);
}

gp_status gp_st_add(gp_st_writer *w, const char *name, gp_dtype dtype, const gp_shape *shape,
                    const void *data) {
  if (!name || !*name || strcmp(name, ST_META_KEY) == 0)
    return GP_ERR(GP_ERR_RUNTIME, "safetensors: invalid tensor name '%s'", name ? name : "");
  if ((unsigned)dtype >= GP_DTYPE_COUNT)
    return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' has an invalid dtype", name);
  if (shape->ndim < 0 || shape->ndim > GP_MAX_DIMS)
    return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' has %d dimensions", name, shape->ndim);
  uint64_t numel = 1;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->d[i] < 0)
      return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' has a negative dimension", name);
    if (shape->d[i] && numel > ((uint64_t)1 << 50) / (uint64_t)shape->d[i])
      return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' is too large", name);
    numel *= (uint64_t)shape->d[i];
  }
  if (!data && numel > 0)
    return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' has no data", name);
  for (int i = 0; i < w->n; i++)
    if (strcmp(w->items[i].name, name) == 0)
      return GP_ERR(GP_ERR_RUNTIME, "safetensors: tensor '%s' added twice", name);
  if (w->n == w->cap) {
    int nc = w->cap ? w->cap * 2 : 16;
    st_item *items = realloc(w->items, (size_t)nc * sizeof *items);
    if (!items) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
    w->items = items;
    w->cap = nc;
  }
  st_item *it = &w->items[w->n];
  it->name = dup_str(name);
  if (!it->name) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
  it->dtype = dtype;
  it->shape = *shape;
  it->data = data;
  it->bytes = numel * gp_dtype_size(dtype);
  w->n++;
  return GP_OK;
}

gp_status gp_st_meta_set(gp_st_writer *w, const char *key, const char *value) {
  for (int i = 0; i < w->n_meta; i++)
    if (strcmp(w->meta_keys[i], key) == 0) {
      char *v = dup_str(value);
      if (!v) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
      free(w->meta_values[i]);
      w->meta_values[i] = v;
      return GP_OK;
    }
  if (w->n_meta == w->meta_cap) {
    int nc = w->meta_cap ? w->meta_cap * 2 : 8;
    char **k = realloc(w->meta_keys, (size_t)nc * sizeof *k);
    if (!k) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
    w->meta_keys = k;
    char **v = realloc(w->meta_values, (size_t)nc * sizeof *v);
    if (!v) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
    w->meta_values = v;
    w->meta_cap = nc;
  }
  char *k = dup_str(key), *v = dup_str(value);
  if (!k || !v) {
    free(k);
    free(v);
    return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory");
  }
  w->meta_keys[w->n_meta] = k;
  w->meta_values[w->n_meta] = v;
  w->n_meta++;
  return GP_OK;
}

static void sb_fmt_u64(gp_strbuf *b, uint64_t v) {
  char t[32];
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  gp_strbuf_str(b, t);
}

/* A JSON string literal; bytes >= 0x80 pass through (names are UTF-8). */
static void sb_json_str(gp_strbuf *b, const char *s) {
  gp_strbuf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char t[8];
    if (c == '"' || c == '\\') {
      t[0] = '\\';
      t[1] = (char)c;
      gp_strbuf_put(b, t, 2);
    } else if (c < 0x20) {
      snprintf(t, sizeof t, "\\u%04x", c);
      gp_strbuf_str(b, t);
    } else {
      gp_strbuf_put(b, (const char *)&c, 1);
    }
  }
  gp_strbuf_put(b, "\"", 1);
}

static gp_status write_all(FILE *fp, const char *path, const void *p, uint64_t n) {
  const unsigned char *c = p;
  while (n > 0) {
    size_t k = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
    if (fwrite(c, 1, k, fp) != k)
      return GP_ERR(GP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    c += k;
    n -= k;
  }
  return GP_OK;
}

static gp_status build_header(const gp_st_writer *w, gp_strbuf *b) {
  uint64_t off = 0;
  gp_strbuf_str(b, "{");
  if (w->n_meta) {
    gp_strbuf_str(b, "\"" ST_META_KEY "\":{");
    for (int i = 0; i < w->n_meta; i++) {
      if (i) gp_strbuf_str(b, ",");
      sb_json_str(b, w->meta_keys[i]);
      gp_strbuf_str(b, ":");
      sb_json_str(b, w->meta_values[i]);
    }
    gp_strbuf_str(b, "}");
  }
  for (int i = 0; i < w->n; i++) {
    const st_item *it = &w->items[i];
    if (i || w->n_meta) gp_strbuf_str(b, ",");
    sb_json_str(b, it->name);
    gp_strbuf_str(b, ":{\"dtype\":\"");
    gp_strbuf_str(b, gp_dtype_name(it->dtype));
    gp_strbuf_str(b, "\",\"shape\":[");
    for (int d = 0; d < it->shape.ndim; d++) {
      if (d) gp_strbuf_str(b, ",");
      sb_fmt_u64(b, (uint64_t)it->shape.d[d]);
    }
    gp_strbuf_str(b, "],\"data_offsets\":[");
    sb_fmt_u64(b, off);
    gp_strbuf_str(b, ",");
    off += it->bytes;
    sb_fmt_u64(b, off);
    gp_strbuf_str(b, "]}");
  }
  gp_strbuf_str(b, "}");
  /* Padding to a multiple of 8 keeps the data section 8-byte aligned in the file, so a
   * reader that maps the file can use the tensors in place. */
  while (b->n % 8)
    gp_strbuf_str(b, " ");
  if (b->oom) return GP_ERR(GP_ERR_NOMEM, "safetensors: out of memory for the header");
  return GP_OK;
}

typedef struct st_out {
  const gp_st_writer *w;
  const gp_strbuf *h;
  const char *path;
} st_out;

static gp_status write_st(FILE *fp, void *ctx) {
  const st_out *o = ctx;
  unsigned char lenb[8];
  for (int i = 0; i < 8; i++)
    lenb[i] = (unsigned char)((uint64_t)o->h->n >> (8 * i));
  gp_status st = write_all(fp, o->path, lenb, 8);
  if (st == GP_OK) st = write_all(fp, o->path, o->h->p, o->h->n);
  for (int i = 0; i < o->w->n && st == GP_OK; i++)
    st = write_all(fp, o->path, o->w->items[i].data, o->w->items[i].bytes);
  return st;
}

gp_status gp_st_write(gp_st_writer *w, const char *path) {
  gp_strbuf h = {0};
  gp_status st = build_header(w, &h);
  if (st == GP_OK) st = gp_io_write_file(path, write_st, &(st_out){w, &h, path});
  gp_strbuf_free(&h);
  return st;
}

int gp_st_writer_count(const gp_st_writer *w) {
  return w->n;
}

void gp_st_writer_at(const gp_st_writer *w, int i, gp_st_entry *e, const void **data) {
  const st_item *it = &w->items[i];
  *e = (gp_st_entry){.name = it->name, .dtype = it->dtype, .shape = it->shape, .end = it->bytes};
  *data = it->data;
}

int gp_st_writer_meta_count(const gp_st_writer *w) {
  return w->n_meta;
}

void gp_st_writer_meta_at(const gp_st_writer *w, int i, const char **key, const char **value) {
  *key = w->meta_keys[i];
  *value = w->meta_values[i];
}
