/* Plan files round-trip: every model name the loader accepts is written so that reading the
 * plan back gives the same name and split. What YAML reads as a line break (U+0085, U+2028,
 * U+2029) or refuses in a file (the other C1 controls, U+FFFE, U+FFFF) broke the plan
 * gpipe-partition wrote, and gpipe-train could not read it: the loader now refuses those in a
 * name (checked here), and the writer escapes them still. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/plan/plan_io.h"
#include "tests/support/check.h"

static int failures, passes;
static char dir[256];

static size_t utf8_put(unsigned cp, char *out) {
  if (cp < 0x80) return out[0] = (char)cp, 1;
  if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | cp >> 12);
    out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | cp >> 18);
  out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The model file names the model by escapes only (\u or \U for all but letters and digits),
 * so that the test does not depend on the writer it tests. */
static void model_text(const char *name, char *out, size_t cap) {
  size_t k = (size_t)snprintf(out, cap, "name: \"");
  for (const unsigned char *p = (const unsigned char *)name; *p;) {
    unsigned cp = *p;
    int n = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
    for (int i = 1; i < n; i++)
      cp = i == 1 ? (cp & (0x7F >> n)) << 6 | (p[1] & 0x3F) : cp << 6 | (p[i] & 0x3F);
    p += n;
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
      k += (size_t)snprintf(out + k, cap - k, "%c", (char)cp);
    else
      k += (size_t)snprintf(out + k, cap - k, "\\U%08x", cp);
  }
  snprintf(out + k, cap - k,
           "\"\ninputs: {x: [4], label: {shape: [], dtype: i32}}\n"
           "layers:\n  - {type: linear, out_features: 4, name: a}\n  - {type: relu}\n"
           "  - {type: linear, out_features: 3, name: c}\n"
           "loss: softmax_cross_entropy\npipeline: {stages: 2, micro_batches: 2}\n");
}

/* refused: the loader must refuse the name (a control character or a noncharacter) */
static void round_trip(const char *name, const char *what, int refused) {
  char text[2048], path[512];
  model_text(name, text, sizeof text);
  gp_model *m = NULL;
  gp_status ls = gp_model_load_string(text, "t.yaml", NULL, 0, &m);
  if (refused) {
    CHECK(ls == GP_ERR_SPEC && strstr(gp_error_message(), "t.yaml:1:7: name: "),
          "%s: the name is not refused", what);
    if (ls == GP_OK) gp_model_free(m);
    /* the writer escapes it still: a model named so in memory round-trips */
    model_text("plain", text, sizeof text);
    if (gp_model_load_string(text, "t.yaml", NULL, 0, &m) != GP_OK) {
      CHECK(0, "%s: the plain model does not load [%s]", what, gp_error_message());
      return;
    }
    snprintf(m->name, sizeof m->name, "%s", name);
  } else if (ls != GP_OK) {
    CHECK(0, "%s: the model does not load [%s]", what, gp_error_message());
    return;
  }
  CHECK(strcmp(m->name, name) == 0, "%s: the model's name is not the one written", what);
  gp_plan p, q;
  snprintf(path, sizeof path, "%s/plan.yaml", dir);
  if (gp_plan_make(m, &m->pipeline, &p) != GP_OK || gp_plan_write(path, m, &p) != GP_OK) {
    CHECK(0, "%s: no plan written", what);
    gp_model_free(m);
    return;
  }
  gp_status s = gp_plan_read(path, m, &q);
  CHECK(s == GP_OK, "%s: the plan gpipe-partition wrote does not read back", what);
  CHECK(s != GP_OK || (q.stages == 2 && q.micro == 2 && q.st[0].end_unit == p.st[0].end_unit &&
                       q.st[1].end_unit == 3),
        "%s: the plan read back differs", what);
  CHECK(s != GP_OK || q.batch == m->train.batch_size, "%s: the batch size read back is %lld", what,
        (long long)q.batch);
  gp_model_free(m);
  unlink(path);
}

/* processes: (which process of a replica holds each stage) round-trips, and what cannot be a
 * launch is refused at its entry. */
