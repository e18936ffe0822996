/* One WebDataset shard, sample by sample, on the streaming tar reader. A member is only known
 * to start a new sample once its header has been read, so it is held back ("pending") with
 * its data unread until the next call. */
#include "data/wds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tar.h"

#define CLS_MAX 64 /* bytes of a .cls member */

struct gp_wds {
  gp_tar *t;
  int ended;
  int64_t file_no; /* regular files seen, from 0 */
  int64_t index;   /* samples handed out */
  /* the member read but not yet used */
  int pending;
  char *pname;
  uint64_t psize;
  int64_t pfile;
  /* the sample being assembled */
  char *key;
  uint8_t *img;
  size_t img_cap, img_n;
  char *where, *label_where;
};

static gp_status set_str(char **dst, const char *s, size_t n) {
  char *p = realloc(*dst, n + 1);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory reading a shard");
  memcpy(p, s, n);
  p[n] = 0;
  *dst = p;
  return GP_OK;
}

void gp_wds_close(gp_wds *w) {
  if (!w) return;
  gp_tar_close(w->t);
  free(w->pname);
  free(w->key);
  free(w->img);
  free(w->where);
  free(w->label_where);
  free(w);
}

gp_status gp_wds_open(const char *path, gp_wds **out) {
  *out = NULL;
  gp_wds *w = calloc(1, sizeof *w);
  if (!w) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  gp_status st = gp_tar_open(path, &w->t);
  if (st != GP_OK) {
    free(w);
    return st;
  }
  *out = w;
  return GP_OK;
}

/* WebDataset's split: key = path through the basename's first '.' (exclusive), extension =
 * the rest. Returns 0 for members that belong to no sample (no dot, a hidden basename, or a
 * top-level __meta__ file). */
static int split_name(const char *name, size_t *key_len, const char **ext) {
  const char *slash = strrchr(name, '/'), *base = slash ? slash + 1 : name;
  const char *dot = strchr(base, '.');
  if (!dot || dot == base) return 0;
  size_t n = strlen(name);
  if (!slash && n >= 4 && strncmp(name, "__", 2) == 0 && strcmp(name + n - 2, "__") == 0) return 0;
  *key_len = (size_t)(dot - name);
  *ext = dot + 1;
  return 1;
}

static int ext_is(const char *ext, const char *want) {
  size_t i = 0;
  for (; ext[i] && want[i]; i++) {
    char c = ext[i] >= 'A' && ext[i] <= 'Z' ? (char)(ext[i] - 'A' + 'a') : ext[i];
    if (c != want[i]) return 0;
  }
  return !ext[i] && !want[i];
}

static gp_status read_all(gp_wds *w, void *buf, size_t n) {
  size_t got = 0;
  GP_TRY(gp_tar_read(w->t, buf, n, &got));
  if (got != n) /* gp_tar reports a cut member itself; this is a size mismatch */
    return GP_ERR(GP_ERR_DATA, "%s: member %s (file %lld): %zu of %zu bytes read",
                  gp_tar_path(w->t), w->pname, (long long)w->pfile, got, n);
  return GP_OK;
}

/* "  123\n" -> 123; -1 if not a non-negative decimal integer. */
static int64_t parse_label(const char *s, size_t n) {
  const char *a = s, *b = s + n;
  while (a < b && strchr(" \t\r\n\v\f", *a) && *a)
    a++;
  while (b > a && strchr(" \t\r\n\v\f", b[-1]) && b[-1])
    b--;
  if (a == b || b - a > 18) return -1;
  int64_t v = 0;
  for (; a < b; a++) {
    if (*a < '0' || *a > '9') return -1;
    v = v * 10 + (*a - '0');
  }
  return v;
}

static gp_status member_where(gp_wds *w, char **dst) {
  const char *shard = gp_tar_path(w->t);
  size_t n = strlen(shard) + strlen(w->pname) + 48;
  char *p = realloc(*dst, n);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory reading a shard");
  snprintf(p, n, "%s: member %s (file %lld)", shard, w->pname, (long long)w->pfile);
  *dst = p;
  return GP_OK;
}

