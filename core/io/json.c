/* Strict JSON reader: one recursive-descent pass into a tree of gp_json nodes. Anything
 * RFC 8259 does not allow is refused (trailing commas, comments, leading zeros, invalid
 * UTF-8, lone surrogates), because a header that is almost JSON is a corrupt file. */
#include "core/io/json.h"

#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

/* Nesting deeper than this is refused, so hostile input cannot exhaust the stack. */
#define JSON_MAX_DEPTH 128

typedef struct parser {
  const unsigned char *s;
  size_t len, pos;
  const char *what;
  int depth;
} parser;

static gp_status fail(parser *p, size_t at, const char *msg) {
  return GP_ERR(GP_ERR_DATA, "%s: JSON at byte %zu: %s", p->what, at, msg);
}

static gp_status nomem(parser *p) {
  return GP_ERR(GP_ERR_NOMEM, "%s: out of memory parsing JSON", p->what);
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int peek(parser *p) {
  return p->pos < p->len ? p->s[p->pos] : -1;
}

static void node_clear(gp_json *j) {
  if (!j) return;
  free(j->str);
  for (int64_t i = 0; i < j->n; i++) {
    if (j->keys) free(j->keys[i]);
    if (j->items) node_clear(&j->items[i]);
  }
  free(j->keys);
  free(j->items);
  memset(j, 0, sizeof *j);
}

void gp_json_free(gp_json *j) {
  node_clear(j);
  free(j);
}

static int hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = s[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned cp;
  return (size_t)gp_utf8_seq(s, n, &cp);
}

static size_t utf8_put(unsigned cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Parses a string at p->pos (the opening quote) into a new NUL-terminated buffer. The
 * decoded text is never longer than the source, so one allocation of the source span fits. */
static gp_status parse_string(parser *p, char **out, size_t *out_len) {
  size_t start = p->pos, end = start + 1;
  p->pos++;
  while (end < p->len && p->s[end] != '"')
    end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) return fail(p, start, "unterminated string");
  char *buf = malloc(end - start);
  if (!buf) return nomem(p);
  size_t k = 0;
  gp_status st = GP_OK;
  while (p->pos < end) {
    unsigned char c = p->s[p->pos];
    if (c < 0x20) {
      st = fail(p, p->pos, "control character in string (must be escaped)");
      break;
    }
    if (c != '\\') {
      size_t n = utf8_len(p->s + p->pos, end - p->pos);
      if (!n) {
        st = fail(p, p->pos, "invalid UTF-8 in string");
        break;
      }
      memcpy(buf + k, p->s + p->pos, n);
      k += n;
      p->pos += n;
      continue;
    }
    size_t esc = p->pos;
    unsigned char e = p->s[p->pos + 1];
    p->pos += 2;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      buf[k++] = map[simple - "\"\\/bfnrt"];
      continue;
    }
    if (e != 'u') {
      st = fail(p, esc, "invalid escape in string");
      break;
    }
    unsigned cp, lo;
    if (p->pos + 4 > end || !hex4(p->s + p->pos, &cp)) {
      st = fail(p, esc, "invalid \\u escape in string");
      break;
    }
    p->pos += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (p->pos + 6 > end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
          !hex4(p->s + p->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        st = fail(p, esc, "unpaired surrogate in \\u escape");
        break;
      }
      p->pos += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      st = fail(p, esc, "unpaired surrogate in \\u escape");
      break;
    } else if (cp == 0) {
      st = fail(p, esc, "\\u0000 in a string is not supported");
      break;
    }
    k += utf8_put(cp, buf + k);
  }
  if (st != GP_OK) {
    free(buf);
    return st;
  }
  buf[k] = 0;
  p->pos = end + 1;
  *out = buf;
  *out_len = k;
  return GP_OK;
}

static int is_digit(int c) {
  return c >= '0' && c <= '9';
}

