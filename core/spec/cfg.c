/* gp_cfg: located key/value settings with "did you mean" for unknown keys. */
#include "core/spec/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "core/decimal.h"

typedef struct entry {
  char *key;
  int is_list, n;
  char **items;    /* scalar: items[0] */
  int *line, *col; /* per item */
  int kline, kcol; /* the value's position */
  int asked;
  int null; /* written as ~: not set */
} entry;

struct gp_cfg {
  char *file;
  int line, col;
  entry *e;
  int n, cap;
  const char *asked[64]; /* keys asked for, present or not (for suggestions) */
  int n_asked;
  char what[64]; /* what the mapping configures ("linear"), for "missing required key" */
};

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

gp_cfg *gp_cfg_new(const char *file, int line, int col) {
  gp_cfg *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->file = dupstr(file ? file : "<config>");
  c->line = line;
  c->col = col;
  if (!c->file) {
    free(c);
    return NULL;
  }
  return c;
}

void gp_cfg_free(gp_cfg *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    entry *e = &c->e[i];
    for (int j = 0; j < e->n; j++)
      free(e->items[j]);
    free(e->items);
    free(e->line);
    free(e->col);
    free(e->key);
  }
  free(c->e);
  free(c->file);
  free(c);
}

void gp_cfg_set_what(gp_cfg *c, const char *what) {
  snprintf(c->what, sizeof c->what, "%s", what ? what : "");
}

const char *gp_cfg_file(const gp_cfg *c) {
  return c->file;
}
int gp_cfg_line(const gp_cfg *c) {
  return c->line;
}
int gp_cfg_col(const gp_cfg *c) {
  return c->col;
}

static entry *find(gp_cfg *c, const char *key) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->e[i].key, key) == 0) return &c->e[i];
  return NULL;
}

static void note_asked(gp_cfg *c, const char *key) {
  for (int i = 0; i < c->n_asked; i++)
    if (strcmp(c->asked[i], key) == 0) return;
  if (c->n_asked < (int)(sizeof c->asked / sizeof c->asked[0])) c->asked[c->n_asked++] = key;
}

/* The key's value, or NULL when it is absent or null (then the reader's default applies). */
static entry *lookup(gp_cfg *c, const char *key) {
  note_asked(c, key);
  entry *e = find(c, key);
  if (e) e->asked = 1;
  return e && !e->null ? e : NULL;
}

static gp_status add(gp_cfg *c, const char *key, int n, const char *const *items, const int *il,
                     const int *ic, int line, int col, int is_list) {
  if (find(c, key))
    return GP_ERR(GP_ERR_SPEC, "%s:%d:%d: duplicate key '%s'", c->file, line, col, key);
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 8;
    entry *ne = realloc(c->e, (size_t)cap * sizeof *ne);
    if (!ne) return GP_ERR(GP_ERR_NOMEM, "out of memory reading settings");
    c->e = ne;
    c->cap = cap;
  }
  entry *e = &c->e[c->n];
  memset(e, 0, sizeof *e);
  e->key = dupstr(key);
  e->items = calloc((size_t)(n ? n : 1), sizeof *e->items);
  e->line = calloc((size_t)(n ? n : 1), sizeof *e->line);
  e->col = calloc((size_t)(n ? n : 1), sizeof *e->col);
  if (!e->key || !e->items || !e->line || !e->col) {
    free(e->key);
    free(e->items);
    free(e->line);
    free(e->col);
    return GP_ERR(GP_ERR_NOMEM, "out of memory reading settings");
  }
  c->n++;
  e->is_list = is_list;
  e->kline = line;
  e->kcol = col;
  for (int i = 0; i < n; i++) {
    e->items[i] = dupstr(items[i]);
    if (!e->items[i]) return GP_ERR(GP_ERR_NOMEM, "out of memory reading settings");
    e->n = i + 1;
    e->line[i] = il ? il[i] : line;
    e->col[i] = ic ? ic[i] : col;
  }
  return GP_OK;
}

gp_status gp_cfg_add_scalar(gp_cfg *c, const char *key, const char *text, int line, int col) {
  return add(c, key, 1, &text, NULL, NULL, line, col, 0);
}

gp_status gp_cfg_add_null(gp_cfg *c, const char *key, int line, int col) {
  GP_TRY(add(c, key, 0, NULL, NULL, NULL, line, col, 0));
  c->e[c->n - 1].null = 1;
  return GP_OK;
}

