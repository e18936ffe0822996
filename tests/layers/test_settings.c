/* The layers' settings tables: every entry well formed (a key once, a doc line, a default in
 * its range, a field that fits the type's settings struct), and every configure reading
 * through its table: with only the required keys each setting holds its table default, each
 * key is asked for (a bad value of it is refused, naming it), and a key no table holds is
 * unknown. The registry's names are the types' own. */
#include <stdio.h>
#include <string.h>

#include "core/layer.h"

static int fails;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    printf("  FAIL ");                                                                             \
    printf(__VA_ARGS__);                                                                           \
    printf("\n");                                                                                  \
    fails++;                                                                                       \
  } while (0)

static int one_line(const char *s) {
  return s && s[0] && !strchr(s, '\n') && !strchr(s, '|'); /* '|' would split a docs table cell */
}

static size_t kind_size(const gp_setting *s) {
  switch (s->kind) {
  case GP_SETTING_INT:
    return sizeof(int64_t);
  case GP_SETTING_INTS:
  case GP_SETTING_INT_LIST:
    return (size_t)s->n * sizeof(int64_t);
  case GP_SETTING_FLOAT:
    return sizeof(double);
  case GP_SETTING_BOOL:
  case GP_SETTING_CHOICE:
    return sizeof(int);
  case GP_SETTING_CHOICES:
    return (size_t)s->n * sizeof(int);
  default:
    return 0;
  }
}

static int n_choices(const gp_setting *s) {
  int n = 0;
  while (s->choices && s->choices[n])
    n++;
  return n;
}

/* The table entries themselves. */
static void check_table(const gp_layer_type *t) {
  static const char *const structural[] = {"type", "name", "from", "repeat", "block"};
  if (!one_line(t->doc)) FAIL("%s: no one-line doc", t->name);
  if (t->n_settings < 0 || (t->n_settings > 0 && !t->settings))
    FAIL("%s: n_settings %d without a table", t->name, t->n_settings);
  for (int i = 0; i < t->n_settings; i++) {
    const gp_setting *s = &t->settings[i];
    const char *k = s->key ? s->key : "(null)";
    if (!s->key || !s->key[0]) FAIL("%s: setting %d has no key", t->name, i);
    for (int j = 0; j < i && s->key; j++)
      if (t->settings[j].key && !strcmp(t->settings[j].key, s->key))
        FAIL("%s.%s: declared twice", t->name, k);
    for (size_t j = 0; j < sizeof structural / sizeof *structural && s->key; j++)
      if (!strcmp(structural[j], s->key)) FAIL("%s.%s: a structural key", t->name, k);
    if (!one_line(s->doc)) FAIL("%s.%s: no one-line doc", t->name, k);
    if ((unsigned)s->kind >= GP_SETTING_KIND_COUNT) FAIL("%s.%s: kind %d", t->name, k, s->kind);
    if (s->kind == GP_SETTING_INTS && (s->n < 1 || s->n > GP_SETTING_MAX_N))
      FAIL("%s.%s: %d values", t->name, k, s->n);
    if (s->size != kind_size(s))
      FAIL("%s.%s: field of %zu bytes for a value of %zu", t->name, k, s->size, kind_size(s));
    if (s->at + s->size > t->conf_size)
      FAIL("%s.%s: field past the settings struct (%zu bytes)", t->name, k, t->conf_size);
    if (s->optional && s->has_at + sizeof(int) > t->conf_size)
      FAIL("%s.%s: its given-flag is past the settings struct", t->name, k);
    if (s->required + s->optional + !!s->same_as > 1)
      FAIL("%s.%s: at most one of required, optional, same_as", t->name, k);
    if (s->min > s->max) FAIL("%s.%s: min above max", t->name, k);
    const int has_default = !s->required && !s->optional && !s->same_as && !s->dflt_doc;
    if ((s->kind == GP_SETTING_INT || s->kind == GP_SETTING_INTS) && has_default &&
        (s->idflt < s->min || s->idflt > s->max))
      FAIL("%s.%s: default %lld outside its range", t->name, k, (long long)s->idflt);
    if (s->kind == GP_SETTING_FLOAT && has_default && !gp_range_holds(s->range, s->fdflt))
      FAIL("%s.%s: default %g outside its range", t->name, k, s->fdflt);
    if (s->kind == GP_SETTING_BOOL && (s->idflt < 0 || s->idflt > 1))
      FAIL("%s.%s: bool default %lld", t->name, k, (long long)s->idflt);
    if (s->kind == GP_SETTING_CHOICE &&
        (n_choices(s) < 2 || s->idflt < 0 || s->idflt >= n_choices(s)))
      FAIL("%s.%s: %d choices, default %lld", t->name, k, n_choices(s), (long long)s->idflt);
    if (s->kind == GP_SETTING_CHOICES &&
        (n_choices(s) < 2 || s->n < 1 || s->count_at + sizeof(int) > t->conf_size))
      FAIL("%s.%s: %d choices, up to %d values, count at %zu", t->name, k, n_choices(s), s->n,
           s->count_at);
    if (s->same_as) {
      int found = 0;
      for (int j = 0; j < i; j++)
        found |= !strcmp(t->settings[j].key, s->same_as) && t->settings[j].kind == s->kind &&
                 t->settings[j].n == s->n;
      if (!found) FAIL("%s.%s: same_as '%s' is no earlier setting like it", t->name, k, s->same_as);
    }
  }
}

