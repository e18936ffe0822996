/* A small strict JSON reader (RFC 8259): objects, arrays, strings with escapes, numbers,
 * true/false/null. Used for safetensors headers and other JSON a data file carries. */
#ifndef GP_JSON_H
#define GP_JSON_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/status.h"

typedef enum gp_json_type {
  GP_JSON_NULL,
  GP_JSON_BOOL,
  GP_JSON_NUMBER,
  GP_JSON_STRING,
  GP_JSON_ARRAY,
  GP_JSON_OBJECT,
} gp_json_type;

typedef struct gp_json gp_json;
struct gp_json {
  gp_json_type type;
  int boolean;   /* GP_JSON_BOOL */
  double number; /* GP_JSON_NUMBER (nearest double) */
  int is_int;    /* number written as an integer (no fraction, no exponent) in int64 range */
  int is_uint;   /* number written as a non-negative integer in uint64 range */
  int64_t i;     /* valid when is_int */
  uint64_t u;    /* valid when is_uint */
  char *str;     /* GP_JSON_STRING: UTF-8, NUL-terminated (\u0000 is refused) */
  size_t str_len;
  int64_t n;      /* GP_JSON_ARRAY / GP_JSON_OBJECT: number of items */
  char **keys;    /* GP_JSON_OBJECT: n keys, in file order, no duplicates */
  gp_json *items; /* n values */
  size_t offset;  /* byte offset of the value in the text, for messages */
};

/* Parses exactly one JSON value (surrounding whitespace allowed) from text[0..len).
 * Errors: GP_ERR_DATA "what: JSON at byte N: what is wrong"; GP_ERR_NOMEM. */
gp_status gp_json_parse(const char *text, size_t len, const char *what, gp_json **out);
void gp_json_free(gp_json *j);
/* The value of key in an object; NULL if j is not an object or has no such key. */
const gp_json *gp_json_get(const gp_json *j, const char *key);
const char *gp_json_type_name(gp_json_type t);

/* Writes s as a JSON string, quotes included: '"' and '\\' escaped, control characters as
 * \\u00XX, valid UTF-8 as is, and each byte that is not part of valid UTF-8 (a file name in
 * Latin-1) as \\ufffd, so the text stays JSON. */
void gp_json_write_str(FILE *f, const char *s);

#endif