gp_status gp_cfg_add_list(gp_cfg *c, const char *key, int n, const char *const *items,
                          const int *item_line, const int *item_col, int line, int col) {
  return add(c, key, n, items, item_line, item_col, line, col, 1);
}

static gp_status verror(gp_cfg *c, int line, int col, const char *fmt, va_list ap) {
  char m[768];
  vsnprintf(m, sizeof m, fmt, ap);
  return GP_ERR(GP_ERR_SPEC, "%s:%d:%d: %s", c->file, line, col, m);
}

static gp_status at_error(gp_cfg *c, int line, int col, const char *fmt, ...) GP_PRINTF(4, 5);
static gp_status at_error(gp_cfg *c, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gp_status s = verror(c, line, col, fmt, ap);
  va_end(ap);
  return s;
}

/* A required key is absent: if a present key nobody asked for looks like it, the misspelling
 * is the real error, so report that one, where it was written. */
static gp_status missing(gp_cfg *c, const char *key) {
  entry *given = find(c, key);
  if (given && given->null)
    return at_error(c, given->kline, given->kcol, "%s: needs a value, got nothing (null)", key);
  for (int i = 0; i < c->n; i++) {
    entry *e = &c->e[i];
    if (!e->asked && gp_nearest(e->key, &key, 1))
      return at_error(c, e->kline, e->kcol, "unknown key '%s'; did you mean '%s'?", e->key, key);
  }
  if (c->what[0])
    return at_error(c, c->line, c->col, "missing required key '%s' for %s", key, c->what);
  return at_error(c, c->line, c->col, "missing required key '%s'", key);
}

/* The error at item i of key's list, else at key's value, else at the mapping. */
static const char *float_note(const char *text, char *buf, size_t n);

static gp_status verror_at(gp_cfg *c, const char *key, int i, const char *fmt, va_list ap) {
  entry *e = key ? find(c, key) : NULL;
  gp_status s;
  if (e && e->is_list && i >= 0 && i < e->n)
    s = verror(c, e->line[i], e->col[i], fmt, ap);
  else
    s = verror(c, e ? e->kline : c->line, e ? e->kcol : c->col, fmt, ap);
  char note[160];
  int item = e && e->is_list ? (i >= 0 && i < e->n ? i : -1) : 0;
  if (e && e->n > 0 && item >= 0 && float_note(e->items[item], note, sizeof note)[0]) {
    char m[1024];
    snprintf(m, sizeof m, "%s", gp_error_message());
    s = GP_ERR(s, "%s%s", m, note);
  }
  return s;
}

gp_status gp_cfg_error(gp_cfg *c, const char *key, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gp_status s = verror_at(c, key, -1, fmt, ap);
  va_end(ap);
  return s;
}

gp_status gp_cfg_error_item(gp_cfg *c, const char *key, int i, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gp_status s = verror_at(c, key, i, fmt, ap);
  va_end(ap);
  return s;
}

int gp_cfg_has(gp_cfg *c, const char *key) {
  return lookup(c, key) != NULL;
}

int gp_cfg_parse_int(const char *s, int64_t *out) {
  char *end;
  if (!isdigit((unsigned char)(*s == '-' ? s[1] : s[0]))) return 0;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end) return 0;
  if (errno) return -1;
  *out = v;
  return 1;
}

/* A setting's number. The kernels take it as a float32, so one beyond float32's range is
 * refused here, and the checks of ranges that rounding can cross (below 1, above 0) look at
 * its float32 too. 1: the number in *out; 0: not a number; -1: beyond float32. */
static int parse_float(const char *s, double *out) {
  char *end;
  if (isspace((unsigned char)*s)) return 0; /* a quoted " 0.5": strtod skips the space */
  errno = 0;
  double v = gp_decimal(s, &end);
  if (end == s || *end || !isfinite(v)) return 0;
  if (!isfinite((float)v)) return -1;
  *out = v;
  return 1;
}

/* d's float32 as the shortest text that reads back to it: 1000001 (not %g's 1e+06), 0.1, 0. */
static const char *float32_str(double d, char *buf, size_t n) {
  const float f = (float)d;
  if (f > -9.0e15f && f < 9.0e15f && f == (float)(long long)f) {
    snprintf(buf, n, "%lld", (long long)f);
    return buf;
  }
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, n, "%.*g", p, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  return buf;
}