/* A mapping with the required settings at their least values (and key: value, when key). */
static gp_cfg *mapping(const gp_layer_type *t, const char *key, const char *value) {
  gp_cfg *c = gp_cfg_new("t.yaml", 1, 1);
  if (!c) return NULL;
  gp_status s = GP_OK;
  for (int i = 0; s == GP_OK && i < t->n_settings; i++) {
    const gp_setting *st = &t->settings[i];
    if (!st->required || (key && !strcmp(key, st->key))) continue;
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)st->min);
    s = gp_cfg_add_scalar(c, st->key, v, 2, 1 + i);
  }
  if (s == GP_OK && key) s = gp_cfg_add_scalar(c, key, value, 3, 7);
  if (s != GP_OK) {
    gp_cfg_free(c);
    return NULL;
  }
  gp_cfg_set_what(c, t->name);
  return c;
}

/* configure on a fresh zeroed settings struct (conf: a buffer of at least conf_size). */
static gp_status configure(const gp_layer_type *t, gp_cfg *c, unsigned char *conf) {
  gp_layer l;
  memset(&l, 0, sizeof l);
  memset(conf, 0, t->conf_size ? t->conf_size : 1);
  l.type = t;
  l.conf = conf;
  char path[] = "layer";
  l.path = path;
  gp_status s = t->configure(&l, c);
  if (s == GP_OK) s = gp_cfg_check_unknown(c, t->name, NULL);
  return s;
}

static void check_reads(const gp_layer_type *t) {
  static unsigned char conf[4096];
  if (t->conf_size > sizeof conf) {
    FAIL("%s: settings struct of %zu bytes", t->name, t->conf_size);
    return;
  }
  if (!t->configure) {
    FAIL("%s: no configure", t->name);
    return;
  }
  /* defaults */
  gp_cfg *c = mapping(t, NULL, NULL);
  gp_status s = c ? configure(t, c, conf) : GP_ERR_NOMEM;
  if (s != GP_OK) FAIL("%s: only the required keys: %s", t->name, gp_error_message());
  for (int i = 0; s == GP_OK && i < t->n_settings; i++) {
    const gp_setting *st = &t->settings[i];
    const void *v = conf + st->at;
    if (st->required || st->optional || st->same_as) continue;
    int same = 1;
    int64_t iv;
    double dv;
    int bv;
    switch (st->kind) {
    case GP_SETTING_INT:
      memcpy(&iv, v, sizeof iv);
      same = iv == st->idflt;
      break;
    case GP_SETTING_INTS:
      for (int j = 0; j < st->n; j++) {
        memcpy(&iv, (const char *)v + j * sizeof iv, sizeof iv);
        same &= iv == st->idflt;
      }
      break;
    case GP_SETTING_FLOAT:
      memcpy(&dv, v, sizeof dv);
      same = dv == st->fdflt;
      break;
    case GP_SETTING_CHOICES: /* absent: none given */
    case GP_SETTING_INT_LIST:
      memcpy(&bv, conf + st->count_at, sizeof bv);
      same = bv == 0;
      break;
    default:
      memcpy(&bv, v, sizeof bv);
      same = bv == st->idflt;
    }
    if (!same) FAIL("%s.%s: configure left it other than the table's default", t->name, st->key);
  }
  gp_cfg_free(c);
  /* every key is read through the table: a bad value of it is refused, naming it */
  for (int i = 0; i < t->n_settings; i++) {
    const gp_setting *st = &t->settings[i];
    char want[96];
    snprintf(want, sizeof want, "t.yaml:3:7: %s: ", st->key);
    c = mapping(t, st->key, "zzz");
    s = c ? configure(t, c, conf) : GP_ERR_NOMEM;
    if (s != GP_ERR_SPEC || !strstr(gp_error_message(), want))
      FAIL("%s.%s: zzz gave %s '%s', not '%s...'", t->name, st->key, gp_status_name(s),
           gp_error_message(), want);
    gp_cfg_free(c);
  }
  /* and a key no table holds is unknown */
  c = mapping(t, "qqqqqqqqqq", "1");
  s = c ? configure(t, c, conf) : GP_ERR_NOMEM;
  if (s != GP_ERR_SPEC || !strstr(gp_error_message(), "unknown key 'qqqqqqqqqq'"))
    FAIL("%s: an unknown key gave %s '%s'", t->name, gp_status_name(s), gp_error_message());
  gp_cfg_free(c);
}

int main(void) {
  const char *const *names = gp_layer_type_names();
  int n = 0;
  for (; names && names[n]; n++) {
    const gp_layer_type *t = gp_layer_type_find(names[n]);
    if (!t || strcmp(t->name, names[n]) != 0) {
      FAIL("registry: '%s' is listed but not found under that name", names[n]);
      continue;
    }
    for (int j = 0; j < n; j++)
      if (!strcmp(names[j], names[n])) FAIL("registry: '%s' twice", names[n]);
    check_table(t);
    check_reads(t);
  }
  if (n < 20) FAIL("registry: only %d types", n);
  if (gp_layer_type_names() != names) FAIL("registry: the names moved between calls");
  printf("%s: %d layer types\n", fails ? "FAIL" : "ok", n);
  return fails ? 1 : 0;
}
