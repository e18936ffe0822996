/* gp_cfg: one YAML mapping of scalars and lists of scalars, with the source position of
 * every key and value, after block parameters and merge keys were resolved. Layers read
 * their settings through it, so every bad value is reported as file:line:column. Getters
 * remember which keys were asked for: a key nobody asked for is an unknown key, and the
 * asked-for keys are the candidates for "did you mean". */
#ifndef GP_CFG_H
#define GP_CFG_H

#include <stdint.h>

#include "core/status.h"

typedef struct gp_cfg gp_cfg;

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
/* Each getter: key absent -> *out = dflt. Present but not of the type or outside [min, max]
 * -> GP_ERR_SPEC "file:line:col: key: expected ..., got '...'". */
gp_status gp_cfg_int(gp_cfg *c, const char *key, int64_t dflt, int64_t min, int64_t max,
                     int64_t *out);
gp_status gp_cfg_float(gp_cfg *c, const char *key, double dflt, double min, double max,
                       double *out);
/* A probability that must stay below 1 as the kernels' float32 takes it (dropout, label
 * smoothing): in [0, 1), 0.99999999999 refused (it is 1 as float32). */
gp_status gp_cfg_below_one(gp_cfg *c, const char *key, double dflt, double *out);
gp_status gp_cfg_bool(gp_cfg *c, const char *key, int dflt, int *out);
gp_status gp_cfg_str(gp_cfg *c, const char *key, const char *dflt, const char **out);
/* One of choices (NULL-terminated); *out is its index. A wrong value suggests the nearest. */
gp_status gp_cfg_choice(gp_cfg *c, const char *key, const char *const *choices, int dflt, int *out);
/* An int or a list of exactly n ints: "kernel: 3" -> {3, 3}; "kernel: [1, 7]" -> {1, 7}.
 * dflt may be NULL when the key is required. */
gp_status gp_cfg_ints(gp_cfg *c, const char *key, int n, const int64_t *dflt, int64_t min,
                      int64_t max, int64_t *out);
/* A number or a list of up to max_n numbers; *n_out = how many were given (0 if absent). */
gp_status gp_cfg_floats(gp_cfg *c, const char *key, int max_n, double *out, int *n_out);
/* Marks the key required: absent -> error naming it. */
gp_status gp_cfg_require(gp_cfg *c, const char *key);
/* An error located at key's value (or at the mapping when key is NULL or absent). */
gp_status gp_cfg_error(gp_cfg *c, const char *key, const char *fmt, ...) GP_PRINTF(3, 4);
/* The same at item i of key's list (at its value when key is no list that long). */
gp_status gp_cfg_error_item(gp_cfg *c, const char *key, int i, const char *fmt, ...)
    GP_PRINTF(4, 5);
/* After reading: the first key never asked for (other than the names in `structural`,
 * NULL-terminated) is an error "unknown key 'x' for <what>; did you mean 'y'?". A NULL `what`
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
