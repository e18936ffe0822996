/* ustar/GNU/pax tar reading on a gp_gzstream. Long names come from GNU 'L' members or pax
 * 'x' records (Python's tarfile writes the latter before members by default); only path and
 * size are taken from pax records since nothing else here needs more. */
#include "data/tar.h"

#include <ctype.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "data/gzstream.h"

#define TAR_BLOCK 512
/* A long name or pax header larger than this is not a data set member. */
#define TAR_META_MAX (1u << 20)

struct gp_tar {
  gp_gzstream *s;
  int64_t member;   /* index of the current header, from 0 */
  uint64_t hdr_off; /* offset of the current member's header */
  uint64_t left;    /* data bytes of the current member not yet read */
  uint64_t pad;     /* padding after them */
  uint64_t size;    /* data bytes of the current member */
  int ended;
  char *name;       /* current member's path */
  char *long_name;  /* from a GNU 'L' or pax 'x' header, for the next member */
  int64_t pax_size; /* from a pax 'x' header, -1 if none */
};

const char *gp_tar_path(const gp_tar *t) {
  return gp_gzstream_path(t->s);
}

void gp_tar_close(gp_tar *t) {
  if (!t) return;
  gp_gzstream_close(t->s);
  free(t->name);
  free(t->long_name);
  free(t);
}

gp_status gp_tar_open(const char *path, gp_tar **out) {
  *out = NULL;
  gp_tar *t = calloc(1, sizeof *t);
  if (!t) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  t->member = -1;
  t->pax_size = -1;
  gp_status st = gp_gzstream_open(path, &t->s);
  if (st != GP_OK) {
    free(t);
    return st;
  }
  *out = t;
  return GP_OK;
}

/* "member N (NAME) at offset X" of the member being read, or "member N at offset X" while its
 * headers are (its name is not known yet: t->name is NULL then). */
static void member_str(const gp_tar *t, char *buf, size_t n) {
  if (t->name)
    snprintf(buf, n, "member %lld (%s) at offset %llu", (long long)t->member, t->name,
             (unsigned long long)t->hdr_off);
  else
    snprintf(buf, n, "member %lld at offset %llu", (long long)t->member,
             (unsigned long long)t->hdr_off);
}

/* A failed read of the stream (a cut or damaged gzip stream: "PATH: what"), said of the
 * member being read: "PATH: member N (NAME) at offset X: what". */
static gp_status stream_error(const gp_tar *t, gp_status code) {
  char who[1200], msg[1024];
  member_str(t, who, sizeof who);
  const char *m = gp_error_message(), *path = gp_tar_path(t);
  size_t np = strlen(path);
  if (strncmp(m, path, np) == 0 && m[np] == ':' && m[np + 1] == ' ') m += np + 2;
  snprintf(msg, sizeof msg, "%s", m);
  return GP_ERR(code, "%s: %s: %s", path, who, msg);
}

/* Exactly n bytes, or an error saying what was being read. */
static gp_status read_full(gp_tar *t, void *buf, size_t n, const char *what) {
  size_t got = 0;
  gp_status st = gp_gzstream_read(t->s, buf, n, &got);
  if (st != GP_OK) return stream_error(t, st);
  if (got < n) {
    char who[1200];
    member_str(t, who, sizeof who);
    if (t->name) /* a member's data being skipped: its size is the header's word */
      return GP_ERR(GP_ERR_DATA,
                    "%s: %s: its %llu bytes run past the end of the archive (a truncated file)",
                    gp_tar_path(t), who, (unsigned long long)t->size);
    return GP_ERR(GP_ERR_DATA, "%s: %s: truncated %s", gp_tar_path(t), who, what);
  }
  return GP_OK;
}

static gp_status skip(gp_tar *t, uint64_t n, const char *what) {
  unsigned char buf[4096];
  while (n > 0) {
    size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
    GP_TRY(read_full(t, buf, k, what));
    n -= k;
  }
  return GP_OK;
}

/* Octal ASCII ended by NUL or space, or GNU base-256 when the top bit of the first byte is
 * set. Returns -1 for anything else. */