/* " (0.99999999999 is 1 as float32)" for an error about a number that float32's rounding
 * changed (as the shortest text shows it: 0.1 is 0.1), else "". */
static const char *float_note(const char *text, char *buf, size_t n) {
  double d;
  char shown[64];
  buf[0] = 0;
  if (parse_float(text, &d) != 1) return buf;
  float32_str(d, shown, sizeof shown);
  if (strtod(shown, NULL) != d) snprintf(buf, n, " (%.40s is %.24s as float32)", text, shown);
  return buf;
}

static gp_status scalar_of(gp_cfg *c, entry *e, const char *key) {
  if (e->is_list)
    return at_error(c, e->kline, e->kcol, "%s: expected a single value, got a list", key);
  return GP_OK;
}

int gp_range_holds(gp_range r, double v) {
  const float f = (float)v;
  if (r.lo_open ? !(v > r.lo && f > (float)r.lo) : !(v >= r.lo)) return 0;
  if (r.hi_open ? !(v < r.hi && f < (float)r.hi) : !(v <= r.hi)) return 0;
  return 1;
}

int gp_range_str(gp_range r, char *buf, size_t n) {
  char lo[32], hi[32];
  const int has_lo = isfinite(r.lo), has_hi = isfinite(r.hi);
  if (has_lo) gp_decimal_shortest(r.lo, lo, sizeof lo);
  if (has_hi) gp_decimal_shortest(r.hi, hi, sizeof hi);
  if (has_lo && has_hi) {
    snprintf(buf, n, "%c%s, %s%c", r.lo_open ? '(' : '[', lo, hi, r.hi_open ? ')' : ']');
    return 0;
  }
  if (has_lo)
    snprintf(buf, n, ">%s %s", r.lo_open ? "" : "=", lo);
  else if (has_hi)
    snprintf(buf, n, "<%s %s", r.hi_open ? "" : "=", hi);
  else
    snprintf(buf, n, "any");
  return has_lo || has_hi;
}

int gp_int_range_str(int64_t min, int64_t max, char *buf, size_t n) {
  if (min > INT64_MIN && max < INT64_MAX) {
    snprintf(buf, n, "[%lld, %lld]", (long long)min, (long long)max);
    return 0;
  }
  if (min > INT64_MIN)
    snprintf(buf, n, ">= %lld", (long long)min);
  else if (max < INT64_MAX)
    snprintf(buf, n, "<= %lld", (long long)max);
  else
    snprintf(buf, n, "any");
  return min > INT64_MIN || max < INT64_MAX;
}

/* "key: 5000 is out of range [1, 4096]", "key: -1 must be >= 0", at item i. */
static gp_status int_range_error(gp_cfg *c, entry *e, int i, const char *key, const char *shown,
                                 int64_t min, int64_t max) {
  char r[96];
  if (gp_int_range_str(min, max, r, sizeof r))
    return at_error(c, e->line[i], e->col[i], "%s: %s must be %s", key, shown, r);
  return at_error(c, e->line[i], e->col[i], "%s: %s is out of range %s", key, shown, r);
}

static gp_status int_item(gp_cfg *c, entry *e, int i, const char *key, int64_t min, int64_t max,
                          int64_t *out) {
  const int r = gp_cfg_parse_int(e->items[i], out);
  if (r < 0) { /* beyond 64 bits: out of the range unless the range reaches that far */
    const int neg = e->items[i][0] == '-';
    if (neg ? min > INT64_MIN : max < INT64_MAX)
      return int_range_error(c, e, i, key, e->items[i], min, max);
    return at_error(c, e->line[i], e->col[i], "%s: %s is beyond 64-bit integers (%s %lld)", key,
                    e->items[i], neg ? "at least" : "at most",
                    (long long)(neg ? INT64_MIN : INT64_MAX));
  }
  if (!r)
    return at_error(c, e->line[i], e->col[i], "%s: expected an integer, got '%s'", key,
                    e->items[i]);
  if (*out < min || *out > max) {
    char shown[32];
    snprintf(shown, sizeof shown, "%lld", (long long)*out);
    return int_range_error(c, e, i, key, shown, min, max);
  }
  return GP_OK;
}

gp_status gp_cfg_int(gp_cfg *c, const char *key, int64_t dflt, int64_t min, int64_t max,
                     int64_t *out) {
  entry *e = lookup(c, key);
  if (!e) {
    *out = dflt;
    return GP_OK;
  }
  GP_TRY(scalar_of(c, e, key));
  return int_item(c, e, 0, key, min, max, out);
}

