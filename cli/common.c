/* The model-load prologue, pipeline flags, lists and enum names of the three programs. */
#include "cli/common.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan/plan.h"
#include "core/spec/cfg.h"

gp_status gp_cli_model_load(const gp_cli_load *l, const char *file, gp_model **out) {
  /* the --set ones, then --batch-size and --micro-batches */
  gp_override ov[GP_CLI_MAX_SETS + 2];
  int nov = 0;
  gp_status s = GP_OK;
  if (l->set && l->set->n_list > GP_CLI_MAX_SETS)
    s = GP_ERR(GP_ERR_USAGE, "--set: given %d times; one run takes at most %d", l->set->n_list,
               GP_CLI_MAX_SETS);
  if (s == GP_OK && l->set) s = gp_args_overrides(l->set, ov, GP_CLI_MAX_SETS, &nov);
  if (s == GP_OK && l->batch)
    s = gp_args_setting(l->batch, "train.batch_size", NULL, ov, GP_CLI_MAX_SETS + 2, &nov);
  if (s == GP_OK && l->micro)
    s = gp_args_setting(l->micro, "pipeline.micro_batches", l->micro_value, ov, GP_CLI_MAX_SETS + 2,
                        &nov);
  if (s == GP_OK) s = gp_model_load(file, ov, nov, out);
  gp_args_overrides_free(ov, nov);
  if (s == GP_OK) gp_args_note(l->prog, (*out)->pipeline.renamed);
  return s;
}

static int find(const char *word, const char *const *names, int *count) {
  int found = -1;
  for (*count = 0; names[*count]; (*count)++)
    if (strcmp(word, names[*count]) == 0) found = *count;
  return found;
}

gp_status gp_cli_choice(const char *flag, const char *text, const char *const *names, int *out) {
  int n, found = find(text, names, &n);
  if (found >= 0) {
    *out = found;
    return GP_OK;
  }
  const char *near = gp_nearest(text, names, n);
  char all[128] = "";
  for (int i = 0; i < n; i++)
    snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", names[i]);
  return GP_ERR(GP_ERR_USAGE, "%s: unknown value '%s'%s%s%s (expected one of %s)", flag, text,
                near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", all);
}

const char *const *gp_cli_schedule_choices(int *n_named) {
  static const char *all[32];
  const char *const *names = gp_schedule_names();
  int n = 0;
  while (names[n] && n < 30) {
    all[n] = names[n];
    n++;
  }
  all[n] = "auto";
  all[n + 1] = NULL;
  *n_named = n;
  return all;
}

gp_status gp_cli_choices(const char *flag, const char *text, const char *const *names, int *out,
                         int max, int *n) {
  *n = 0;
  for (const char *p = text;;) {
    char word[64];
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof word)
      return GP_ERR(GP_ERR_USAGE, "%s: expected names separated by commas, got '%s'", flag, text);
    memcpy(word, p, len);
    word[len] = 0;
    int found;
    GP_TRY(gp_cli_choice(flag, word, names, &found));
    for (int i = 0; i < *n; i++)
      if (out[i] == found) return GP_ERR(GP_ERR_USAGE, "%s: '%s' is listed twice", flag, word);
    if (*n >= max) return GP_ERR(GP_ERR_USAGE, "%s: at most %d values", flag, max);
    out[(*n)++] = found;
    if (!p[len]) return GP_OK;
    p += len + 1;
  }
}

gp_status gp_cli_ints(const char *flag, const char *text, int min, int max_value, int distinct,
                      int *out, int cap, int *n) {
  *n = 0;
  for (const char *p = text;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    int digits = isdigit((unsigned char)p[0]) || (p[0] == '-' && isdigit((unsigned char)p[1]));
    if (!digits || end == p || (*end && *end != ',') || (!errno && v < min) ||
        (errno == ERANGE && v < 0))
      return GP_ERR(GP_ERR_USAGE, "%s: expected integers >= %d separated by commas, got '%s'", flag,
                    min, text);
    if (errno || v > max_value)
      return GP_ERR(GP_ERR_USAGE, "%s: %.*s is too large (at most %d)", flag, (int)(end - p), p,
                    max_value);
    for (int i = 0; distinct && i < *n; i++)
      if (out[i] == v)
        return GP_ERR(GP_ERR_USAGE, "%s: %ld is listed twice in '%s'", flag, v, text);
    if (*n >= cap) return GP_ERR(GP_ERR_USAGE, "%s: at most %d values", flag, cap);
    out[(*n)++] = (int)v;
    if (!*end) return GP_OK;
    p = end + 1;
  }
}