static int64_t parse_num(const unsigned char *f, int len) {
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return -1; /* negative */
    uint64_t v = f[0] & 0x3f;
    for (int i = 1; i < len; i++) {
      if (v >> 55) return -1;
      v = v << 8 | f[i];
    }
    return (int64_t)v;
  }
  int i = 0;
  while (i < len && f[i] == ' ')
    i++;
  uint64_t v = 0;
  int digits = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
    if (v >> 60) return -1;
    v = v * 8 + (uint64_t)(f[i] - '0');
  }
  if (!digits || (i < len && f[i] != ' ' && f[i] != 0)) return -1;
  return (int64_t)v;
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* The data of a 'L' or 'x' header, NUL-terminated; the padding is consumed. */
static gp_status read_meta(gp_tar *t, uint64_t size, char **out) {
  *out = NULL;
  if (size > TAR_META_MAX)
    return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: extended header of %llu bytes",
                  gp_tar_path(t), (long long)t->member, (unsigned long long)t->hdr_off,
                  (unsigned long long)size);
  char *m = malloc(size + 1);
  if (!m) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", gp_tar_path(t));
  gp_status st = read_full(t, m, size, "extended header");
  if (st == GP_OK) st = skip(t, (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK, "extended header");
  if (st != GP_OK) {
    free(m);
    return st;
  }
  m[size] = 0;
  *out = m;
  return GP_OK;
}

/* Records "LEN key=value\n"; path and size apply to the next member. */
static gp_status parse_pax(gp_tar *t, const char *m, uint64_t size) {
  uint64_t at = 0;
  while (at < size) {
    char *end = NULL;
    /* digits first: strtoull would skip spaces, and end past the record */
    unsigned long long len = isdigit((unsigned char)m[at]) ? strtoull(m + at, &end, 10) : 0;
    if (!end || *end != ' ' || len < 5 || len > size - at || end >= m + at + len - 1 ||
        m[at + len - 1] != '\n')
      return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: bad pax record", gp_tar_path(t),
                    (long long)t->member, (unsigned long long)t->hdr_off);
    const char *kv = end + 1, *rec_end = m + at + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
    if (eq && eq - kv == 4 && memcmp(kv, "path", 4) == 0) {
      free(t->long_name);
      t->long_name = dup_n(eq + 1, (size_t)(rec_end - eq - 1));
      if (!t->long_name) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", gp_tar_path(t));
    } else if (eq && eq - kv == 4 && memcmp(kv, "size", 4) == 0) {
      char *e2 = NULL;
      unsigned long long v = strtoull(eq + 1, &e2, 10);
      if (e2 != rec_end || v > INT64_MAX)
        return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: bad pax size", gp_tar_path(t),
                      (long long)t->member, (unsigned long long)t->hdr_off);
      t->pax_size = (int64_t)v;
    }
    at += len;
  }
  return GP_OK;
}

static int all_zero(const unsigned char *b) {
  for (int i = 0; i < TAR_BLOCK; i++)
    if (b[i]) return 0;
  return 1;
}

