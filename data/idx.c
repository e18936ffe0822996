/* IDX reader, streamed through gp_gzstream. The header is not trusted: the buffer grows as
 * data actually arrives, so a header that claims terabytes costs no more memory than the
 * file really holds before the truncation is reported. */
#include "data/idx.h"

#include <stdlib.h>
#include <string.h>

#include "data/gzstream.h"

/* Refused before reading: no IDX data set comes near this. */
#define IDX_MAX_BYTES ((uint64_t)1 << 36)
#define IDX_CHUNK ((size_t)1 << 22)

static size_t elem_size(int type) {
  switch (type) {
  case GP_IDX_U8:
  case GP_IDX_I8:
    return 1;
  case GP_IDX_I16:
    return 2;
  case GP_IDX_I32:
  case GP_IDX_F32:
    return 4;
  case GP_IDX_F64:
    return 8;
  default:
    return 0;
  }
}

static uint32_t be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static void to_host(unsigned char *p, size_t bytes, size_t es) {
  const uint16_t one = 1;
  if (es == 1 || *(const unsigned char *)&one == 0) return; /* big-endian host: as stored */
  for (size_t i = 0; i + es <= bytes; i += es)
    for (size_t a = 0, b = es - 1; a < b; a++, b--) {
      unsigned char t = p[i + a];
      p[i + a] = p[i + b];
      p[i + b] = t;
    }
}

static gp_status read_header(gp_gzstream *s, int want_type, int want_ndim, gp_idx *x) {
  const char *path = gp_gzstream_path(s);
  unsigned char b[4 * (GP_IDX_MAX_DIMS + 1)];
  size_t got;
  GP_TRY(gp_gzstream_read(s, b, 4, &got));
  if (got < 4)
    return GP_ERR(GP_ERR_DATA, "%s: file ended in the IDX header (%zu of 4 magic bytes)", path,
                  got);
  uint32_t magic = be32(b);
  x->type = b[2];
  x->ndim = b[3];
  x->elem_size = elem_size(x->type);
  if (b[0] || b[1] || !x->elem_size || x->ndim < 1 || x->ndim > GP_IDX_MAX_DIMS)
    return GP_ERR(GP_ERR_DATA, "%s: not an IDX file (magic 0x%08x)", path, (unsigned)magic);
  if ((want_type && x->type != want_type) || (want_ndim && x->ndim != want_ndim))
    return GP_ERR(GP_ERR_DATA, "%s: magic 0x%08x, expected 0x%04x%02x%02x", path, (unsigned)magic,
                  0, want_type ? want_type : x->type, want_ndim ? want_ndim : x->ndim);
  size_t hb = 4 * (size_t)x->ndim;
  GP_TRY(gp_gzstream_read(s, b, hb, &got));
  if (got < hb)
    return GP_ERR(GP_ERR_DATA, "%s: file ended in the IDX header (%zu of %zu size bytes)", path,
                  got, hb);
  uint64_t total = x->elem_size;
  for (int i = 0; i < x->ndim; i++) {
    x->dims[i] = be32(b + 4 * i);
    if (x->dims[i] && total > IDX_MAX_BYTES / (uint64_t)x->dims[i])
      return GP_ERR(GP_ERR_DATA, "%s: IDX sizes describe more than %llu bytes of data", path,
                    (unsigned long long)IDX_MAX_BYTES);
    total *= (uint64_t)x->dims[i];
  }
  x->item_bytes = x->elem_size;
  for (int i = 1; i < x->ndim; i++)
    x->item_bytes *= (size_t)x->dims[i];
  return GP_OK;
}

/* Reads want bytes into a buffer that grows with what arrives. */
static gp_status read_data(gp_gzstream *s, size_t want, const char *what, unsigned char **out) {
  unsigned char *buf = NULL;
  size_t have = 0, cap = 0;
  gp_status st = GP_OK;
  while (have < want) {
    size_t chunk = want - have < IDX_CHUNK ? want - have : IDX_CHUNK;
    if (have + chunk > cap) {
      size_t nc = cap ? cap * 2 : IDX_CHUNK;
      if (nc > want) nc = want;
      if (nc < have + chunk) nc = have + chunk;
      unsigned char *nb = realloc(buf, nc);
      if (!nb) {
        st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory for %zu bytes of %s data", gp_gzstream_path(s),
                    want, what);
        break;
      }
      buf = nb;
      cap = nc;
    }
    size_t got;
    st = gp_gzstream_read(s, buf + have, chunk, &got);
    have += got;
    if (st != GP_OK) break;
    if (got < chunk) {
      st = GP_ERR(GP_ERR_DATA, "%s: expected %zu bytes of %s data, the file ended after %zu",
                  gp_gzstream_path(s), want, what, have);
      break;
    }
  }
  if (st != GP_OK) {
    free(buf);
    return st;
  }
  *out = buf ? buf : malloc(1);
  if (!*out) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", gp_gzstream_path(s));
  return GP_OK;
}

gp_status gp_idx_read(const char *path, int want_type, int want_ndim, int64_t max_items,
                      const char *what, gp_idx *out) {
  memset(out, 0, sizeof *out);
  gp_gzstream *s = NULL;
  GP_TRY(gp_gzstream_open(path, &s));
  gp_idx x = {0};
  gp_status st = read_header(s, want_type, want_ndim, &x);
  if (st == GP_OK) {
    x.items = max_items > 0 && max_items < x.dims[0] ? max_items : x.dims[0];
    st = read_data(s, (size_t)x.items * x.item_bytes, what, (unsigned char **)&x.data);
  }
  if (st == GP_OK && x.items == x.dims[0]) {
    /* Bytes beyond what the header declares mean the header or the file is wrong. */
    unsigned char extra;
    size_t got;
    st = gp_gzstream_read(s, &extra, 1, &got);
    if (st == GP_OK && got)
      st = GP_ERR(GP_ERR_DATA, "%s: more data than the header declares (%lld %ss)", path,
                  (long long)x.dims[0], what);
  }
  gp_gzstream_close(s);
  if (st != GP_OK) {
    gp_idx_free(&x);
    return st;
  }
  to_host(x.data, (size_t)x.items * x.item_bytes, x.elem_size);
  *out = x;
  return GP_OK;
}

void gp_idx_free(gp_idx *x) {
  if (!x) return;
  free(x->data);
  x->data = NULL;
}
