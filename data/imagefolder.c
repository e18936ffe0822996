/* ImageFolder scanning: class folders, then every JPEG under each in torchvision's order
 * (sorted(os.walk(class_dir)), then sorted file names). */
#include "data/imagefolder.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/wds.h"

#define MAX_DEPTH 16

typedef struct entry {
  char *p;     /* full path */
  size_t dlen; /* length of its folder part */
} entry;

typedef struct entries {
  entry *e;
  int64_t n, cap;
} entries;

static gp_status add(entries *v, char *p, size_t dlen) {
  if (v->n == v->cap) {
    int64_t cap = v->cap ? v->cap * 2 : 64;
    entry *e = realloc(v->e, sizeof *e * (size_t)cap);
    if (!e) {
      free(p);
      return GP_ERR(GP_ERR_NOMEM, "out of memory scanning image folders");
    }
    v->e = e;
    v->cap = cap;
  }
  v->e[v->n++] = (entry){p, dlen};
  return GP_OK;
}

static void entries_free(entries *v) {
  for (int64_t i = 0; i < v->n; i++)
    free(v->e[i].p);
  free(v->e);
  memset(v, 0, sizeof *v);
}

static char *join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *p = malloc(na + nb + 2);
  if (p) sprintf(p, "%s/%s", a, b);
  return p;
}

static int is_jpeg_name(const char *s) {
  size_t n = strlen(s);
  return (n > 4 && strcasecmp(s + n - 4, ".jpg") == 0) ||
         (n > 5 && strcasecmp(s + n - 5, ".jpeg") == 0);
}

/* Folder then name, bytewise: Python's order of (root, name) pairs. */
static int cmp_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  size_t m = x->dlen < y->dlen ? x->dlen : y->dlen;
  int c = memcmp(x->p, y->p, m);
  if (c) return c;
  if (x->dlen != y->dlen) return x->dlen < y->dlen ? -1 : 1;
  return strcmp(x->p + x->dlen + 1, y->p + y->dlen + 1);
}

/* dirs: the folder's visible sub-folders (names); files: its JPEGs (full paths) and, when
 * deep, those of every sub-folder. */
static gp_status walk(const char *dir, int depth, entries *files, entries *dirs) {
  if (depth > MAX_DEPTH)
    return GP_ERR(GP_ERR_DATA, "%s: folders nested deeper than %d", dir, MAX_DEPTH);
  DIR *d = opendir(dir);
  if (!d) return GP_ERR(GP_ERR_DATA, "%s: cannot list: %s", dir, strerror(errno));
  gp_status st = GP_OK;
  struct dirent *e;
  entries subs = {0};
  while (st == GP_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char *p = join(dir, e->d_name);
    struct stat sb;
    if (!p) {
      st = GP_ERR(GP_ERR_NOMEM, "out of memory scanning image folders");
    } else if (stat(p, &sb) != 0) {
      /* an image that cannot be reached (a dangling link) would shrink the split silently */
      if (files && is_jpeg_name(e->d_name))
        st = GP_ERR(GP_ERR_DATA, "%s: cannot open: %s%s", p, strerror(errno),
                    errno == ENOENT ? " (a symbolic link to nothing)" : "");
      free(p);
    } else if (S_ISDIR(sb.st_mode)) {
      st = add(dirs ? dirs : &subs, p, strlen(dir));
    } else if (S_ISREG(sb.st_mode) && files && is_jpeg_name(e->d_name)) {
      st = add(files, p, strlen(dir));
    } else {
      free(p);
    }
  }
  closedir(d);
  for (int64_t i = 0; st == GP_OK && i < subs.n; i++)
    st = walk(subs.e[i].p, depth + 1, files, NULL);
  entries_free(&subs);
  return st;
}

void gp_imagefolder_free(gp_imagefolder *f) {
  if (!f) return;
  gp_strings_free(f->classes, f->n_classes);
  gp_strings_free(f->paths, (int)f->n);
  free(f->labels);
  memset(f, 0, sizeof *f);
}