/* Takes the pending member into the sample. */
static gp_status take(gp_wds *w, const char *ext, int *have_img, int *have_cls, int64_t *label) {
  const char *shard = gp_tar_path(w->t);
  int img = ext_is(ext, "jpg") || ext_is(ext, "jpeg"), cls = ext_is(ext, "cls");
  if (!img && !cls) return GP_OK;
  if ((img && *have_img) || (cls && *have_cls))
    return GP_ERR(GP_ERR_DATA, "%s: member %s (file %lld): sample %s has a second %s", shard,
                  w->pname, (long long)w->pfile, w->key, img ? "image (.jpg/.jpeg)" : ".cls label");
  size_t cap = img ? GP_WDS_MEMBER_MAX : CLS_MAX;
  if (w->psize > cap)
    return GP_ERR(GP_ERR_DATA,
                  "%s: member %s (file %lld): %llu bytes, more than the %zu a %s may have", shard,
                  w->pname, (long long)w->pfile, (unsigned long long)w->psize, cap,
                  img ? "sample image" : "label");
  size_t n = (size_t)w->psize;
  if (img) {
    if (n > w->img_cap) {
      uint8_t *p = realloc(w->img, n);
      if (!p) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for %zu bytes", shard, n);
      w->img = p;
      w->img_cap = n;
    }
    GP_TRY(read_all(w, w->img, n));
    w->img_n = n;
    *have_img = 1;
    return member_where(w, &w->where);
  }
  char txt[CLS_MAX];
  GP_TRY(read_all(w, txt, n));
  *label = parse_label(txt, n);
  if (*label < 0) {
    char shown[CLS_MAX + 1];
    for (size_t i = 0; i < n; i++)
      shown[i] = txt[i] >= ' ' && txt[i] < 127 ? txt[i] : '?';
    shown[n] = 0;
    return GP_ERR(GP_ERR_DATA,
                  "%s: member %s (file %lld): label '%s' is not a non-negative integer", shard,
                  w->pname, (long long)w->pfile, shown);
  }
  *have_cls = 1;
  return member_where(w, &w->label_where);
}

gp_status gp_wds_next(gp_wds *w, gp_wds_sample *s) {
  memset(s, 0, sizeof *s);
  int started = 0, have_img = 0, have_cls = 0;
  int64_t label = -1, first_file = 0;
  size_t key_len = 0;
  for (;;) {
    if (!w->pending) {
      if (w->ended) break;
      const char *name = NULL;
      uint64_t size = 0;
      GP_TRY(gp_tar_next(w->t, &name, &size));
      if (!name) {
        w->ended = 1;
        break;
      }
      GP_TRY(set_str(&w->pname, name, strlen(name)));
      w->psize = size;
      w->pfile = w->file_no++;
      w->pending = 1;
    }
    size_t kl;
    const char *ext;
    if (!split_name(w->pname, &kl, &ext)) {
      w->pending = 0; /* not part of any sample */
      continue;
    }
    if (started && (kl != key_len || memcmp(w->pname, w->key, kl) != 0)) break;
    if (!started) {
      GP_TRY(set_str(&w->key, w->pname, kl));
      key_len = kl;
      first_file = w->pfile;
      started = 1;
    }
    w->pending = 0;
    GP_TRY(take(w, ext, &have_img, &have_cls, &label));
  }
  if (!started) return GP_OK; /* the end: s->key is NULL */
  /* A shard cut between a sample's members ends cleanly for tar: say so when that is what the
   * missing member may be. */
  if (!have_img || !have_cls)
    return GP_ERR(GP_ERR_DATA, "%s: sample %s (from file %lld): no %s member%s", gp_tar_path(w->t),
                  w->key, (long long)first_file, have_img ? ".cls" : ".jpg or .jpeg",
                  w->ended && !w->pending ? " (the archive's last sample: a truncated shard?)"
                                          : "");
  s->key = w->key;
  s->jpg = w->img;
  s->jpg_n = w->img_n;
  s->label = label;
  s->index = w->index++;
  s->where = w->where;
  s->label_where = w->label_where;
  return GP_OK;
}

gp_status gp_wds_check_label(const gp_wds_sample *s, int64_t classes) {
  if (s->label >= 0 && s->label < classes) return GP_OK;
  return GP_ERR(GP_ERR_DATA, "%s: label %lld outside 0..%lld", s->label_where, (long long)s->label,
                (long long)classes - 1);
}