/* Item i of e, a number in r; errors at the item, with the float32 note where float32 alone
 * refused it. */
static gp_status float_item(gp_cfg *c, entry *e, int i, const char *key, gp_range r, double *out) {
  const int p = parse_float(e->items[i], out);
  if (p < 0)
    return at_error(c, e->line[i], e->col[i], "%s: %s is beyond float32's range (about 3.4e38)",
                    key, e->items[i]);
  if (!p)
    return at_error(c, e->line[i], e->col[i], "%s: expected a number, got '%s'", key, e->items[i]);
  if (gp_range_holds(r, *out)) return GP_OK;
  /* refused for its float32 alone (an open bound): say so; else the value itself is out */
  const gp_range as_written = {r.lo, r.hi, 0, 0};
  const int by_float = gp_range_holds(as_written, *out) && *out != r.lo && *out != r.hi;
  char rs[96], note[160] = "";
  if (by_float) float_note(e->items[i], note, sizeof note);
  if (gp_range_str(r, rs, sizeof rs))
    return at_error(c, e->line[i], e->col[i], "%s: %s must be %s%s", key, e->items[i], rs, note);
  return at_error(c, e->line[i], e->col[i], "%s: %s is out of range %s%s", key, e->items[i], rs,
                  note);
}

gp_status gp_cfg_float_in(gp_cfg *c, const char *key, double dflt, gp_range r, double *out) {
  entry *e = lookup(c, key);
  if (!e) {
    *out = dflt;
    return GP_OK;
  }
  GP_TRY(scalar_of(c, e, key));
  return float_item(c, e, 0, key, r, out);
}

gp_status gp_cfg_float(gp_cfg *c, const char *key, double dflt, double min, double max,
                       double *out) {
  const gp_range r = {min, max, 0, 0};
  return gp_cfg_float_in(c, key, dflt, r, out);
}

gp_status gp_cfg_bool(gp_cfg *c, const char *key, int dflt, int *out) {
  entry *e = lookup(c, key);
  if (!e) {
    *out = dflt;
    return GP_OK;
  }
  GP_TRY(scalar_of(c, e, key));
  const char *s = e->items[0];
  if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
    *out = 1;
  else if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
    *out = 0;
  else
    return at_error(c, e->line[0], e->col[0], "%s: expected true or false, got '%s'", key, s);
  return GP_OK;
}

gp_status gp_cfg_str(gp_cfg *c, const char *key, const char *dflt, const char **out) {
  entry *e = lookup(c, key);
  if (!e) {
    *out = dflt;
    return GP_OK;
  }
  GP_TRY(scalar_of(c, e, key));
  *out = e->items[0];
  return GP_OK;
}

/* Item i of e, one of choices: its index in *out, or an error at the item. */
static gp_status choice_item(gp_cfg *c, entry *e, int i, const char *key,
                             const char *const *choices, int *out) {
  int n = 0;
  for (; choices[n]; n++)
    if (strcmp(choices[n], e->items[i]) == 0) {
      *out = n;
      return GP_OK;
    }
  char list[256] = "";
  for (int j = 0; j < n; j++) {
    strncat(list, j ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, choices[j], sizeof list - strlen(list) - 1);
  }
  const char *near = gp_nearest(e->items[i], choices, n);
  if (near)
    return at_error(c, e->line[i], e->col[i], "%s: unknown value '%s'; did you mean '%s'?", key,
                    e->items[i], near);
  return at_error(c, e->line[i], e->col[i], "%s: unknown value '%s' (one of: %s)", key, e->items[i],
                  list);
}

gp_status gp_cfg_choice(gp_cfg *c, const char *key, const char *const *choices, int dflt,
                        int *out) {
  entry *e = lookup(c, key);
  if (!e) {
    *out = dflt;
    return GP_OK;
  }
  GP_TRY(scalar_of(c, e, key));
  return choice_item(c, e, 0, key, choices, out);
}

gp_status gp_cfg_choices(gp_cfg *c, const char *key, const char *const *choices, int max_n,
                         int *out, int *n_out) {
  entry *e = lookup(c, key);
  *n_out = 0;
  if (!e) return GP_OK;
  if (e->n > max_n)
    return at_error(c, e->kline, e->kcol, "%s: expected at most %d values, got %d", key, max_n,
                    e->n);
  for (int i = 0; i < e->n; i++)
    GP_TRY(choice_item(c, e, i, key, choices, &out[i]));
  *n_out = e->n;
  return GP_OK;
}