gp_status gp_cli_devices(const char *flag, const char *text, char (*out)[16], int *n) {
  *n = 0;
  for (const char *p = text;;) {
    char name[64];
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof name || *n >= GP_MAX_DEVICES)
      return GP_ERR(GP_ERR_USAGE,
                    "%s: expected names like cpu or cuda:0 separated by commas, got '%s'", flag,
                    text);
    memcpy(name, p, len);
    name[len] = 0;
    if (gp_device_check(name) != GP_OK) return gp_error_prefix(GP_ERR_USAGE, "%s: ", flag);
    memcpy(out[*n], name, len < sizeof out[0] ? len + 1 : sizeof out[0]); /* checked: fits */
    out[*n][sizeof out[0] - 1] = 0;
    gp_device_canonical(out[(*n)++]);
    if (!p[len]) return GP_OK;
    p += len + 1;
  }
}

gp_status gp_cli_stages_check(const gp_model *m, int k) {
  int kmax = m->n_units < GP_MAX_DEVICES ? m->n_units : GP_MAX_DEVICES;
  if (k >= 1 && k <= kmax) return GP_OK;
  return GP_ERR(GP_ERR_USAGE, "--stages %d: model %s has %d unit%s, so K must be 1..%d", k, m->name,
                m->n_units, m->n_units == 1 ? "" : "s", kmax);
}

gp_status gp_cli_pipeline_apply(const gp_cli_pipeline *f, const gp_model *m, gp_pipeline_spec *ps) {
  if (f->stages && f->stages->given) {
    GP_TRY(gp_cli_stages_check(m, (int)f->stages->i));
    if (ps->stages != (int)f->stages->i) ps->n_balance = 0;
    ps->stages = (int)f->stages->i;
  }
  int v;
  if (f->schedule && f->schedule->given) {
    int named;
    GP_TRY(gp_cli_choice(f->schedule->name, f->schedule->s, gp_cli_schedule_choices(&named), &v));
    ps->schedule = v == named ? GP_SCHED_AUTO : (gp_schedule_kind)v;
  }
  if (f->remat && f->remat->given) {
    GP_TRY(gp_cli_choice(f->remat->name, f->remat->s, gp_remat_names(), &v));
    ps->remat = (gp_remat)v;
  }
  /* the zero-bubble and interleaved lists re-materialize nothing: asked for, refused; else
   * never */
  if (ps->schedule >= 0 && gp_schedule_keeps_all(ps->schedule)) {
    if (f->remat && f->remat->given && ps->remat != GP_REMAT_NEVER && ps->remat != GP_REMAT_AUTO)
      return GP_ERR(GP_ERR_USAGE, "%s %s: the %s schedule re-materializes nothing; use %s never",
                    f->remat->name, f->remat->s, gp_schedule_names()[ps->schedule], f->remat->name);
    ps->remat = GP_REMAT_NEVER;
  }
  if (f->virtual_stages && f->virtual_stages->given) {
    if (ps->virtual_stages != (int)f->virtual_stages->i) ps->n_balance = 0;
    ps->virtual_stages = (int)f->virtual_stages->i;
  }
  if (f->balance && f->balance->given)
    GP_TRY(gp_cli_ints(f->balance->name, f->balance->s, 1, 1000000, 0, ps->balance, GP_MAX_DEVICES,
                       &ps->n_balance));
  if (f->devices && f->devices->given)
    GP_TRY(gp_cli_devices(f->devices->name, f->devices->s, ps->devices, &ps->n_devices));
  return GP_OK;
}

int gp_cli_fail(const char *prog, gp_status s, const char *hint) {
  fprintf(stderr, "%s: %s%s\n", prog, gp_error_message(), hint ? hint : "");
  return gp_status_exit_code(s);
}
