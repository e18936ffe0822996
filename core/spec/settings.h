/* Settings tables: what a YAML mapping may hold (a layer's), declared once as data (key,
 * type, default, range, one line of doc), read by one reader into a settings struct and
 * written out for docs/layers.md, so the reader, the checks and the docs cannot disagree. */
#ifndef GP_SETTINGS_H
#define GP_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "core/spec/cfg.h"

typedef enum gp_setting_kind {
  GP_SETTING_INT,      /* int64_t in [min, max] */
  GP_SETTING_INTS,     /* int64_t[n]: one integer for all n, or a list of n, each in [min, max] */
  GP_SETTING_FLOAT,    /* double in range (float32 at its open bounds, as gp_range_holds) */
  GP_SETTING_BOOL,     /* int, 0 or 1 */
  GP_SETTING_CHOICE,   /* int: the index of the value in choices */
  GP_SETTING_CHOICES,  /* int[n]: a list of up to n values of choices, their indices; the count
                        * at count_at */
  GP_SETTING_INT_LIST, /* int64_t[n]: a list of 1 to n integers, each in [min, max]; the count
                        * at count_at (a shape, an order of axes) */
  GP_SETTING_KIND_COUNT
} gp_setting_kind;

#define GP_SETTING_MAX_N 4 /* values of an INTS setting, at most */

typedef struct gp_setting {
  const char *key;
  gp_setting_kind kind;
  size_t at;    /* offset of the value in the settings struct */
  size_t size;  /* its bytes (INTS: n values) */
  int n;        /* INTS: how many values */
  int required; /* 1: no default; absent is an error naming the key */
  /* 1: no default either, and absent is fine: the int at has_at says whether it was given
   * (the value is read only then; else it stays 0) */
  int optional;
  size_t has_at;
  int64_t min, max;           /* INT, INTS */
  int64_t idflt;              /* INT, INTS (every value), BOOL, CHOICE (an index in choices) */
  gp_range range;             /* FLOAT */
  double fdflt;               /* FLOAT */
  const char *const *choices; /* CHOICE, CHOICES: NULL-terminated */
  size_t count_at;            /* CHOICES: the int that gets how many were given (0: absent) */
  const char *same_as;        /* INTS: absent takes the values of this earlier INTS setting */
  const char *dflt_doc;       /* the default in words where no value in range is it */
  const char *doc;            /* one line */
} gp_setting;

/* Where a setting's value lives, with its C type checked at compile time: a table entry that
 * says INT for a double field does not build. */
#define GP_SETTING_AT_(T, f, ctype)                                                                \
  .at = offsetof(T, f) + 0 * sizeof(_Generic(((T *)0)->f, ctype : 1)), .size = sizeof(((T *)0)->f)
#define GP_SETTING_INT_AT(T, f) .kind = GP_SETTING_INT, GP_SETTING_AT_(T, f, int64_t)
/* f is an int64_t array (a union with named fields keeps the code readable: kernel[2] is
 * kh, kw); n is its length. */
#define GP_SETTING_INTS_AT(T, f)                                                                   \
  .kind = GP_SETTING_INTS, GP_SETTING_AT_(T, f, int64_t *),                                        \
  .n = (int)(sizeof(((T *)0)->f) / sizeof(int64_t))
#define GP_SETTING_FLOAT_AT(T, f) .kind = GP_SETTING_FLOAT, GP_SETTING_AT_(T, f, double)
#define GP_SETTING_BOOL_AT(T, f) .kind = GP_SETTING_BOOL, GP_SETTING_AT_(T, f, int)
#define GP_SETTING_CHOICE_AT(T, f) .kind = GP_SETTING_CHOICE, GP_SETTING_AT_(T, f, int)
#define GP_SETTING_CHOICES_AT(T, f, count)                                                         \
  .kind = GP_SETTING_CHOICES, GP_SETTING_AT_(T, f, int *),                                         \
  .n = (int)(sizeof(((T *)0)->f) / sizeof(int)),                                                   \
  .count_at = offsetof(T, count) + 0 * sizeof(_Generic(((T *)0)->count, int : 1))
#define GP_SETTING_INT_LIST_AT(T, f, count)                                                        \
  .kind = GP_SETTING_INT_LIST, GP_SETTING_AT_(T, f, int64_t *),                                    \
  .n = (int)(sizeof(((T *)0)->f) / sizeof(int64_t)),                                               \
  .count_at = offsetof(T, count) + 0 * sizeof(_Generic(((T *)0)->count, int : 1))
#define GP_SETTING_HAS_AT(T, f)                                                                    \
  .optional = 1, .has_at = offsetof(T, f) + 0 * sizeof(_Generic(((T *)0)->f, int : 1))

/* Reads every setting of the table, in its order, from cfg into conf (a zeroed settings
 * struct): absent ones take their defaults; errors are located by the cfg readers. Every key
 * is asked for, so gp_cfg_check_unknown then finds the keys no table holds. */
gp_status gp_settings_read(gp_cfg *cfg, const gp_setting *set, int n, void *conf);

/* For docs: the type ("int", "2 ints (one for all, or a list)", "number", "bool",
 * "one of: a, b"), the default ("1", "required", "none", the dflt_doc) and the range
 * ("[1, 4096]", "> 0", "" where there is none) of a setting, into buf. */
const char *gp_setting_type_str(const gp_setting *s, char *buf, size_t n);
const char *gp_setting_default_str(const gp_setting *s, char *buf, size_t n);
const char *gp_setting_range_str(const gp_setting *s, char *buf, size_t n);

#endif
