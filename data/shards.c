/* Shard lists and class lists for WebDataset data (declared in data/wds.h): brace patterns,
 * @list files and directories of shards; classes.txt. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/wds.h"

typedef struct strs {
  char **s;
  int n, cap;
} strs;

void gp_strings_free(char **s, int n) {
  if (!s) return;
  for (int i = 0; i < n; i++)
    free(s[i]);
  free(s);
}

static gp_status push(strs *v, const char *a, size_t na, const char *b, size_t nb) {
  if (v->n >= GP_SHARDS_MAX)
    return GP_ERR(GP_ERR_DATA, "more than %d shards: is the pattern what you meant?",
                  GP_SHARDS_MAX);
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 16;
    char **p = realloc(v->s, sizeof *p * (size_t)cap);
    if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory listing shards");
    v->s = p;
    v->cap = cap;
  }
  char *s = malloc(na + nb + 1);
  if (!s) return GP_ERR(GP_ERR_NOMEM, "out of memory listing shards");
  memcpy(s, a, na);
  memcpy(s + na, b, nb);
  s[na + nb] = 0;
  v->s[v->n++] = s;
  return GP_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && strcmp(s + n - k, suf) == 0;
}

static gp_status from_dir(const char *dir, strs *v) {
  DIR *d = opendir(dir);
  if (!d) return GP_ERR(GP_ERR_DATA, "%s: cannot list: %s", dir, strerror(errno));
  strs names = {0};
  gp_status st = GP_OK;
  struct dirent *e;
  while (st == GP_OK && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.' && (ends_with(e->d_name, ".tar") || ends_with(e->d_name, ".tar.gz")))
      st = push(&names, e->d_name, strlen(e->d_name), "", 0);
  closedir(d);
  if (st == GP_OK && names.n == 0)
    st = GP_ERR(GP_ERR_DATA, "%s: no .tar or .tar.gz shards in this folder", dir);
  if (st == GP_OK) qsort(names.s, (size_t)names.n, sizeof *names.s, cmp_str);
  size_t nd = strlen(dir);
  while (nd > 1 && dir[nd - 1] == '/')
    nd--;
  for (int i = 0; st == GP_OK && i < names.n; i++) {
    char *full = malloc(nd + 2 + strlen(names.s[i]));
    if (!full) {
      st = GP_ERR(GP_ERR_NOMEM, "out of memory listing shards");
      break;
    }
    sprintf(full, "%.*s/%s", (int)nd, dir, names.s[i]);
    /* a folder named like a shard is not one; a shard that cannot be reached (a dangling
     * link) is an error, not a shard left out of the split */
    struct stat sb;
    if (stat(full, &sb) != 0)
      st = GP_ERR(GP_ERR_DATA, "%s: cannot open: %s%s", full, strerror(errno),
                  errno == ENOENT ? " (a symbolic link to nothing)" : "");
    else if (S_ISREG(sb.st_mode))
      st = push(v, full, strlen(full), "", 0);
    free(full);
  }
  gp_strings_free(names.s, names.n);
  return st;
}