static int find_class(char **names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

/* The visible sub-folders of root, sorted bytewise (an error naming root if none). */
static gp_status class_dirs(const char *root, entries *dirs) {
  GP_TRY(walk(root, 0, NULL, dirs));
  if (dirs->n == 0)
    return GP_ERR(GP_ERR_DATA, "%s: no class folders (expected %s/<class>/<image>.jpg)", root,
                  root);
  qsort(dirs->e, (size_t)dirs->n, sizeof *dirs->e, cmp_entry);
  return GP_OK;
}

/* The names of sorted class folders as the label -> class table. */
static gp_status names_of(const entries *dirs, const char *root, gp_imagefolder *out) {
  if (!(out->classes = calloc((size_t)dirs->n, sizeof *out->classes)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory scanning %s", root);
  for (int64_t i = 0; i < dirs->n; i++) {
    const char *name = dirs->e[i].p + dirs->e[i].dlen + 1;
    if (!(out->classes[i] = malloc(strlen(name) + 1)))
      return GP_ERR(GP_ERR_NOMEM, "out of memory scanning %s", root);
    strcpy(out->classes[i], name);
    out->n_classes = (int)i + 1;
  }
  return GP_OK;
}

/* The class table: classes.txt, else class_root's folders, else root's own (dirs). */
static gp_status load_classes(const char *root, const char *classes_txt, const char *class_root,
                              const entries *dirs, gp_imagefolder *out) {
  if (classes_txt && classes_txt[0])
    return gp_classes_read(classes_txt, &out->classes, &out->n_classes);
  if (!class_root || !class_root[0]) return names_of(dirs, root, out);
  entries other = {0};
  gp_status st = class_dirs(class_root, &other);
  if (st == GP_OK) st = names_of(&other, class_root, out);
  entries_free(&other);
  return st;
}

gp_status gp_imagefolder_scan(const char *root, const char *classes_txt, const char *class_root,
                              gp_imagefolder *out) {
  memset(out, 0, sizeof *out);
  entries dirs = {0}, files = {0};
  gp_status st = class_dirs(root, &dirs);
  if (st == GP_OK) st = load_classes(root, classes_txt, class_root, &dirs, out);
  const char *listed = classes_txt && classes_txt[0] ? classes_txt : class_root;
  int64_t *first = st == GP_OK ? calloc((size_t)dirs.n + 1, sizeof *first) : NULL;
  int32_t *label_of = st == GP_OK ? calloc((size_t)dirs.n + 1, sizeof *label_of) : NULL;
  if (st == GP_OK && (!first || !label_of))
    st = GP_ERR(GP_ERR_NOMEM, "out of memory scanning %s", root);
  /* Images of each class folder, in folder order (the labels' order without classes.txt). */
  for (int64_t c = 0; st == GP_OK && c < dirs.n; c++) {
    const char *cdir = dirs.e[c].p, *name = cdir + dirs.e[c].dlen + 1;
    int label = find_class(out->classes, out->n_classes, name);
    if (label < 0) {
      st = listed == class_root
               ? GP_ERR(GP_ERR_DATA, "%s: class '%s' is not a class of the training split %s", cdir,
                        name, listed)
               : GP_ERR(GP_ERR_DATA, "%s: class folder '%s' is not in %s", cdir, name, listed);
      break;
    }
    label_of[c] = label;
    first[c] = files.n;
    st = walk(cdir, 1, &files, NULL);
    if (st != GP_OK) break;
    if (files.n == first[c])
      st = GP_ERR(GP_ERR_DATA, "%s: no .jpg or .jpeg files in this class folder", cdir);
    else
      qsort(files.e + first[c], (size_t)(files.n - first[c]), sizeof *files.e, cmp_entry);
  }
  if (st == GP_OK && files.n > INT32_MAX)
    st = GP_ERR(GP_ERR_DATA, "%s: more than %d images", root, INT32_MAX);
  if (st == GP_OK) {
    out->paths = malloc(sizeof *out->paths * (size_t)files.n);
    out->labels = malloc(sizeof *out->labels * (size_t)files.n);
    if (!out->paths || !out->labels) st = GP_ERR(GP_ERR_NOMEM, "out of memory scanning %s", root);
  }
  if (st == GP_OK) {
    first[dirs.n] = files.n;
    for (int64_t c = 0; c < dirs.n; c++)
      for (int64_t i = first[c]; i < first[c + 1]; i++) {
        out->paths[i] = files.e[i].p;
        out->labels[i] = label_of[c];
        files.e[i].p = NULL;
      }
    out->n = files.n;
  }
  free(first);
  free(label_of);
  entries_free(&files);
  entries_free(&dirs);
  if (st != GP_OK) gp_imagefolder_free(out);
  return st;
}

gp_status gp_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *n) {
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return GP_ERR(GP_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  gp_status st = GP_OK;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode))
    st = GP_ERR(GP_ERR_DATA, "%s: not a regular file", path);
  else if ((uint64_t)sb.st_size > GP_IMAGE_FILE_MAX)
    st = GP_ERR(GP_ERR_DATA, "%s: %lld bytes, more than the %zu an image file may have", path,
                (long long)sb.st_size, GP_IMAGE_FILE_MAX);
  size_t size = st == GP_OK ? (size_t)sb.st_size : 0;
  if (st == GP_OK && size + 1 > *cap) {
    uint8_t *p = realloc(*buf, size + 1);
    if (!p)
      st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
    else {
      *buf = p;
      *cap = size + 1;
    }
  }
  /* One byte more than the size asks for, to notice a file that grew meanwhile. */
  size_t got = st == GP_OK ? fread(*buf, 1, size + 1, f) : 0;
  if (st == GP_OK && ferror(f))
    st = GP_ERR(GP_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  else if (st == GP_OK && got != size)
    st = GP_ERR(GP_ERR_IO, "%s: size changed while reading (%zu bytes, expected %zu)", path, got,
                size);
  fclose(f);
  if (st == GP_OK) *n = got;
  return st;
}