static gp_status parse_number(parser *p, gp_json *j) {
  size_t start = p->pos, i = start;
  int neg = 0, integral = 1;
  if (i < p->len && p->s[i] == '-') neg = 1, i++;
  if (i >= p->len || !is_digit(p->s[i])) return fail(p, start, "invalid number");
  if (p->s[i] == '0' && i + 1 < p->len && is_digit(p->s[i + 1]))
    return fail(p, start, "leading zero in number");
  while (i < p->len && is_digit(p->s[i]))
    i++;
  if (i < p->len && p->s[i] == '.') {
    integral = 0;
    i++;
    if (i >= p->len || !is_digit(p->s[i])) return fail(p, start, "invalid number");
    while (i < p->len && is_digit(p->s[i]))
      i++;
  }
  if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
    integral = 0;
    i++;
    if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
    if (i >= p->len || !is_digit(p->s[i])) return fail(p, start, "invalid number");
    while (i < p->len && is_digit(p->s[i]))
      i++;
  }
  size_t n = i - start;
  char small[64], *tmp = n < sizeof small ? small : malloc(n + 1);
  if (!tmp) return nomem(p);
  memcpy(tmp, p->s + start, n);
  tmp[n] = 0;
  j->type = GP_JSON_NUMBER;
  j->number = strtod(tmp, NULL);
  if (tmp != small) free(tmp);
  if (integral) {
    /* Exact integer value, separately from the double: offsets above 2^53 must not round. */
    uint64_t u = 0;
    int over = 0;
    for (size_t k = start + (size_t)neg; k < i; k++) {
      unsigned d = p->s[k] - '0';
      if (u > (UINT64_MAX - d) / 10) over = 1;
      u = u * 10 + d;
    }
    if (!over && !neg) {
      j->is_uint = 1;
      j->u = u;
      if (u <= (uint64_t)INT64_MAX) j->is_int = 1, j->i = (int64_t)u;
    } else if (!over && neg && u <= (uint64_t)INT64_MAX + 1) {
      j->is_int = 1;
      j->i = u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
    }
  }
  p->pos = i;
  return GP_OK;
}

static gp_status parse_value(parser *p, gp_json *j);

/* Appends a zeroed slot to an array or object, growing its arrays by doubling. */
static gp_status push(parser *p, gp_json *j, int64_t *cap) {
  if (j->n == *cap) {
    int64_t nc = *cap ? *cap * 2 : 4;
    gp_json *items = realloc(j->items, (size_t)nc * sizeof *items);
    if (!items) return nomem(p);
    j->items = items;
    if (j->type == GP_JSON_OBJECT) {
      char **keys = realloc(j->keys, (size_t)nc * sizeof *keys);
      if (!keys) return nomem(p);
      j->keys = keys;
    }
    *cap = nc;
  }
  memset(&j->items[j->n], 0, sizeof j->items[0]);
  if (j->keys) j->keys[j->n] = NULL;
  j->n++;
  return GP_OK;
}

static gp_status parse_array(parser *p, gp_json *j) {
  int64_t cap = 0;
  j->type = GP_JSON_ARRAY;
  p->pos++;
  skip_ws(p);
  if (peek(p) == ']') {
    p->pos++;
    return GP_OK;
  }
  for (;;) {
    GP_TRY(push(p, j, &cap));
    GP_TRY(parse_value(p, &j->items[j->n - 1]));
    skip_ws(p);
    int c = peek(p);
    p->pos++;
    if (c == ']') return GP_OK;
    if (c != ',') return fail(p, p->pos - 1, "expected ',' or ']' in array");
  }
}

/* The keys seen in an object, for the duplicate check: a scan while the object is small, then
 * an open-addressed table of key indexes (an index of a large model's checkpoint maps tens of
 * thousands of names, which a scan per key would make quadratic). */
typedef struct key_set {
  int64_t *slot; /* key index + 1, or 0 */
  size_t cap;    /* a power of two, at least twice the keys */
} key_set;

