/* Plan files: written atomically as a small YAML mapping, read back with libyaml's document
 * API and checked against the model, every complaint located as path:line:col. */
#include "core/plan/plan_io.h"
#include "core/plan/plan.h"

#include "core/strbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/io/target.h"
#include "core/spec/cfg.h"

/* A plan lists every unit name; a model has at most GP_SPEC_MAX_NODES units of names well
 * under 100 bytes, so anything larger is not a plan. */
#define GP_PLAN_MAX_BYTES ((size_t)16 << 20)

/* ---- writing --------------------------------------------------------------------------- */

/* A YAML double-quoted scalar that reads back as s. Names come from the model file and hold
 * anything it can carry: besides '"' and '\', what YAML reads as a line break (U+0085 \N,
 * U+2028 \L, U+2029 \P) or refuses in a file (C0, DEL, the other C1 controls, U+FFFE and
 * U+FFFF) is escaped; other UTF-8 is kept. */
static void sb_quoted(gp_strbuf *b, const char *s) {
  gp_strbuf_printf(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      gp_strbuf_printf(b, "\\%c", *c);
    } else if (*c < 0x20 || *c == 0x7f) {
      gp_strbuf_printf(b, "\\x%02x", *c);
    } else if (c[0] == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F) { /* U+0080..U+009F */
      c++;
      if (*c == 0x85)
        gp_strbuf_printf(b, "\\N");
      else
        gp_strbuf_printf(b, "\\x%02x", *c);
    } else if (c[0] == 0xE2 && c[1] == 0x80 && (c[2] == 0xA8 || c[2] == 0xA9)) {
      gp_strbuf_printf(b, c[2] == 0xA8 ? "\\L" : "\\P");
      c += 2;
    } else if (c[0] == 0xEF && c[1] == 0xBF && (c[2] == 0xBE || c[2] == 0xBF)) {
      gp_strbuf_printf(b, c[2] == 0xBE ? "\\uFFFE" : "\\uFFFF");
      c += 2;
    } else {
      gp_strbuf_put(b, (const char *)c, 1);
    }
  }
  gp_strbuf_printf(b, "\"");
}

