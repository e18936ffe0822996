/* gp_cfg: one YAML mapping of scalars and lists of scalars, with the source position of
 * every key and value, after block parameters and merge keys were resolved. Layers read
 * their settings through it, so every bad value is reported as file:line:column. Getters
 * remember which keys were asked for: a key nobody asked for is an unknown key, and the
 * asked-for keys are the candidates for "did you mean". */
#ifndef GP_CFG_H
#define GP_CFG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct gp_cfg gp_cfg;

/* Where a number may lie: from lo to hi, each bound closed (the bound itself allowed) or open;
 * lo -INFINITY or hi INFINITY: no bound on that side. Numbers are checked as the kernels take
 * them, float32: an open bound also refuses a value whose float32 reaches it (1e-50 is 0 as
 * float32, so it is not > 0; 0.99999999999 is 1, so it is not < 1). */
typedef struct gp_range {
  double lo, hi;
  int lo_open, hi_open;
} gp_range;

/* The ranges most settings take, as initializers (usable in static tables). */
#define GP_RANGE_ANY                                                                               \
  { -INFINITY, INFINITY, 0, 0 }
#define GP_RANGE_POSITIVE                                                                          \
  { 0, INFINITY, 1, 0 } /* > 0 */
#define GP_RANGE_NONNEGATIVE                                                                       \
  { 0, INFINITY, 0, 0 } /* >= 0 */
#define GP_RANGE_BELOW_ONE                                                                         \
  { 0, 1, 0, 1 } /* [0, 1): probabilities, momenta, betas */

/* 1 when v lies in r (its float32 too, at an open bound). */
int gp_range_holds(gp_range r, double v);
/* r as messages and docs write it: "[0, 1)", "(0, 1]"; with one bound "> 0", ">= 0", "< 1";
 * with none "any". Returns 1 when it wrote one bound (then a message says "x must be > 0"),
 * else 0 ("x is out of range [0, 1)"). buf: 64 bytes suffice. */
int gp_range_str(gp_range r, char *buf, size_t n);
/* The same for integers in [min, max]: "[1, 4096]"; max INT64_MAX: ">= 0"; min INT64_MIN:
 * "<= -1". */
int gp_int_range_str(int64_t min, int64_t max, char *buf, size_t n);

/* ---- building (the spec loader, tests) ---- */
gp_cfg *gp_cfg_new(const char *file, int line, int col); /* NULL on out of memory */
void gp_cfg_free(gp_cfg *c);
/* Adds key: scalar. A duplicate key is an error at (line, col). */
gp_status gp_cfg_add_scalar(gp_cfg *c, const char *key, const char *text, int line, int col);
/* Adds key: [items...]; item_line/item_col may be NULL (then the list's position is used). */
gp_status gp_cfg_add_list(gp_cfg *c, const char *key, int n, const char *const *items,
                          const int *item_line, const int *item_col, int line, int col);
/* Adds key: ~ (null, or nothing written): the key is known but not set, so readers take the
 * default and a required key is refused at it. */
gp_status gp_cfg_add_null(gp_cfg *c, const char *key, int line, int col);
/* Parses a one-mapping YAML text ("{type: conv2d, out_channels: 8, kernel: [1, 7]}"). */
gp_status gp_cfg_parse(const char *yaml_text, const char *file, gp_cfg **out);

/* Names what the mapping configures ("linear", "the step schedule"): a required key that is
 * absent is then "missing required key 'x' for linear". */
void gp_cfg_set_what(gp_cfg *c, const char *what);

/* ---- reading (layers, sections) ---- */
const char *gp_cfg_file(const gp_cfg *c);
int gp_cfg_line(const gp_cfg *c);
int gp_cfg_col(const gp_cfg *c);
int gp_cfg_has(gp_cfg *c, const char *key); /* also marks the key as known */
/* Each getter: key absent -> *out = dflt. Present but not of the type -> GP_ERR_SPEC
 * "file:line:col: key: expected ..., got '...'"; outside the range -> "key: 5000 is out of
 * range [1, 4096]", or with one bound "key: -1 must be >= 0" (gp_int_range_str). */
gp_status gp_cfg_int(gp_cfg *c, const char *key, int64_t dflt, int64_t min, int64_t max,
                     int64_t *out);
/* A number in r (checked as gp_range_holds; messages as gp_range_str: "lr: 0 must be > 0",
 * "p: 1 is out of range [0, 1)", with "(1e-50 is 0 as float32)" where float32 changed it). */
gp_status gp_cfg_float_in(gp_cfg *c, const char *key, double dflt, gp_range r, double *out);
/* gp_cfg_float_in in the closed range [min, max]. */
gp_status gp_cfg_float(gp_cfg *c, const char *key, double dflt, double min, double max,
                       double *out);
gp_status gp_cfg_bool(gp_cfg *c, const char *key, int dflt, int *out);
gp_status gp_cfg_str(gp_cfg *c, const char *key, const char *dflt, const char **out);
/* One of choices (NULL-terminated); *out is its index. A wrong value suggests the nearest. */
gp_status gp_cfg_choice(gp_cfg *c, const char *key, const char *const *choices, int dflt, int *out);
/* A value or a list of up to max_n values, each one of choices (their indices in out); *n_out
 * = how many were given (0 if absent). */
gp_status gp_cfg_choices(gp_cfg *c, const char *key, const char *const *choices, int max_n,
                         int *out, int *n_out);
/* An int or a list of exactly n ints: "kernel: 3" -> {3, 3}; "kernel: [1, 7]" -> {1, 7}.
 * dflt may be NULL when the key is required. */
gp_status gp_cfg_ints(gp_cfg *c, const char *key, int n, const int64_t *dflt, int64_t min,
                      int64_t max, int64_t *out);
/* A number or a list of up to max_n numbers; *n_out = how many were given (0 if absent). */
gp_status gp_cfg_floats(gp_cfg *c, const char *key, int max_n, double *out, int *n_out);
/* The same with every number in r (an error points at the item). */
gp_status gp_cfg_floats_in(gp_cfg *c, const char *key, int max_n, gp_range r, double *out,
                           int *n_out);
/* Marks the key required: absent -> error naming it. */
gp_status gp_cfg_require(gp_cfg *c, const char *key);
/* An error located at key's value (or at the mapping when key is NULL or absent). */
gp_status gp_cfg_error(gp_cfg *c, const char *key, const char *fmt, ...) GP_PRINTF(3, 4);
/* The same at item i of key's list (at its value when key is no list that long). */
gp_status gp_cfg_error_item(gp_cfg *c, const char *key, int i, const char *fmt, ...)
    GP_PRINTF(4, 5);
/* After reading: the first key never asked for (other than the names in `structural`,
 * NULL-terminated) is an error "unknown key 'x' for <what>; did you mean 'y'?", or with no
 * near one "unknown key 'x' for <what> (its keys: a, b, c)", the keys asked for. A NULL `what`
 * is the name gp_cfg_set_what gave the mapping. */
gp_status gp_cfg_check_unknown(gp_cfg *c, const char *what, const char *const *structural);

/* A model file's integer: decimal, as shapes, repeat: and ${...} read numbers ("010" is 10, not
 * octal 8); digits and an optional '-' only, as the flags: strtoll alone would take a quoted
 * " 8" or "+8". 1: an integer in *out; 0: not one; -1: one too large for 64 bits. Plans read
 * theirs by this rule too. */
int gp_cfg_parse_int(const char *s, int64_t *out);

/* Levenshtein-nearest candidate within a small distance, or NULL. */
const char *gp_nearest(const char *word, const char *const *cands, int n);

#endif
