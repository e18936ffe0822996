/* CIFAR binary records: a label byte (CIFAR-100: coarse then fine) and 3072 pixel bytes, no
 * header. The archive's members can come in any order, so each wanted file is decoded into
 * its own buffers and the split is put together in the files' canonical order. */
#include "data/cifar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/gzstream.h"
#include "data/tar.h"

#define MAX_FILES 5
#define GROW 1024 /* records */

typedef struct layout {
  int classes;
  const char *archive; /* "cifar-10-binary.tar.gz" */
  const char *folder;  /* the folder in it */
  int label_bytes;     /* 1 or 2 (CIFAR-100: coarse, fine) */
  int label_at;        /* which of them is the sample's label */
  int n_files;
  const char *files[MAX_FILES];
} layout;

typedef struct part {
  uint8_t *pixels, *labels;
  int64_t n;
  int found;
} part;

typedef gp_status (*read_fn)(void *src, void *buf, size_t n, size_t *got);

static gp_status read_tar(void *src, void *buf, size_t n, size_t *got) {
  return gp_tar_read(src, buf, n, got);
}

static gp_status read_gz(void *src, void *buf, size_t n, size_t *got) {
  return gp_gzstream_read(src, buf, n, got);
}

static int is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Decodes records until the end of the source or until limit (> 0) records. */
static gp_status decode(const layout *lay, read_fn rd, void *src, const char *what, int64_t limit,
                        part *out) {
  const size_t rec = (size_t)lay->label_bytes + GP_CIFAR_PIXELS;
  uint8_t buf[2 + GP_CIFAR_PIXELS];
  int64_t cap = 0;
  out->found = 1;
  for (;;) {
    if (limit > 0 && out->n >= limit) return GP_OK;
    size_t got = 0;
    GP_TRY(rd(src, buf, rec, &got));
    if (got == 0 && out->n == 0)
      return GP_ERR(GP_ERR_DATA, "%s: holds no samples (an empty file)", what);
    if (got == 0) return GP_OK;
    if (got < rec)
      return GP_ERR(GP_ERR_DATA,
                    "%s: size %llu is not a multiple of the %zu-byte record (%zu bytes left over)",
                    what, (unsigned long long)((uint64_t)out->n * rec + got), rec, got);
    for (int k = 0; k < lay->label_bytes; k++) {
      int max = k == lay->label_bytes - 1 ? lay->classes : 20; /* CIFAR-100 coarse: 20 */
      if (buf[k] >= max)
        return GP_ERR(GP_ERR_DATA, "%s: record %lld: label %d is outside 0..%d", what,
                      (long long)out->n, buf[k], max - 1);
    }
    if (out->n == cap) {
      cap += GROW;
      uint8_t *p = realloc(out->pixels, (size_t)cap * GP_CIFAR_PIXELS);
      if (p) out->pixels = p;
      uint8_t *l = p ? realloc(out->labels, (size_t)cap) : NULL;
      if (l) out->labels = l;
      if (!p || !l) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", what);
    }
    memcpy(out->pixels + out->n * GP_CIFAR_PIXELS, buf + lay->label_bytes, GP_CIFAR_PIXELS);
    out->labels[out->n] = buf[lay->label_at];
    out->n++;
  }
}

static gp_status from_archive(const layout *lay, const char *path, const char **want, int n_want,
                              int64_t limit, part *parts) {
  gp_tar *t = NULL;
  GP_TRY(gp_tar_open(path, &t));
  gp_status st = GP_OK;
  for (;;) {
    const char *name = NULL;
    uint64_t size = 0;
    st = gp_tar_next(t, &name, &size);
    if (st != GP_OK || !name) break;
    /* the member FOLDER/NAME (as the official archive has it, "./" allowed): a file of the
     * same name in another folder is not a split's, and a second copy is refused */
    const char *rel = strncmp(name, "./", 2) == 0 ? name + 2 : name;
    size_t nf = strlen(lay->folder);
    if (strncmp(rel, lay->folder, nf) != 0 || rel[nf] != '/') continue;
    for (int i = 0; i < n_want; i++) {
      if (strcmp(rel + nf + 1, want[i]) != 0) continue;
      if (parts[i].found) {
        st = GP_ERR(GP_ERR_DATA, "%s: member %s is in the archive twice", path, name);
        break;
      }
      char what[1400];
      snprintf(what, sizeof what, "%s: %s", path, name);
      st = decode(lay, read_tar, t, what, limit, &parts[i]);
      break;
    }
    if (st != GP_OK) break;
  }
  for (int i = 0; st == GP_OK && i < n_want; i++)
    if (!parts[i].found)
      st = GP_ERR(GP_ERR_DATA, "%s: no member %s/%s in the archive", path, lay->folder, want[i]);
  gp_tar_close(t);
  return st;
}