/* Plain when it cannot be mistaken for anything else in YAML, so the file reads naturally. */
static void sb_name(gp_strbuf *b, const char *s) {
  int plain = (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z');
  for (const char *c = s; *c && plain; c++)
    plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '-' || *c == '_' || *c == '.';
  static const char *const reserved[] = {"true", "false", "yes", "no", "on", "off", "null", NULL};
  for (int i = 0; reserved[i] && plain; i++)
    plain = strcasecmp(s, reserved[i]) != 0;
  if (plain)
    gp_strbuf_printf(b, "%s", s);
  else
    sb_quoted(b, s);
}

static void format_plan(gp_strbuf *b, const gp_model *m, const gp_plan *p) {
  /* the name as model: writes it: raw, a line separator in it would end the comment */
  gp_strbuf_printf(b, "# gpipe plan for ");
  sb_name(b, m->name);
  gp_strbuf_printf(b, " (written by gpipe-partition; gpipe-train --partition reads it)\n");
  gp_strbuf_printf(b, "model: ");
  sb_name(b, m->name);
  /* interleaved: stages are the devices, balance the chunks (chunk v on device v % stages) */
  const int devs = gp_plan_devices(p), v = gp_plan_chunks(p);
  gp_strbuf_printf(b, "\nstages: %d\n", devs);
  if (v > 1) gp_strbuf_printf(b, "virtual_stages: %d  # chunks per stage\n", v);
  gp_strbuf_printf(b, "micro_batches: %d\nschedule: %s\nremat: %s\ndevices: [", p->micro,
                   gp_schedule_names()[p->schedule], gp_remat_names()[p->remat]);
  for (int s = 0; s < devs; s++) {
    gp_strbuf_printf(b, s ? ", " : "");
    sb_name(b, p->st[s].device);
  }
  gp_strbuf_printf(b, "]\nbalance: [");
  for (int s = 0; s < p->stages; s++)
    gp_strbuf_printf(b, s ? ", %d" : "%d", p->st[s].end_unit - p->st[s].first_unit);
  gp_strbuf_printf(b, "]  # units per %s\n", v > 1 ? "chunk" : "stage");
  if (p->n_procs > 0) { /* interleaved: a device's chunks are on its process */
    gp_strbuf_printf(b, "processes: [");
    for (int s = 0; s < devs; s++)
      gp_strbuf_printf(b, s ? ", %d" : "%d", p->procs[s]);
    gp_strbuf_printf(b, "]  # each stage's process in its replica (under mpirun)\n");
  }
  for (int s = 0; s < p->stages; s++) {
    if (v > 1)
      gp_strbuf_printf(b, "# chunk %d (stage %d): ", s, s % devs);
    else
      gp_strbuf_printf(b, "# stage %d: ", s);
    gp_strbuf_printf(b, "units %d..%d (%s .. %s)\n", p->st[s].first_unit, p->st[s].end_unit - 1,
                     m->unit_names[p->st[s].first_unit], m->unit_names[p->st[s].end_unit - 1]);
  }
  /* M cuts this batch: read at another, the micro-batches would change size unseen */
  gp_strbuf_printf(b, "batch_size: %" PRId64 "  # micro-batches of %s%" PRId64 " samples\n",
                   m->train.batch_size, m->train.batch_size % p->micro ? "up to " : "",
                   (m->train.batch_size + p->micro - 1) / p->micro);
  gp_strbuf_printf(b, "units: [");
  /* wrapped at about 100 columns: a flow sequence may continue on indented lines */
  size_t line_start = b->n - 8;
  for (int u = 0; u < m->n_units; u++) {
    if (u) gp_strbuf_printf(b, ",");
    if (u && b->n - line_start + strlen(m->unit_names[u]) > 95) {
      gp_strbuf_printf(b, "\n");
      line_start = b->n;
      gp_strbuf_printf(b, "        ");
    } else if (u) {
      gp_strbuf_printf(b, " ");
    }
    sb_quoted(b, m->unit_names[u]);
  }
  gp_strbuf_printf(b, "]  # checked against the model\n");
}

static gp_status write_buf(FILE *fp, void *ctx) {
  const gp_strbuf *b = ctx;
  fwrite(b->p, 1, b->n, fp); /* a short write sets the stream's error: gp_io_write_file says */
  return GP_OK;
}

gp_status gp_plan_write(const char *path, const gp_model *m, const gp_plan *p) {
  if (!path || !m || !p) return GP_ERR(GP_ERR_USAGE, "plan: nothing to write");
  if (p->stages < 1 || p->stages > GP_MAX_DEVICES || p->st[p->stages - 1].end_unit != m->n_units)
    return GP_ERR(GP_ERR_USAGE, "%s: the plan does not cover model %s's %d unit%s", path, m->name,
                  m->n_units, m->n_units == 1 ? "" : "s");
  gp_strbuf b = {0};
  format_plan(&b, m, p);
  if (b.oom) {
    gp_strbuf_free(&b);
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory formatting the plan", path);
  }
  gp_status st = gp_io_write_file(path, write_buf, &b);
  gp_strbuf_free(&b);
  return st;
}

/* ---- reading --------------------------------------------------------------------------- */

typedef struct reader {
  const char *path;
  yaml_document_t doc;
} reader;

static gp_status at(const reader *r, const yaml_node_t *n, gp_status code, const char *fmt, ...)
    GP_PRINTF(4, 5);
static gp_status at(const reader *r, const yaml_node_t *n, gp_status code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line = n ? (int)n->start_mark.line + 1 : 1, col = n ? (int)n->start_mark.column + 1 : 1;
  return GP_ERR(code, "%s:%d:%d: %s", r->path, line, col, msg);
}

static const char *scalar(const yaml_node_t *n) {
  return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* YAML's null (`~`, `null`, or nothing after the colon), as the model loader reads it: written
 * without quotes only. */
static int is_null(const yaml_node_t *n) {
  const char *s = scalar(n);
  if (!s || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* What a node that is not the value wanted is: NULL for a scalar that is not null. */
static const char *not_a_value(const yaml_node_t *n) {
  if (!n || n->type == YAML_MAPPING_NODE) return "a mapping";
  if (n->type == YAML_SEQUENCE_NODE) return "a list";
  return is_null(n) ? "nothing (null)" : NULL;
}

/* An integer by the model file's rule (gp_cfg_parse_int: no "+2", " 2" or "0x2"). */
static gp_status get_int(const reader *r, const yaml_node_t *n, const char *key, long lo, long hi,
                         int *out) {
  const char *what = not_a_value(n), *s = scalar(n);
  if (what) return at(r, n, GP_ERR_SPEC, "%s: expected an integer, got %s", key, what);
  int64_t v = 0;
  const int ok = gp_cfg_parse_int(s, &v);
  if (!ok) return at(r, n, GP_ERR_SPEC, "%s: expected an integer, got '%s'", key, s);
  if (ok < 0 || v < lo || v > hi)
    return at(r, n, GP_ERR_USAGE, "%s: expected %ld..%ld, got %s", key, lo, hi, s);
  *out = (int)v;
  return GP_OK;
}

static gp_status get_choice(const reader *r, const yaml_node_t *n, const char *key,
                            const char *const *names, int *out) {
  const char *what = not_a_value(n), *s = scalar(n);
  if (what) return at(r, n, GP_ERR_SPEC, "%s: expected a name, got %s", key, what);
  int count = 0;
  for (; names[count]; count++)
    if (strcmp(names[count], s) == 0) {
      *out = count;
      return GP_OK;
    }
  const char *near = gp_nearest(s, names, count);
  return at(r, n, GP_ERR_SPEC, "%s: unknown value '%s'%s%s%s", key, s,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}

/* A sequence (or, where one_ok, a lone scalar standing for a list of one). */
static gp_status get_list(const reader *r, yaml_node_t *n, const char *key, int one_ok,
                          yaml_node_t **items, int max, int *count) {
  *count = 0;
  if (is_null(n))
    return at(r, n, GP_ERR_SPEC, "%s: expected %sa list [a, b, ...], got nothing (null)", key,
              one_ok ? "a name or " : "");
  if (one_ok && n->type == YAML_SCALAR_NODE) {
    items[(*count)++] = n;
    return GP_OK;
  }
  if (n->type != YAML_SEQUENCE_NODE)
    return at(r, n, GP_ERR_SPEC, "%s: expected a list [a, b, ...]", key);
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    yaml_node_t *in = yaml_document_get_node((yaml_document_t *)&r->doc, *it);
    if (!in || in->type != YAML_SCALAR_NODE)
      return at(r, in ? in : n, GP_ERR_SPEC, "%s: expected a list of scalars", key);
    if (is_null(in))
      return at(r, in, GP_ERR_SPEC, "%s: entry %d is nothing (null)", key, *count + 1);
    if (*count >= max) return at(r, in, GP_ERR_USAGE, "%s: more than %d entries", key, max);
    items[(*count)++] = in;
  }
  return GP_OK;
}

/* A device name by gp_device_check's rule (whether the build can run it is gp_plan_make's
 * and the trainer's call), without its message: the caller names the line. */
static int device_name_ok(const char *s) {
  if (gp_device_check(s) == GP_OK) return 1;
  gp_error_clear();
  return 0;
}

/* checkpoint: is remat:'s old name, still read (with a note) so that older plans load */
enum {
  K_MODEL,
  K_STAGES,
  K_MICRO,
  K_SCHEDULE,
  K_REMAT,
  K_CHECKPOINT,
  K_DEVICES,
  K_BALANCE,
  K_BATCH,
  K_UNITS,
  K_PROCS,
  K_VIRTUAL,
  K_N
};
static const char *const key_names[] = {
    "model",   "stages",  "micro_batches", "schedule", "remat",     "checkpoint",
    "devices", "balance", "batch_size",    "units",    "processes", "virtual_stages",
    NULL};

static gp_status check_units(const reader *r, yaml_node_t *v, const gp_model *m) {
  int cap = m->n_units + 1, n = 0;
  yaml_node_t **items = malloc(sizeof *items * (size_t)cap);
  if (!items) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", r->path);
  gp_status st = get_list(r, v, "units", 0, items, cap, &n);
  if (st == GP_OK && n != m->n_units)
    st = at(r, v, GP_ERR_USAGE, "units: the plan lists %d unit%s, model %s has %d", n,
            n == 1 ? "" : "s", m->name, m->n_units);
  for (int u = 0; u < n && st == GP_OK; u++)
    if (strcmp(scalar(items[u]), m->unit_names[u]) != 0)
      st = at(r, items[u], GP_ERR_USAGE, "units: unit %d is '%s' in the plan but '%s' in the model",
              u, scalar(items[u]), m->unit_names[u]);
  free(items);
  return st;
}

/* processes: one position per stage (interleaved: per device, which holds its chunks), from 0,
 * each stage on its predecessor's process or the next one: contiguous runs, every position
 * used. */
static gp_status get_procs(const reader *r, yaml_node_t *v, gp_plan *out) {
  yaml_node_t *items[GP_MAX_DEVICES];
  int n = 0, k = gp_plan_devices(out);
  GP_TRY(get_list(r, v, "processes", 0, items, GP_MAX_DEVICES, &n));
  if (n != k)
    return at(r, v, GP_ERR_USAGE, "processes: %d entr%s for %d stage%s (one process per stage)", n,
              n == 1 ? "y" : "ies", k, k == 1 ? "" : "s");
  for (int s = 0; s < k; s++) {
    int q = 0, prev = s ? out->procs[s - 1] : 0;
    GP_TRY(get_int(r, items[s], "processes", 0, k - 1, &q));
    if (s == 0 && q != 0)
      return at(r, items[s], GP_ERR_USAGE,
                "processes: stage 0 on process %d: the first stage is on process 0", q);
    if (q != prev && q != prev + 1)
      return at(r, items[s], GP_ERR_USAGE,
                "processes: stage %d on process %d after stage %d on %d: the first stage is on "
                "process 0 and each next stage on the same process or the next one",
                s, q, s - 1, prev);
    out->procs[s] = q;
  }
  out->n_procs = out->procs[k - 1] + 1;
  return GP_OK;
}

static gp_status fill_plan(const reader *r, yaml_node_t **val, const gp_model *m, gp_plan *out) {
  const gp_pipeline_spec *ps = &m->pipeline;
  yaml_node_t *root = yaml_document_get_root_node((yaml_document_t *)&r->doc);
  static const int required[] = {K_MODEL, K_STAGES, K_BALANCE};
  for (int i = 0; i < 3; i++)
    if (!val[required[i]])
      return at(r, root, GP_ERR_SPEC, "missing key '%s' (a plan needs model, stages and balance)",
                key_names[required[i]]);
  const char *name = scalar(val[K_MODEL]), *what = not_a_value(val[K_MODEL]);
  if (what) return at(r, val[K_MODEL], GP_ERR_SPEC, "model: expected a name, got %s", what);
  if (strcmp(name, m->name) != 0)
    return at(r, val[K_MODEL], GP_ERR_USAGE, "the plan is for model '%s', not '%s'", name, m->name);
  int devs = 1, v = 1;
  GP_TRY(get_int(r, val[K_STAGES], "stages", 1, GP_MAX_DEVICES, &devs));
  if (devs > m->n_units)
    return at(r, val[K_STAGES], GP_ERR_USAGE, "stages: %d stages, but model %s has only %d unit%s",
              devs, m->name, m->n_units, m->n_units == 1 ? "" : "s");
  if (val[K_VIRTUAL])
    GP_TRY(get_int(r, val[K_VIRTUAL], "virtual_stages", 1, GP_MAX_DEVICES / devs, &v));
  const int k = devs * v; /* the chunks (the stages, without virtual_stages) */
  out->stages = k;
  out->virtual_stages = v;
  if (k > m->n_units)
    return at(r, val[K_VIRTUAL], GP_ERR_USAGE,
              "virtual_stages: %d stages x %d chunks, but model %s has only %d unit%s", devs, v,
              m->name, m->n_units, m->n_units == 1 ? "" : "s");
  out->micro = ps->micro_batches;
  if (val[K_MICRO])
    GP_TRY(get_int(r, val[K_MICRO], "micro_batches", 1, GP_MAX_MICRO_BATCHES, &out->micro));
  const int64_t batch = m->train.batch_size; /* with --batch-size applied */
  if (val[K_BATCH]) {
    int made_for;
    GP_TRY(get_int(r, val[K_BATCH], "batch_size", 1, GP_MAX_BATCH, &made_for));
    if (made_for != batch)
      return at(r, val[K_BATCH], GP_ERR_USAGE,
                "batch_size: the plan was made for batch %d, this run's is %" PRId64
                " (its %d micro-batches would change size); train at --batch-size %d or make "
                "the plan again at %" PRId64,
                made_for, batch, out->micro, made_for, batch);
    out->batch = made_for;
  }
  if (out->micro > batch)
    return at(r, val[K_MICRO] ? val[K_MICRO] : root, GP_ERR_USAGE,
              "micro_batches: %d micro-batches cannot split this run's batch of %" PRId64,
              out->micro, batch);
  int choice = (int)ps->schedule;
  if (val[K_SCHEDULE])
    GP_TRY(get_choice(r, val[K_SCHEDULE], "schedule", gp_schedule_names(), &choice));
  out->schedule = (gp_schedule_kind)choice;
  if ((v > 1) != (out->schedule == GP_SCHED_INTERLEAVED))
    return at(r,
              val[K_VIRTUAL]    ? val[K_VIRTUAL]
              : val[K_SCHEDULE] ? val[K_SCHEDULE]
                                : root,
              GP_ERR_USAGE, "%s",
              v > 1 ? "virtual_stages: 2 or more need schedule: interleaved"
                    : "schedule: interleaved needs virtual_stages: 2 or more");
  if (v > 1 && out->micro % devs)
    return at(r, val[K_MICRO] ? val[K_MICRO] : root, GP_ERR_USAGE,
              "micro_batches: interleaved takes micro-batches in groups of the %d stages: %d is "
              "not a multiple (%d would do)",
              devs, out->micro, (out->micro + devs - 1) / devs * devs);
  choice = (int)ps->remat;
  out->renamed[0] = 0;
  if (val[K_REMAT] && val[K_CHECKPOINT])
    return at(r, val[K_CHECKPOINT], GP_ERR_SPEC,
              "checkpoint: is the old name of remat:, which the plan gives too; keep remat: alone");
  if (val[K_REMAT]) GP_TRY(get_choice(r, val[K_REMAT], "remat", gp_remat_names(), &choice));
  if (val[K_CHECKPOINT]) {
    GP_TRY(get_choice(r, val[K_CHECKPOINT], "checkpoint", gp_remat_names(), &choice));
    snprintf(out->renamed, sizeof out->renamed, "%s:%d:%d: checkpoint: is now remat:", r->path,
             (int)val[K_CHECKPOINT]->start_mark.line + 1,
             (int)val[K_CHECKPOINT]->start_mark.column + 1);
  }
  /* the zero-bubble lists re-materialize nothing: never unless the plan says otherwise,
   * which is refused where it says it */
  if (out->schedule == GP_SCHED_ZB_H1 || out->schedule == GP_SCHED_ZB_H2) {
    const yaml_node_t *said = val[K_REMAT] ? val[K_REMAT] : val[K_CHECKPOINT];
    if (said && choice != GP_REMAT_NEVER)
      return at(r, said, GP_ERR_USAGE,
                "remat: %s with schedule %s: the zero-bubble schedules re-materialize nothing "
                "(use never)",
                gp_remat_names()[choice], gp_schedule_names()[out->schedule]);
    choice = GP_REMAT_NEVER;
  }
  out->remat = (gp_remat)choice;

  yaml_node_t *items[GP_MAX_DEVICES];
  int n = 0, first = 0;
  GP_TRY(get_list(r, val[K_BALANCE], "balance", 0, items, GP_MAX_DEVICES, &n));
  if (n != k)
    return at(r, val[K_BALANCE], GP_ERR_USAGE, "balance: %d entr%s for %d %s%s", n,
              n == 1 ? "y" : "ies", k, v > 1 ? "chunk" : "stage", k == 1 ? "" : "s");
  for (int s = 0; s < k; s++) {
    int units;
    GP_TRY(get_int(r, items[s], "balance", 1, m->n_units, &units));
    out->st[s].first_unit = first;
    first += units;
    out->st[s].end_unit = first;
  }
  if (first != m->n_units)
    return at(r, val[K_BALANCE], GP_ERR_USAGE, "balance: sums to %d unit%s, model %s has %d", first,
              first == 1 ? "" : "s", m->name, m->n_units);

  if (val[K_DEVICES]) {
    GP_TRY(get_list(r, val[K_DEVICES], "devices", 1, items, GP_MAX_DEVICES, &n));
    if (n != 1 && n != devs)
      return at(r, val[K_DEVICES], GP_ERR_USAGE,
                "devices: %d devices for %d stage%s (give one, or one per stage)", n, devs,
                devs == 1 ? "" : "s");
    for (int s = 0; s < n; s++)
      if (!device_name_ok(scalar(items[s])))
        return at(r, items[s], GP_ERR_USAGE,
                  "devices: unknown device '%s' (expected cpu, cuda or cuda:N)", scalar(items[s]));
    for (int s = 0; s < k; s++) {
      snprintf(out->st[s].device, sizeof out->st[s].device, "%s",
               scalar(items[n == 1 ? 0 : s % devs]));
      gp_device_canonical(out->st[s].device);
    }
    /* CPU and CUDA stages mixed: refused by gp_plan_make too, but there without the line */
    if (gp_devices_check(k, out->st[0].device, sizeof out->st[0]) != GP_OK) {
      char why[400];
      snprintf(why, sizeof why, "%s", gp_error_message());
      return at(r, val[K_DEVICES], GP_ERR_USAGE, "%s", why);
    }
  } else {
    if (ps->n_devices > 1 && ps->n_devices != devs)
      return at(r, val[K_STAGES], GP_ERR_USAGE,
                "the model file names %d devices for %d stage%s; give devices: in the plan",
                ps->n_devices, devs, devs == 1 ? "" : "s");
    for (int s = 0; s < k; s++)
      snprintf(out->st[s].device, sizeof out->st[s].device, "%s",
               ps->n_devices == 0 ? "cpu" : ps->devices[ps->n_devices == 1 ? 0 : s % devs]);
  }
  if (val[K_UNITS]) GP_TRY(check_units(r, val[K_UNITS], m));
  if (val[K_PROCS]) GP_TRY(get_procs(r, val[K_PROCS], out));
  for (int s = 0; s < k; s++) {
    out->st[s].first_node = m->unit_first[out->st[s].first_unit];
    out->st[s].end_node = m->unit_first[out->st[s].end_unit];
  }
  return GP_OK;
}

/* A plan is one document: anything after a '---' would be ignored. */
static gp_status no_second_document(const char *path, yaml_parser_t *p) {
  yaml_document_t more;
  if (!yaml_parser_load(p, &more))
    return GP_ERR(GP_ERR_SPEC, "%s:%d:%d: YAML syntax error: %s", path,
                  (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
                  p->problem ? p->problem : "malformed YAML");
  gp_status st = GP_OK;
  if (yaml_document_get_root_node(&more))
    st = GP_ERR(GP_ERR_SPEC, "%s:%d:%d: a second YAML document starts here; a plan is one", path,
                (int)more.start_mark.line + 1, (int)more.start_mark.column + 1);
  yaml_document_delete(&more);
  return st;
}

gp_status gp_plan_read(const char *path, const gp_model *m, gp_plan *out) {
  if (!path || !m || !out) return GP_ERR(GP_ERR_USAGE, "plan: nothing to read");
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  GP_TRY(gp_io_read_text(path, GP_PLAN_MAX_BYTES, "a plan file", &text, &len));
  reader r = {.path = path};
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    free(text);
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory (yaml)", path);
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  gp_status st = GP_OK;
  if (!yaml_parser_load(&p, &r.doc)) {
    st = p.error == YAML_MEMORY_ERROR
             ? GP_ERR(GP_ERR_NOMEM, "%s: out of memory (yaml)", path)
             : GP_ERR(GP_ERR_SPEC, "%s:%d:%d: YAML syntax error: %s", path,
                      (int)p.problem_mark.line + 1, (int)p.problem_mark.column + 1,
                      p.problem ? p.problem : "malformed YAML");
    yaml_parser_delete(&p);
    free(text);
    return st;
  }
  yaml_node_t *root = yaml_document_get_root_node(&r.doc);
  yaml_node_t *val[K_N] = {0};
  if (root) st = no_second_document(path, &p);
  if (st == GP_OK && (!root || root->type != YAML_MAPPING_NODE)) {
    st = at(&r, root, GP_ERR_SPEC, "a plan is a mapping with model:, stages: and balance:");
  } else if (st == GP_OK) {
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
         st == GP_OK && pr < root->data.mapping.pairs.top; pr++) {
      yaml_node_t *kn = yaml_document_get_node(&r.doc, pr->key);
      const char *key = scalar(kn);
      int which = -1;
      for (int i = 0; key && key_names[i]; i++)
        if (strcmp(key, key_names[i]) == 0) which = i;
      if (!key) {
        st = at(&r, kn, GP_ERR_SPEC, "expected a key name");
      } else if (which < 0) {
        const char *near = gp_nearest(key, key_names, K_N);
        st = at(&r, kn, GP_ERR_SPEC, "unknown key '%s'%s%s%s", key, near ? "; did you mean '" : "",
                near ? near : "", near ? "'?" : "");
      } else if (val[which]) {
        st = at(&r, kn, GP_ERR_SPEC, "duplicate key '%s'", key);
      } else {
        val[which] = yaml_document_get_node(&r.doc, pr->value);
      }
    }
    if (st == GP_OK) st = fill_plan(&r, val, m, out);
  }
  yaml_document_delete(&r.doc);
  yaml_parser_delete(&p);
  free(text);
  if (st != GP_OK) memset(out, 0, sizeof *out);
  return st;
}