gp_status gp_tar_next(gp_tar *t, const char **name, uint64_t *size) {
  *name = NULL;
  *size = 0;
  if (t->ended) return GP_OK;
  GP_TRY(skip(t, t->left + t->pad, "member data"));
  t->left = t->pad = 0;
  /* the next member's headers are read without a name: a cut one named the member before */
  free(t->name);
  t->name = NULL;
  unsigned char h[TAR_BLOCK];
  for (;;) {
    t->member++;
    t->hdr_off = gp_gzstream_offset(t->s);
    size_t got = 0;
    gp_status st = gp_gzstream_read(t->s, h, TAR_BLOCK, &got);
    if (st != GP_OK) return stream_error(t, st);
    if (got == 0 && t->hdr_off == 0)
      return GP_ERR(GP_ERR_DATA, "%s: an empty file (no tar data), not an archive", gp_tar_path(t));
    if (got == 0 && !t->long_name && t->pax_size < 0) {
      /* Some writers omit the end-of-archive blocks; a clean end between members is fine. */
      t->ended = 1;
      return GP_OK;
    }
    if (got < TAR_BLOCK)
      return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: truncated tar header",
                    gp_tar_path(t), (long long)t->member, (unsigned long long)t->hdr_off);
    if (all_zero(h)) {
      /* Read on to the end, so that a damaged or cut gzip stream behind the end blocks is
       * still reported (the archive may be the last thing read from a download), and so
       * that a header zeroed by damage does not silently end the archive: nothing but
       * zeros may follow (GNU tar: "A lone zero block"). */
      unsigned char rest[4096];
      int data = 0;
      do {
        st = gp_gzstream_read(t->s, rest, sizeof rest, &got);
        if (st != GP_OK) return stream_error(t, st);
        for (size_t i = 0; i < got && !data; i++)
          data = rest[i] != 0;
      } while (got == sizeof rest);
      if (data)
        return GP_ERR(GP_ERR_DATA,
                      "%s: member %lld at offset %llu: a zero block, which ends an archive, "
                      "with more tar data after it (a damaged header, or archives joined end "
                      "to end)",
                      gp_tar_path(t), (long long)t->member, (unsigned long long)t->hdr_off);
      t->ended = 1;
      return GP_OK;
    }
    uint64_t sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
      sum += (i >= 148 && i < 156) ? ' ' : h[i];
    int64_t want = parse_num(h + 148, 8);
    if (want < 0 || (uint64_t)want != sum)
      return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: bad tar header checksum",
                    gp_tar_path(t), (long long)t->member, (unsigned long long)t->hdr_off);
    int64_t sz = parse_num(h + 124, 12);
    if (sz < 0)
      return GP_ERR(GP_ERR_DATA, "%s: member %lld at offset %llu: bad size field", gp_tar_path(t),
                    (long long)t->member, (unsigned long long)t->hdr_off);
    char type = (char)h[156];
    if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
      char *m = NULL;
      GP_TRY(read_meta(t, (uint64_t)sz, &m));
      gp_status st = GP_OK;
      if (type == 'L') {
        free(t->long_name);
        t->long_name = m;
        m = NULL;
      } else if (type == 'x') {
        st = parse_pax(t, m, (uint64_t)sz);
      }
      free(m);
      GP_TRY(st);
      continue;
    }
    if (t->pax_size >= 0) sz = t->pax_size;
    free(t->name);
    if (t->long_name) {
      t->name = t->long_name;
      t->long_name = NULL;
    } else {
      char full[TAR_BLOCK];
      size_t np = strnlen((const char *)h + 345, 155), nn = strnlen((const char *)h, 100);
      int ustar = memcmp(h + 257, "ustar", 5) == 0;
      size_t k = 0;
      if (ustar && np) {
        memcpy(full, h + 345, np);
        k = np;
        full[k++] = '/';
      }
      memcpy(full + k, h, nn);
      t->name = dup_n(full, k + nn);
    }
    t->pax_size = -1;
    if (!t->name) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", gp_tar_path(t));
    /* As Python's tarfile does: links, devices, fifos and directories have no data
     * blocks whatever their size field says; unknown types are skipped by size. */
    uint64_t data = strchr("123456", type) && type ? 0 : (uint64_t)sz;
    t->left = t->size = data;
    t->pad = (TAR_BLOCK - data % TAR_BLOCK) % TAR_BLOCK;
    if (type == '0' || type == 0 || type == '7') {
      *name = t->name;
      *size = data;
      return GP_OK;
    }
    GP_TRY(skip(t, t->left + t->pad, "member data"));
    t->left = t->pad = 0;
  }
}

gp_status gp_tar_read(gp_tar *t, void *buf, size_t n, size_t *got) {
  *got = 0;
  if (n > t->left) n = (size_t)t->left;
  if (n == 0) return GP_OK;
  size_t k = 0;
  gp_status st = gp_gzstream_read(t->s, buf, n, &k);
  if (st != GP_OK) return stream_error(t, st);
  t->left -= k;
  *got = k;
  if (k < n) { /* the stream ended inside the member: its header's size says more */
    char who[1200];
    member_str(t, who, sizeof who);
    return GP_ERR(GP_ERR_DATA,
                  "%s: %s: its %llu bytes run past the end of the archive (a truncated file)",
                  gp_tar_path(t), who, (unsigned long long)t->size);
  }
  return GP_OK;
}