gp_status gp_cfg_ints(gp_cfg *c, const char *key, int n, const int64_t *dflt, int64_t min,
                      int64_t max, int64_t *out) {
  entry *e = lookup(c, key);
  if (!e) {
    if (!dflt) return missing(c, key);
    for (int i = 0; i < n; i++)
      out[i] = dflt[i];
    return GP_OK;
  }
  if (!e->is_list) {
    GP_TRY(int_item(c, e, 0, key, min, max, &out[0]));
    for (int i = 1; i < n; i++)
      out[i] = out[0];
    return GP_OK;
  }
  if (e->n != n)
    return at_error(c, e->kline, e->kcol, "%s: expected %d value%s, got %d", key, n,
                    n == 1 ? "" : "s", e->n);
  for (int i = 0; i < n; i++)
    GP_TRY(int_item(c, e, i, key, min, max, &out[i]));
  return GP_OK;
}

gp_status gp_cfg_floats_in(gp_cfg *c, const char *key, int max_n, gp_range r, double *out,
                           int *n_out) {
  entry *e = lookup(c, key);
  *n_out = 0;
  if (!e) return GP_OK;
  if (e->n > max_n)
    return at_error(c, e->kline, e->kcol, "%s: expected at most %d values, got %d", key, max_n,
                    e->n);
  for (int i = 0; i < e->n; i++)
    GP_TRY(float_item(c, e, i, key, r, &out[i]));
  *n_out = e->n;
  return GP_OK;
}

gp_status gp_cfg_floats(gp_cfg *c, const char *key, int max_n, double *out, int *n_out) {
  const gp_range any = GP_RANGE_ANY;
  return gp_cfg_floats_in(c, key, max_n, any, out, n_out);
}

gp_status gp_cfg_require(gp_cfg *c, const char *key) {
  if (!lookup(c, key)) return missing(c, key);
  return GP_OK;
}

gp_status gp_cfg_check_unknown(gp_cfg *c, const char *what, const char *const *structural) {
  if (!what) what = c->what;
  for (int i = 0; i < c->n; i++) {
    entry *e = &c->e[i];
    if (e->asked) continue;
    int skip = 0;
    for (int j = 0; structural && structural[j]; j++)
      if (strcmp(structural[j], e->key) == 0) skip = 1;
    if (skip) continue;
    /* a mapping under a key that takes a value (key.sub, as the parser reads one level) */
    const char *dot = strchr(e->key, '.');
    for (int j = 0; dot && j < c->n_asked; j++)
      if (strlen(c->asked[j]) == (size_t)(dot - e->key) &&
          strncmp(c->asked[j], e->key, (size_t)(dot - e->key)) == 0)
        return at_error(c, e->kline, e->kcol, "%s: expected a scalar or a list, not a mapping",
                        c->asked[j]);
    const char *near = gp_nearest(e->key, c->asked, c->n_asked);
    if (near)
      return at_error(c, e->kline, e->kcol, "unknown key '%s' for %s; did you mean '%s'?", e->key,
                      what, near);
    if (!c->n_asked)
      return at_error(c, e->kline, e->kcol, "unknown key '%s' for %s (it takes no keys)", e->key,
                      what);
    /* no near one: the keys it does take, so a guess becomes a choice */
    char keys[512] = "";
    for (int j = 0; j < c->n_asked; j++) {
      size_t at = strlen(keys);
      snprintf(keys + at, sizeof keys - at, "%s%s", j ? ", " : "", c->asked[j]);
    }
    return at_error(c, e->kline, e->kcol, "unknown key '%s' for %s (its keys: %s)", e->key, what,
                    keys);
  }
  return GP_OK;
}

static int lev(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
  return d[la][lb];
}

const char *gp_nearest(const char *word, const char *const *cands, int n) {
  const char *best = NULL;
  int bd = 1 << 30;
  for (int i = 0; i < n; i++) {
    int d = lev(word, cands[i]);
    /* a prefix or containment also counts as near: "conv" -> "conv2d" */
    if (strstr(cands[i], word) || strstr(word, cands[i])) d = d < 2 ? d : 2;
    if (d < bd) {
      bd = d;
      best = cands[i];
    }
  }
  size_t len = strlen(word);
  int limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
  return bd <= limit ? best : NULL;
}