/* The whole of a small text file, NUL-terminated. */
static gp_status slurp(const char *path, char **out, size_t *n) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return GP_ERR(GP_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 4096, len = 0;
  char *b = malloc(cap);
  gp_status st = GP_OK;
  for (;;) {
    if (!b) {
      st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
      break;
    }
    len += fread(b + len, 1, cap - len - 1, f);
    if (len < cap - 1) break;
    if (cap > (size_t)64 << 20) {
      st = GP_ERR(GP_ERR_DATA, "%s: larger than 64 MiB, not a list", path);
      break;
    }
    char *p = realloc(b, cap * 2);
    if (!p) free(b);
    b = p;
    cap *= 2;
  }
  if (st == GP_OK && ferror(f))
    st = GP_ERR(GP_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  fclose(f);
  if (st != GP_OK) {
    free(b);
    return st;
  }
  b[len] = 0;
  *out = b;
  *n = len;
  return GP_OK;
}

/* Line [a, b) of a text with surrounding blanks (and a CR) removed. */
static void trim(const char **a, const char **b) {
  while (*a < *b && strchr(" \t\r\v\f", **a))
    (*a)++;
  while (*b > *a && strchr(" \t\r\v\f", (*b)[-1]))
    (*b)--;
}

static gp_status from_list(const char *file, strs *v) {
  char *text;
  size_t n;
  GP_TRY(slurp(file, &text, &n));
  const char *slash = strrchr(file, '/');
  size_t nd = slash ? (size_t)(slash - file) + 1 : 0; /* the folder, with its '/' */
  gp_status st = GP_OK;
  int before = v->n;
  for (const char *p = text; st == GP_OK && p < text + n;) {
    const char *e = memchr(p, '\n', (size_t)(text + n - p)), *a = p, *b = e ? e : text + n;
    p = e ? e + 1 : text + n;
    trim(&a, &b);
    if (a == b || *a == '#') continue;
    if (memchr(a, 0, (size_t)(b - a))) {
      st = GP_ERR(GP_ERR_DATA, "%s: a NUL byte in a line: not a text file", file);
      break;
    }
    st = push(v, *a == '/' ? "" : file, *a == '/' ? 0 : nd, a, (size_t)(b - a));
  }
  free(text);
  if (st == GP_OK && v->n == before) st = GP_ERR(GP_ERR_DATA, "%s: lists no shards", file);
  return st;
}

/* One pattern item: literal text and {..} groups. */
typedef struct group {
  const char *at; /* the '{' */
  size_t len;     /* through the '}' */
  int64_t first, count, step;
  int width; /* zero padding of a range, 0 for alternatives */
  int alts;  /* 1: alternatives separated by ',' */
} group;

#define MAX_GROUPS 16

static gp_status parse_group(const char *item, const char *a, const char *b, group *g) {
  memset(g, 0, sizeof *g);
  g->at = a;
  g->len = (size_t)(b - a) + 1;
  const char *in = a + 1, *dots = NULL;
  for (const char *p = in; p + 1 < b; p++)
    if (p[0] == '.' && p[1] == '.') {
      dots = p;
      break;
    }
  if (memchr(in, ',', (size_t)(b - in))) {
    g->alts = 1;
    g->count = 1;
    for (const char *p = in; p < b; p++)
      g->count += *p == ',';
    return GP_OK;
  }
  size_t nl = dots ? (size_t)(dots - in) : 0, nr = dots ? (size_t)(b - dots - 2) : 0;
  int ok = dots && nl >= 1 && nr >= 1 && nl <= 18 && nr <= 18;
  for (size_t i = 0; ok && i < nl; i++)
    ok = in[i] >= '0' && in[i] <= '9';
  for (size_t i = 0; ok && i < nr; i++)
    ok = dots[2 + i] >= '0' && dots[2 + i] <= '9';
  if (!ok)
    return GP_ERR(GP_ERR_DATA, "shards '%s': {%.*s} is neither a range {A..B} nor a list {a,b}",
                  item, (int)(b - in), in);
  int64_t lo = strtoll(in, NULL, 10), hi = strtoll(dots + 2, NULL, 10);
  /* braceexpand's rule: pad to the wider end when either is written with a leading zero. */
  int pad = (nl > 1 && in[0] == '0') || (nr > 1 && dots[2] == '0');
  g->width = pad ? (int)(nl > nr ? nl : nr) : 0;
  g->first = lo;
  g->step = hi >= lo ? 1 : -1;
  g->count = (hi >= lo ? hi - lo : lo - hi) + 1;
  return GP_OK;
}

static gp_status from_pattern(const char *item, strs *v) {
  group g[MAX_GROUPS];
  int ng = 0;
  int64_t total = 1;
  for (const char *p = item; *p; p++) {
    if (*p == '}') return GP_ERR(GP_ERR_DATA, "shards '%s': '}' without '{'", item);
    if (*p != '{') continue;
    const char *q = p + 1;
    while (*q && *q != '}' && *q != '{')
      q++;
    if (*q != '}')
      return GP_ERR(GP_ERR_DATA, "shards '%s': %s brace", item, *q ? "nested" : "unclosed");
    if (ng == MAX_GROUPS) return GP_ERR(GP_ERR_DATA, "shards '%s': too many braces", item);
    GP_TRY(parse_group(item, p, q, &g[ng]));
    if (g[ng].count > GP_SHARDS_MAX || (total *= g[ng].count) > GP_SHARDS_MAX)
      return GP_ERR(GP_ERR_DATA, "shards '%s' names more than %d shards: is it what you meant?",
                    item, GP_SHARDS_MAX);
    ng++;
    p = q;
  }
  if (v->n + total > GP_SHARDS_MAX)
    return GP_ERR(GP_ERR_DATA, "more than %d shards: is the pattern what you meant?",
                  GP_SHARDS_MAX);
  char buf[4096];
  for (int64_t k = 0; k < total; k++) {
    /* Mixed radix, the last group fastest. */
    int64_t idx[MAX_GROUPS], r = k;
    for (int i = ng - 1; i >= 0; i--) {
      idx[i] = r % g[i].count;
      r /= g[i].count;
    }
    size_t len = 0;
    const char *lit = item;
    for (int i = 0; i <= ng; i++) {
      const char *end = i < ng ? g[i].at : item + strlen(item);
      int w = snprintf(buf + len, sizeof buf - len, "%.*s", (int)(end - lit), lit);
      len += (size_t)w;
      if (i == ng || len >= sizeof buf) break;
      if (g[i].alts) {
        const char *s = g[i].at + 1;
        for (int64_t j = 0; j < idx[i]; j++)
          s = strchr(s, ',') + 1;
        size_t sl = strcspn(s, ",}");
        w = snprintf(buf + len, sizeof buf - len, "%.*s", (int)sl, s);
      } else {
        w = snprintf(buf + len, sizeof buf - len, "%0*lld", g[i].width,
                     (long long)(g[i].first + g[i].step * idx[i]));
      }
      len += (size_t)w;
      if (len >= sizeof buf) break;
      lit = g[i].at + g[i].len;
    }
    if (len >= sizeof buf) return GP_ERR(GP_ERR_DATA, "shards '%s': path too long", item);
    GP_TRY(push(v, buf, len, "", 0));
  }
  return GP_OK;
}

static gp_status expand_item(const char *item, strs *v) {
  if (!item[0] || !strcmp(item, "@"))
    return GP_ERR(GP_ERR_DATA, "shards: an empty item in the list");
  if (item[0] == '@') return from_list(item + 1, v);
  struct stat sb;
  if (!strchr(item, '{') && stat(item, &sb) == 0 && S_ISDIR(sb.st_mode)) return from_dir(item, v);
  return from_pattern(item, v);
}

gp_status gp_shards_expand(const char *spec, char ***paths, int *n) {
  *paths = NULL;
  *n = 0;
  strs v = {0};
  gp_status st = GP_OK;
  size_t len = strlen(spec);
  char *item = malloc(len + 1);
  if (!item) return GP_ERR(GP_ERR_NOMEM, "out of memory listing shards");
  const char *p = spec;
  while (st == GP_OK) {
    const char *a = p;
    int depth = 0;
    while (*p && (*p != ',' || depth > 0)) {
      depth += *p == '{' ? 1 : *p == '}' ? -1 : 0;
      p++;
    }
    const char *b = p;
    trim(&a, &b);
    memcpy(item, a, (size_t)(b - a));
    item[b - a] = 0;
    st = expand_item(item, &v);
    if (!*p) break;
    p++;
  }
  free(item);
  if (st == GP_OK && v.n == 0) st = GP_ERR(GP_ERR_DATA, "shards '%s': no shards", spec);
  if (st != GP_OK) {
    gp_strings_free(v.s, v.n);
    return st;
  }
  *paths = v.s;
  *n = v.n;
  return GP_OK;
}

typedef struct named {
  const char *s;
  int line;
} named;

static int cmp_named(const void *a, const void *b) {
  const named *x = a, *y = b;
  int c = strcmp(x->s, y->s);
  return c ? c : x->line - y->line;
}

gp_status gp_classes_read(const char *path, char ***names, int *n) {
  *names = NULL;
  *n = 0;
  char *text;
  size_t len;
  GP_TRY(slurp(path, &text, &len));
  strs v = {0};
  gp_status st = GP_OK;
  int line = 0;
  for (const char *p = text; st == GP_OK && p < text + len;) {
    const char *e = memchr(p, '\n', (size_t)(text + len - p)), *a = p, *b = e ? e : text + len;
    p = e ? e + 1 : text + len;
    line++;
    trim(&a, &b);
    if (a == b)
      st = GP_ERR(GP_ERR_DATA, "%s:%d: blank line (one class name a line, label = line - 1)", path,
                  line);
    else if (memchr(a, 0, (size_t)(b - a)))
      st = GP_ERR(GP_ERR_DATA, "%s:%d: a NUL byte: not a text file", path, line);
    else
      st = push(&v, a, (size_t)(b - a), "", 0);
  }
  free(text);
  if (st == GP_OK && v.n == 0) st = GP_ERR(GP_ERR_DATA, "%s: no class names", path);
  named *s = st == GP_OK ? malloc(sizeof *s * (size_t)v.n) : NULL;
  if (st == GP_OK && !s) st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  if (st == GP_OK) {
    for (int i = 0; i < v.n; i++)
      s[i] = (named){v.s[i], i + 1};
    qsort(s, (size_t)v.n, sizeof *s, cmp_named);
    for (int i = 1; i < v.n && st == GP_OK; i++)
      if (strcmp(s[i].s, s[i - 1].s) == 0)
        st = GP_ERR(GP_ERR_DATA, "%s:%d: class '%s' repeats line %d", path, s[i].line, s[i].s,
                    s[i - 1].line);
  }
  free(s);
  if (st != GP_OK) {
    gp_strings_free(v.s, v.n);
    return st;
  }
  *names = v.s;
  *n = v.n;
  return GP_OK;
}