static void test_processes(void) {
  char text[2048], path[512];
  model_text("plain", text, sizeof text);
  gp_model *m = NULL;
  if (gp_model_load_string(text, "t.yaml", NULL, 0, &m) != GP_OK) {
    CHECK(0, "processes: the model does not load [%s]", gp_error_message());
    return;
  }
  snprintf(path, sizeof path, "%s/procs.yaml", dir);
  gp_pipeline_spec ps = m->pipeline;
  ps.stages = 3;
  ps.n_procs = 2;
  ps.procs[0] = 0, ps.procs[1] = 1, ps.procs[2] = 1;
  gp_plan p, q;
  int ok = gp_plan_make(m, &ps, &p) == GP_OK && gp_plan_write(path, m, &p) == GP_OK &&
           gp_plan_read(path, m, &q) == GP_OK;
  CHECK(ok && q.n_procs == 2 && q.procs[0] == 0 && q.procs[1] == 1 && q.procs[2] == 1,
        "processes: [0, 1, 1] read back as %d positions [%d, %d, %d] [%s]", q.n_procs, q.procs[0],
        q.procs[1], q.procs[2], ok ? "" : gp_error_message());
  static const struct {
    const char *list, *want;
  } bad[] = {{"[1, 1, 1]",
              "procs.yaml:4:13: processes: stage 0 on process 1: the first stage is on process 0"},
             {"[0, 2, 2]", "procs.yaml:4:16: processes: stage 1 on process 2 after stage 0 on 0"},
             {"[0, 1, 0]", "procs.yaml:4:19: processes: stage 2 on process 0 after stage 1 on 1"},
             {"[0, 1]", "procs.yaml:4:12: processes: 2 entries for 3 stages"},
             {"[0, x, 1]", "procs.yaml:4:16: processes: expected an integer"},
             {"0", "procs.yaml:4:12: processes: "}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(path, "w");
    if (!f) break;
    fprintf(f, "model: plain\nstages: 3\nbalance: [1, 1, 1]\nprocesses: %s\n", bad[i].list);
    fclose(f);
    gp_status st = gp_plan_read(path, m, &q);
    const char *msg = st == GP_OK ? "" : gp_error_message();
    const char *at = strstr(msg, "procs.yaml:");
    CHECK(st != GP_OK && at && strncmp(at, bad[i].want, strlen(bad[i].want)) == 0,
          "processes: %s: got '%s', want '%s...'", bad[i].list, msg, bad[i].want);
  }
  unlink(path);
  gp_model_free(m);
}

/* virtual_stages: (interleaved: stages are the devices, balance the chunks, chunk c on device
 * c mod K) round-trips, and what does not fit together is refused at its entry. */