/* ---- a one-mapping YAML text, for tests and --set style use ---- */

static gp_status node_text(yaml_document_t *doc, yaml_node_t *n, const char **out) {
  if (n->type != YAML_SCALAR_NODE) return GP_ERR(GP_ERR_SPEC, "expected a scalar");
  *out = (const char *)n->data.scalar.value;
  (void)doc;
  return GP_OK;
}

gp_status gp_cfg_parse(const char *text, const char *file, gp_cfg **out) {
  yaml_parser_t p;
  yaml_document_t doc;
  gp_status s = GP_OK;
  *out = NULL;
  if (!yaml_parser_initialize(&p)) return GP_ERR(GP_ERR_NOMEM, "out of memory (yaml)");
  yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
  if (!yaml_parser_load(&p, &doc)) {
    s = GP_ERR(GP_ERR_SPEC, "%s:%zu:%zu: %s", file, p.problem_mark.line + 1,
               p.problem_mark.column + 1, p.problem ? p.problem : "YAML syntax error");
    yaml_parser_delete(&p);
    return s;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    s = GP_ERR(GP_ERR_SPEC, "%s:1:1: expected a mapping", file);
    goto done;
  }
  gp_cfg *c = gp_cfg_new(file, (int)root->start_mark.line + 1, (int)root->start_mark.column + 1);
  if (!c) {
    s = GP_ERR(GP_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
       s == GP_OK && pr < root->data.mapping.pairs.top; pr++) {
    yaml_node_t *k = yaml_document_get_node(&doc, pr->key);
    yaml_node_t *v = yaml_document_get_node(&doc, pr->value);
    const char *key = "";
    int l = (int)v->start_mark.line + 1, col = (int)v->start_mark.column + 1;
    if ((s = node_text(&doc, k, &key)) != GP_OK) break;
    if (v->type == YAML_SCALAR_NODE) {
      s = gp_cfg_add_scalar(c, key, (const char *)v->data.scalar.value, l, col);
    } else if (v->type == YAML_SEQUENCE_NODE) {
      const char *items[64];
      int il[64], ic[64], n = 0;
      for (yaml_node_item_t *it = v->data.sequence.items.start;
           it < v->data.sequence.items.top && n < 64; it++) {
        yaml_node_t *in = yaml_document_get_node(&doc, *it);
        if (in->type != YAML_SCALAR_NODE) {
          s = GP_ERR(GP_ERR_SPEC, "%s:%d:%d: %s: expected a list of scalars", file, l, col, key);
          break;
        }
        items[n] = (const char *)in->data.scalar.value;
        il[n] = (int)in->start_mark.line + 1;
        ic[n] = (int)in->start_mark.column + 1;
        n++;
      }
      if (s == GP_OK) s = gp_cfg_add_list(c, key, n, items, il, ic, l, col);
    } else if (v->type == YAML_MAPPING_NODE) { /* one level, as key.sub (the spec loader's) */
      for (yaml_node_pair_t *sp = v->data.mapping.pairs.start;
           s == GP_OK && sp < v->data.mapping.pairs.top; sp++) {
        yaml_node_t *sk = yaml_document_get_node(&doc, sp->key);
        yaml_node_t *sv = yaml_document_get_node(&doc, sp->value);
        const char *subkey = "";
        char sub[160];
        if ((s = node_text(&doc, sk, &subkey)) != GP_OK) break;
        snprintf(sub, sizeof sub, "%s.%s", key, subkey);
        if (sv->type != YAML_SCALAR_NODE)
          s = GP_ERR(GP_ERR_SPEC, "%s:%d:%d: %s: expected a scalar", file,
                     (int)sv->start_mark.line + 1, (int)sv->start_mark.column + 1, sub);
        else
          s = gp_cfg_add_scalar(c, sub, (const char *)sv->data.scalar.value,
                                (int)sv->start_mark.line + 1, (int)sv->start_mark.column + 1);
      }
    } else {
      s = GP_ERR(GP_ERR_SPEC, "%s:%d:%d: %s: expected a scalar or a list", file, l, col, key);
    }
  }
  if (s == GP_OK)
    *out = c;
  else
    gp_cfg_free(c);
done:
  yaml_document_delete(&doc);
  yaml_parser_delete(&p);
  return s;
}