static gp_status from_dir(const layout *lay, const char *dir, const char **want, int n_want,
                          int64_t limit, part *parts) {
  for (int i = 0; i < n_want; i++) {
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", dir, want[i]);
    gp_gzstream *s = NULL;
    GP_TRY(gp_gzstream_open(p, &s));
    gp_status st = decode(lay, read_gz, s, p, limit, &parts[i]);
    gp_gzstream_close(s);
    GP_TRY(st);
  }
  return GP_OK;
}

static int exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* Whether dir holds any of the split files (train or test, of any type): then it is the
 * folder of .bin files, and reading names the one that is missing or bad. */
static int has_bins(const layout *lay, const char *dir, const char *test_file) {
  char p[1400];
  for (int i = 0; i <= lay->n_files; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, i < lay->n_files ? lay->files[i] : test_file);
    if (exists(p)) return 1;
  }
  return 0;
}

/* Where the files are: 1 = an archive (in *where), 2 = a directory of .bin files, 0 none. */
static int locate(const layout *lay, const char *path, const char *test_file, char *where,
                  size_t n) {
  if (is_file(path)) {
    snprintf(where, n, "%s", path);
    return 1;
  }
  snprintf(where, n, "%s/%s", path, lay->archive);
  if (is_file(where)) return 1;
  snprintf(where, n, "%s/%.*s", path, (int)strlen(lay->archive) - 3, lay->archive); /* .tar */
  if (is_file(where)) return 1;
  snprintf(where, n, "%s", path);
  if (has_bins(lay, where, test_file)) return 2;
  snprintf(where, n, "%s/%s", path, lay->folder);
  return has_bins(lay, where, test_file) ? 2 : 0;
}

gp_status gp_cifar_read(const char *path, int classes, int coarse, int train, int64_t limit,
                        uint8_t **pixels, uint8_t **labels, int64_t *n) {
  static const layout c10 = {10,
                             "cifar-10-binary.tar.gz",
                             "cifar-10-batches-bin",
                             1,
                             0,
                             5,
                             {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                              "data_batch_4.bin", "data_batch_5.bin"}};
  static const layout c100 = {100,          "cifar-100-binary.tar.gz", "cifar-100-binary", 2, 1, 1,
                              {"train.bin"}};
  *pixels = *labels = NULL;
  *n = 0;
  if (classes != 10 && classes != 100)
    return GP_ERR(GP_ERR_USAGE, "CIFAR has 10 or 100 classes, not %d", classes);
  if (coarse && classes != 100)
    return GP_ERR(GP_ERR_SPEC, "data.coarse_labels: only CIFAR-100 has coarse labels");
  layout chosen = classes == 10 ? c10 : c100;
  if (coarse) chosen.label_at = 0;
  const layout *lay = &chosen;
  const char *test_file[1] = {classes == 10 ? "test_batch.bin" : "test.bin"};
  const char **want = train ? (const char **)lay->files : test_file;
  int n_want = train ? lay->n_files : 1;
  if (!path[0])
    return GP_ERR(GP_ERR_SPEC,
                  "data.path: set it to the directory with %s or the extracted .bin files",
                  lay->archive);
  char where[1200];
  int kind = locate(lay, path, test_file[0], where, sizeof where);
  if (!kind)
    return GP_ERR(GP_ERR_DATA,
                  "data.path %s: set it to the directory with %s or the extracted .bin files "
                  "(neither is there)",
                  path, lay->archive);
  part parts[MAX_FILES];
  memset(parts, 0, sizeof parts);
  gp_status st = kind == 1 ? from_archive(lay, where, want, n_want, limit, parts)
                           : from_dir(lay, where, want, n_want, limit, parts);
  int64_t total = 0;
  for (int i = 0; i < n_want; i++)
    total += parts[i].n;
  if (limit > 0 && total > limit) total = limit;
  uint8_t *px = NULL, *lb = NULL;
  if (st == GP_OK) {
    px = malloc((size_t)(total ? total : 1) * GP_CIFAR_PIXELS);
    lb = malloc((size_t)(total ? total : 1));
    if (!px || !lb)
      st = GP_ERR(GP_ERR_NOMEM, "out of memory for %lld CIFAR images", (long long)total);
  }
  int64_t at = 0;
  for (int i = 0; i < n_want; i++) {
    int64_t k = parts[i].n < total - at ? parts[i].n : total - at;
    if (st == GP_OK && k > 0) {
      memcpy(px + at * GP_CIFAR_PIXELS, parts[i].pixels, (size_t)k * GP_CIFAR_PIXELS);
      memcpy(lb + at, parts[i].labels, (size_t)k);
      at += k;
    }
    free(parts[i].pixels);
    free(parts[i].labels);
  }
  if (st != GP_OK) {
    free(px);
    free(lb);
    return st;
  }
  *pixels = px;
  *labels = lb;
  *n = total;
  return GP_OK;
}
