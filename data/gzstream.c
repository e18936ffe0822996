/* gzip-or-plain byte stream on zlib's inflate. Not gzread: gzread passes plain files through
 * too, but it misses a gzip file whose trailer (CRC, length) was cut off when the data was
 * read to the end exactly, and it skips trailing garbage silently. Here every member must end
 * with its checked trailer, and after a member only another gzip member may follow. */
#include "data/gzstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define GZ_BUF (1 << 17)

struct gp_gzstream {
  FILE *fp;
  char *path;
  uint64_t offset;   /* uncompressed bytes handed out */
  uint64_t consumed; /* compressed bytes read from the file before the buffer */
  int gzip;          /* 0: plain file, passed through */
  int z_ready;
  int member_done; /* the last member ended; only another member may follow */
  int file_eof;
  z_stream z;
  unsigned char in[GZ_BUF];
};

/* Moves what is left of the buffer to its start and reads more behind it. */
static gp_status fill(gp_gzstream *s) {
  if (s->file_eof) return GP_OK;
  if (s->z.avail_in && s->z.next_in != s->in) memmove(s->in, s->z.next_in, s->z.avail_in);
  s->z.next_in = s->in;
  size_t room = GZ_BUF - s->z.avail_in;
  size_t got = fread(s->in + s->z.avail_in, 1, room, s->fp);
  if (got < room) {
    if (ferror(s->fp)) return GP_ERR(GP_ERR_IO, "%s: cannot read: %s", s->path, strerror(errno));
    s->file_eof = 1;
  }
  s->z.avail_in += (uInt)got;
  return GP_OK;
}

void gp_gzstream_close(gp_gzstream *s) {
  if (!s) return;
  if (s->z_ready) inflateEnd(&s->z);
  if (s->fp) fclose(s->fp);
  free(s->path);
  free(s);
}

gp_status gp_gzstream_open(const char *path, gp_gzstream **out) {
  *out = NULL;
  gp_gzstream *s = calloc(1, sizeof *s);
  size_t n = strlen(path) + 1;
  if (!s || !(s->path = malloc(n))) {
    free(s);
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  }
  memcpy(s->path, path, n);
  s->fp = fopen(path, "rb");
  gp_status st = GP_OK;
  if (!s->fp) st = GP_ERR(GP_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
  if (st == GP_OK) st = fill(s);
  if (st == GP_OK && s->z.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
    s->gzip = 1;
    /* 16 + MAX_WBITS: gzip wrapper only, with its CRC-32 and length checked. */
    if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
      st = GP_ERR(GP_ERR_NOMEM, "%s: cannot start zlib", path);
    else
      s->z_ready = 1;
  }
  if (st != GP_OK) {
    gp_gzstream_close(s);
    return st;
  }
  *out = s;
  return GP_OK;
}

static gp_status read_plain(gp_gzstream *s, unsigned char *p, size_t n, size_t *got) {
  size_t done = 0;
  while (done < n) {
    if (s->z.avail_in == 0) {
      if (s->file_eof) break;
      GP_TRY(fill(s));
      continue;
    }
    size_t k = n - done < s->z.avail_in ? n - done : s->z.avail_in;
    memcpy(p + done, s->z.next_in, k);
    s->z.next_in += k;
    s->z.avail_in -= (uInt)k;
    done += k;
  }
  *got = done;
  return GP_OK;
}

/* At a member boundary: the end of the file, or the start of another gzip member. */
static gp_status next_member(gp_gzstream *s, int *end) {
  *end = 0;
  if (s->z.avail_in < 2) GP_TRY(fill(s));
  if (s->z.avail_in == 0) {
    *end = 1;
    return GP_OK;
  }
  if (s->z.avail_in < 2 || s->z.next_in[0] != 0x1f || s->z.next_in[1] != 0x8b)
    return GP_ERR(GP_ERR_DATA, "%s: unexpected bytes after the end of the gzip data", s->path);
  if (inflateReset(&s->z) != Z_OK)
    return GP_ERR(GP_ERR_DATA, "%s: cannot restart zlib for the next gzip member", s->path);
  s->member_done = 0;
  return GP_OK;
}

static gp_status read_gzip(gp_gzstream *s, unsigned char *p, size_t n, size_t *got) {
  size_t done = 0;
  gp_status st = GP_OK;
  while (done < n) {
    if (s->member_done) {
      int end;
      st = next_member(s, &end);
      if (st != GP_OK || end) break;
    }
    if (s->z.avail_in == 0) {
      st = fill(s);
      if (st != GP_OK) break;
      if (s->z.avail_in == 0) {
        unsigned long long got = (unsigned long long)(s->offset + done);
        st = GP_ERR(GP_ERR_DATA,
                    "%s: gzip data ends early (truncated file) after %llu decompressed byte%s",
                    s->path, got, got == 1 ? "" : "s");
        break;
      }
    }
    size_t want = n - done > (size_t)1 << 30 ? (size_t)1 << 30 : n - done;
    s->z.next_out = p + done;
    s->z.avail_out = (uInt)want;
    uInt in_before = s->z.avail_in;
    int r = inflate(&s->z, Z_NO_FLUSH);
    done += want - s->z.avail_out;
    /* With input and room for output, no progress at all would loop forever. */
    if (r == Z_BUF_ERROR && s->z.avail_in == in_before && s->z.avail_out == want) r = Z_DATA_ERROR;
    if (r == Z_STREAM_END) {
      s->member_done = 1;
    } else if (r == Z_MEM_ERROR) {
      st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory in zlib", s->path);
      break;
    } else if (r != Z_OK && r != Z_BUF_ERROR) {
      st = GP_ERR(GP_ERR_DATA, "%s: corrupt gzip data after %llu bytes: %s", s->path,
                  (unsigned long long)(s->offset + done), s->z.msg ? s->z.msg : "zlib error");
      break;
    }
  }
  *got = done;
  return st;
}

gp_status gp_gzstream_read(gp_gzstream *s, void *buf, size_t n, size_t *got) {
  gp_status st = s->gzip ? read_gzip(s, buf, n, got) : read_plain(s, buf, n, got);
  s->offset += *got;
  return st;
}

const char *gp_gzstream_path(const gp_gzstream *s) {
  return s->path;
}

uint64_t gp_gzstream_offset(const gp_gzstream *s) {
  return s->offset;
}