static void test_virtual(void) {
  static const char *text = "name: v\n"
                            "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: linear, out_features: 4}\n"
                            "  - {type: relu}\n"
                            "  - {type: linear, out_features: 4}\n"
                            "  - {type: linear, out_features: 3}\n"
                            "loss: softmax_cross_entropy\n"
                            "pipeline: {stages: 2, micro_batches: 2}\n";
  char path[512];
  gp_model *m = NULL;
  if (gp_model_load_string(text, "t.yaml", NULL, 0, &m) != GP_OK) {
    CHECK(0, "virtual_stages: the model does not load [%s]", gp_error_message());
    return;
  }
  snprintf(path, sizeof path, "%s/virtual.yaml", dir);
  gp_pipeline_spec ps = m->pipeline;
  ps.stages = 2;
  ps.virtual_stages = 2;
  ps.schedule = GP_SCHED_INTERLEAVED;
  ps.remat = GP_REMAT_NEVER;
  ps.n_devices = 2;
  snprintf(ps.devices[0], sizeof ps.devices[0], "cpu");
  snprintf(ps.devices[1], sizeof ps.devices[1], "cpu");
  /* across processes: one position a device (stage), which holds its chunks */
  ps.n_procs = 2;
  ps.procs[0] = 0, ps.procs[1] = 1;
  gp_plan p, q;
  int ok = gp_plan_make(m, &ps, &p) == GP_OK && gp_plan_write(path, m, &p) == GP_OK &&
           gp_plan_read(path, m, &q) == GP_OK;
  CHECK(ok && q.n_procs == 2 && q.procs[0] == 0 && q.procs[1] == 1,
        "interleaved processes: [0, 1] read back as %d positions [%d, %d] [%s]", q.n_procs,
        q.procs[0], q.procs[1], ok ? "" : gp_error_message());
  CHECK(ok && q.stages == 4 && q.virtual_stages == 2 && gp_plan_devices(&q) == 2 &&
            q.schedule == GP_SCHED_INTERLEAVED && q.st[3].first_unit == 3 && q.st[3].end_unit == 4,
        "virtual_stages: 2 stages x 2 chunks read back as %d chunks, V = %d [%s]", q.stages,
        q.virtual_stages, ok ? "" : gp_error_message());
  static const struct {
    const char *body, *want;
  } bad[] = {
      {"stages: 2\nvirtual_stages: 2\nschedule: 1f1b\nbalance: [1, 1, 1, 1]\n",
       "virtual.yaml:3:17: virtual_stages: 2 or more need schedule: interleaved"},
      {"stages: 2\nschedule: interleaved\nbalance: [2, 2]\n",
       "virtual.yaml:3:11: schedule: interleaved needs virtual_stages: 2 or more"},
      {"stages: 2\nvirtual_stages: 2\nschedule: interleaved\nbalance: [2, 2]\n",
       "virtual.yaml:5:10: balance: 2 entries for 4 chunks"},
      {"stages: 2\nvirtual_stages: 3\nschedule: interleaved\nbalance: [1, 1, 1, 1]\n",
       "virtual.yaml:3:17: virtual_stages: 2 stages x 3 chunks, but model v has only 4 units"},
      {"stages: 2\nvirtual_stages: 2\nschedule: interleaved\nmicro_batches: 3\n"
       "balance: [1, 1, 1, 1]\n",
       "virtual.yaml:5:16: micro_batches: interleaved takes micro-batches in groups of the 2 "
       "stages: 3 is not a multiple (4 would do)"},
      {"stages: 2\nvirtual_stages: 2\nschedule: interleaved\nbalance: [1, 1, 1, 1]\n"
       "processes: [0, 1, 0, 1]\n",
       "virtual.yaml:6:12: processes: 4 entries for 2 stages (one process per stage)"},
      {"stages: 2\nvirtual_stages: 2\nschedule: interleaved\nbalance: [1, 1, 1, 1]\n"
       "devices: [cpu, cpu, cpu]\n",
       "virtual.yaml:6:10: devices: 3 devices for 2 stages"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(path, "w");
    if (!f) break;
    fprintf(f, "model: v\n%s", bad[i].body);
    fclose(f);
    gp_status st = gp_plan_read(path, m, &q);
    const char *msg = st == GP_OK ? "" : gp_error_message();
    const char *at = strstr(msg, "virtual.yaml:");
    CHECK(st != GP_OK && at && strncmp(at, bad[i].want, strlen(bad[i].want)) == 0,
          "virtual_stages %zu: got '%s', want '%s...'", i, msg, bad[i].want);
  }
  unlink(path);
  gp_model_free(m);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gp_plan_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char name[64], what[64];
  /* each C1 control, then what else YAML reads as a line break or refuses (the first four:
   * refused), or marks */
  static const unsigned special[] = {0x2028, 0x2029, 0xFFFE, 0xFFFF, 0xFEFF, 0xA0, 0x10FFFF};
  for (unsigned cp = 0x80; cp < 0x80 + 32 + sizeof special / sizeof special[0]; cp++) {
    unsigned c = cp < 0xA0 ? cp : special[cp - 0xA0];
    size_t k = (size_t)snprintf(name, sizeof name, "m");
    k += utf8_put(c, name + k);
    snprintf(name + k, sizeof name - k, "x");
    snprintf(what, sizeof what, "a name with U+%04X", c);
    round_trip(name, what, cp < 0xA0 + 4);
  }
  /* text YAML would read as something else unquoted */
  static const char *const names[] = {
      "null", "~", "Yes", "a: b", "# c", "- d", "[e]", "{f}", " lead", "trail ", "q\"uote",
      "back\\slash", "'", "%x", "@", "`", "&a", "*a", "!t", "|", ">", "--- x", "...", "caf\xc3\xa9",
      "\xe6\x97\xa5\xe6\x9c\xac",
      /* 63 bytes, the longest name, of three-byte characters */
      "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"
      "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"
      "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(what, sizeof what, "name %zu", i);
    round_trip(names[i], what, 0);
  }
  /* a line break in the name made a second key of the plan: refused */
  round_trip("a\xe2\x80\xa8"
             "b: c",
             "a U+2028 and a key", 1);
  round_trip("x\xc2\x85stages: 9", "a U+0085 and a key", 1);
  test_processes();
  test_virtual();
  rmdir(dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