static size_t key_hash(const char *s) {
  size_t h = 1469598103934665603u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* 1 if key n - 1 of j repeats an earlier one, 0 if not, -1 out of memory. */
static int key_seen(key_set *ks, const gp_json *j) {
  const char *key = j->keys[j->n - 1];
  if (j->n <= 32) {
    for (int64_t k = 0; k + 1 < j->n; k++)
      if (strcmp(j->keys[k], key) == 0) return 1;
    return 0;
  }
  if ((size_t)j->n * 2 > ks->cap) { /* (re)build from every earlier key */
    size_t cap = ks->cap ? ks->cap * 2 : 128;
    int64_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    free(ks->slot);
    ks->slot = slot;
    ks->cap = cap;
    for (int64_t k = 0; k + 1 < j->n; k++) {
      size_t h = key_hash(j->keys[k]) & (cap - 1);
      while (slot[h])
        h = (h + 1) & (cap - 1);
      slot[h] = k + 1;
    }
  }
  size_t h = key_hash(key) & (ks->cap - 1);
  for (; ks->slot[h]; h = (h + 1) & (ks->cap - 1))
    if (strcmp(j->keys[ks->slot[h] - 1], key) == 0) return 1;
  ks->slot[h] = j->n;
  return 0;
}

static gp_status parse_members(parser *p, gp_json *j, key_set *ks) {
  int64_t cap = 0;
  for (;;) {
    skip_ws(p);
    if (peek(p) != '"') return fail(p, p->pos, "expected a string key in object");
    size_t key_at = p->pos, key_len;
    GP_TRY(push(p, j, &cap));
    GP_TRY(parse_string(p, &j->keys[j->n - 1], &key_len));
    /* Duplicate keys make the meaning depend on the reader; refuse them. */
    int seen = key_seen(ks, j);
    if (seen < 0) return nomem(p);
    if (seen) {
      char what[96];
      snprintf(what, sizeof what, "duplicate key '%.60s'", j->keys[j->n - 1]);
      return fail(p, key_at, what);
    }
    skip_ws(p);
    if (peek(p) != ':') return fail(p, p->pos, "expected ':' after key");
    p->pos++;
    GP_TRY(parse_value(p, &j->items[j->n - 1]));
    skip_ws(p);
    int c = peek(p);
    p->pos++;
    if (c == '}') return GP_OK;
    if (c != ',') return fail(p, p->pos - 1, "expected ',' or '}' in object");
  }
}

static gp_status parse_object(parser *p, gp_json *j) {
  j->type = GP_JSON_OBJECT;
  p->pos++;
  skip_ws(p);
  if (peek(p) == '}') {
    p->pos++;
    return GP_OK;
  }
  key_set ks = {0};
  gp_status s = parse_members(p, j, &ks);
  free(ks.slot);
  return s;
}

static gp_status parse_word(parser *p, const char *w) {
  size_t n = strlen(w);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0)
    return fail(p, p->pos, "unexpected character");
  p->pos += n;
  return GP_OK;
}

static gp_status parse_value(parser *p, gp_json *j) {
  skip_ws(p);
  j->offset = p->pos;
  int c = peek(p);
  gp_status st;
  switch (c) {
  case -1:
    return fail(p, p->pos, "unexpected end of text");
  case '{':
  case '[':
    if (++p->depth > JSON_MAX_DEPTH) return fail(p, p->pos, "nested too deeply");
    st = c == '{' ? parse_object(p, j) : parse_array(p, j);
    p->depth--;
    return st;
  case '"':
    j->type = GP_JSON_STRING;
    return parse_string(p, &j->str, &j->str_len);
  case 't':
    j->type = GP_JSON_BOOL;
    j->boolean = 1;
    return parse_word(p, "true");
  case 'f':
    j->type = GP_JSON_BOOL;
    return parse_word(p, "false");
  case 'n':
    j->type = GP_JSON_NULL;
    return parse_word(p, "null");
  default:
    if (c == '-' || is_digit(c)) return parse_number(p, j);
    return fail(p, p->pos, "unexpected character");
  }
}

gp_status gp_json_parse(const char *text, size_t len, const char *what, gp_json **out) {
  parser p = {(const unsigned char *)text, len, 0, what ? what : "JSON", 0};
  *out = NULL;
  gp_json *j = calloc(1, sizeof *j);
  if (!j) return nomem(&p);
  gp_status st = parse_value(&p, j);
  if (st == GP_OK) {
    skip_ws(&p);
    if (p.pos < p.len) st = fail(&p, p.pos, "unexpected text after the value");
  }
  if (st != GP_OK) {
    gp_json_free(j);
    return st;
  }
  *out = j;
  return GP_OK;
}

const gp_json *gp_json_get(const gp_json *j, const char *key) {
  if (!j || j->type != GP_JSON_OBJECT) return NULL;
  for (int64_t i = 0; i < j->n; i++)
    if (strcmp(j->keys[i], key) == 0) return &j->items[i];
  return NULL;
}

const char *gp_json_type_name(gp_json_type t) {
  static const char *const names[] = {"null", "boolean", "number", "string", "array", "object"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

void gp_json_write_str(FILE *f, const char *s) {
  fputc('"', f);
  const unsigned char *c = (const unsigned char *)s;
  size_t left = strlen(s);
  while (*c) {
    size_t n = utf8_len(c, left);
    if (n == 0) { /* a file name's Latin-1 byte: JSON text is UTF-8, so U+FFFD stands for it */
      fputs("\\ufffd", f);
      n = 1;
    } else if (*c == '"' || *c == '\\') {
      fprintf(f, "\\%c", *c);
    } else if (*c < 0x20) {
      fprintf(f, "\\u%04x", *c);
    } else {
      fwrite(c, 1, n, f);
    }
    c += n;
    left -= n;
  }
  fputc('"', f);
}
