/* The one reader of settings tables (core/spec/settings.h) and their text for the docs. */
#include "core/spec/settings.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/decimal.h"

static const gp_setting *find_setting(const gp_setting *set, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(set[i].key, key) == 0) return &set[i];
  return NULL;
}

/* A list of up to s->n integers in [min, max], read as numbers (exact up to 2^53), each
 * refused where it is not whole. */
static gp_status read_int_list(gp_cfg *cfg, const gp_setting *s, int64_t *out, int *count) {
  double v[16];
  const gp_range any = GP_RANGE_ANY;
  if (s->n < 1 || s->n > 16)
    return GP_ERR(GP_ERR_RUNTIME, "setting '%s': a bad table entry", s->key);
  GP_TRY(gp_cfg_floats_in(cfg, s->key, s->n, any, v, count));
  for (int j = 0; j < *count; j++) {
    if (v[j] != floor(v[j]) || v[j] < (double)s->min || v[j] > (double)s->max) {
      char r[64];
      gp_int_range_str(s->min, s->max, r, sizeof r);
      return gp_cfg_error_item(cfg, s->key, j, "%s: %g is not an integer in %s", s->key, v[j], r);
    }
    out[j] = (int64_t)v[j];
  }
  return GP_OK;
}

gp_status gp_settings_read(gp_cfg *cfg, const gp_setting *set, int n, void *conf) {
  char *base = conf;
  for (int i = 0; i < n; i++) {
    const gp_setting *s = &set[i];
    void *v = base + s->at;
    if (s->required) GP_TRY(gp_cfg_require(cfg, s->key));
    if (s->optional) {
      const int given = gp_cfg_has(cfg, s->key);
      *(int *)(void *)(base + s->has_at) = given;
      if (!given) continue;
    }
    switch (s->kind) {
    case GP_SETTING_INT:
      GP_TRY(gp_cfg_int(cfg, s->key, s->idflt, s->min, s->max, v));
      break;
    case GP_SETTING_INTS: {
      int64_t dflt[GP_SETTING_MAX_N];
      const int64_t *d = dflt;
      const gp_setting *from = s->same_as ? find_setting(set, i, s->same_as) : NULL;
      if (s->n < 1 || s->n > GP_SETTING_MAX_N || (s->same_as && (!from || from->n != s->n)))
        return GP_ERR(GP_ERR_RUNTIME, "setting '%s': a bad table entry", s->key);
      if (from)
        d = (const int64_t *)(const void *)(base + from->at);
      else
        for (int j = 0; j < s->n; j++)
          dflt[j] = s->idflt;
      GP_TRY(gp_cfg_ints(cfg, s->key, s->n, d, s->min, s->max, v));
      break;
    }
    case GP_SETTING_FLOAT:
      GP_TRY(gp_cfg_float_in(cfg, s->key, s->fdflt, s->range, v));
      break;
    case GP_SETTING_BOOL:
      GP_TRY(gp_cfg_bool(cfg, s->key, (int)s->idflt, v));
      break;
    case GP_SETTING_CHOICE:
      GP_TRY(gp_cfg_choice(cfg, s->key, s->choices, (int)s->idflt, v));
      break;
    case GP_SETTING_CHOICES:
      GP_TRY(gp_cfg_choices(cfg, s->key, s->choices, s->n, v, (int *)(void *)(base + s->count_at)));
      break;
    case GP_SETTING_INT_LIST:
      GP_TRY(read_int_list(cfg, s, v, (int *)(void *)(base + s->count_at)));
      break;
    default:
      return GP_ERR(GP_ERR_RUNTIME, "setting '%s': unknown kind %d", s->key, (int)s->kind);
    }
  }
  return GP_OK;
}

const char *gp_setting_type_str(const gp_setting *s, char *buf, size_t n) {
  switch (s->kind) {
  case GP_SETTING_INT:
    snprintf(buf, n, "int");
    break;
  case GP_SETTING_INTS:
    snprintf(buf, n, "%d ints: [a, b] or one for all", s->n);
    break;
  case GP_SETTING_INT_LIST:
    snprintf(buf, n, "a list of 1 to %d ints", s->n);
    break;
  case GP_SETTING_FLOAT:
    snprintf(buf, n, "number");
    break;
  case GP_SETTING_BOOL:
    snprintf(buf, n, "bool");
    break;
  case GP_SETTING_CHOICE:
  case GP_SETTING_CHOICES: {
    size_t at = (size_t)snprintf(buf, n, s->kind == GP_SETTING_CHOICE ? "one of:" : "a list of:");
    for (int i = 0; s->choices && s->choices[i] && at < n; i++)
      at += (size_t)snprintf(buf + at, n - at, "%s %s", i ? "," : "", s->choices[i]);
    break;
  }
  default:
    snprintf(buf, n, "?");
  }
  return buf;
}

/* "1e-05" as "1e-5", "1e+09" as "1e9": the exponent as one writes it in a model file. */
static void tidy_exponent(char *s) {
  char *e = strchr(s, 'e');
  if (!e) return;
  char *d = e + 1, *from = d + (*d == '+');
  if (*from == '-') *d++ = *from++;
  while (from[0] == '0' && from[1])
    from++;
  memmove(d, from, strlen(from) + 1);
}

const char *gp_setting_default_str(const gp_setting *s, char *buf, size_t n) {
  char num[32];
  if (s->dflt_doc)
    snprintf(buf, n, "%s", s->dflt_doc);
  else if (s->required)
    snprintf(buf, n, "required");
  else if (s->optional)
    snprintf(buf, n, "none");
  else if (s->same_as)
    snprintf(buf, n, "= %s", s->same_as);
  else if (s->kind == GP_SETTING_FLOAT) {
    gp_decimal_shortest(s->fdflt, num, sizeof num);
    tidy_exponent(num);
    snprintf(buf, n, "%s", num);
  } else if (s->kind == GP_SETTING_BOOL)
    snprintf(buf, n, "%s", s->idflt ? "true" : "false");
  else if (s->kind == GP_SETTING_CHOICE && s->choices)
    snprintf(buf, n, "%s", s->choices[s->idflt]);
  else
    snprintf(buf, n, "%lld", (long long)s->idflt);
  return buf;
}

const char *gp_setting_range_str(const gp_setting *s, char *buf, size_t n) {
  buf[0] = 0;
  if (s->kind == GP_SETTING_INT || s->kind == GP_SETTING_INTS || s->kind == GP_SETTING_INT_LIST)
    gp_int_range_str(s->min, s->max, buf, n);
  else if (s->kind == GP_SETTING_FLOAT)
    gp_range_str(s->range, buf, n);
  return buf;
}
