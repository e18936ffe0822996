/* Unit costs: analytic FLOPs, parameters and activation bytes equal the layers' cost() sums
 * (found here through each node's unit, not unit_first); the boundary traffic of every cut is
 * checked against hand-computed bytes on a model whose skip connection spans three cuts and
 * whose labels cross every cut; measured times are positive, served from the cache on a second
 * call (identical numbers, the cache file's values used, far quicker), identical units share a
 * measurement, and a corrupt cache file is measured again and rewritten. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/spec/spec.h"
#include "core/plan/solve.h"
#include "tests/support/check.h"

static int failures, passes;

/* Units: 0 'a' (linear), 1 a block (tanh, dropout), 2 'b' (linear), 3 add(b, a), 4 linear +
 * the loss. 'a' is read by unit 3, so it crosses the cuts before units 1, 2 and 3. */
static const char *skip_model = "name: skip\n"
                                "inputs: {x: [10], label: {shape: [], dtype: i32}}\n"
                                "blocks:\n"
                                "  mid:\n"
                                "    layers:\n"
                                "      - {type: tanh}\n"
                                "      - {type: dropout, p: 0.1}\n"
                                "layers:\n"
                                "  - {type: linear, out_features: 12, name: a}\n"
                                "  - {block: mid, name: m}\n"
                                "  - {type: linear, out_features: 12, name: b}\n"
                                "  - {type: add, from: [b, a]}\n"
                                "  - {type: linear, out_features: 5}\n"
                                "loss: {type: softmax_cross_entropy}\n";

/* Three identical units between two different ones: three distinct measurements. */
static const char *repeat_model = "name: rep\n"
                                  "inputs: {x: [2, 6, 6], label: {shape: [], dtype: i32}}\n"
                                  "layers:\n"
                                  "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
                                  "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, "
                                  "repeat: 3}\n"
                                  "  - {type: flatten}\n"
                                  "  - {type: linear, out_features: 3}\n"
                                  "loss: {type: softmax_cross_entropy}\n";

static gp_model *load(const char *text) {
  gp_model *m = NULL;
  if (gp_model_load_string(text, "cost.yaml", NULL, 0, &m) != GP_OK) {
    printf("FAIL: load: %s\n", gp_error_message());
    exit(1);
  }
  return m;
}

static void analytic(void) {
  gp_model *m = load(skip_model);
  const int64_t mb = 3;
  gp_unit_costs c;
  CHECK(m->n_units == 5, "units: %d", m->n_units);
  CHECK(gp_unit_costs_compute(m, mb, GP_COST_FLOPS, 1, NULL, &c) == GP_OK, "flops costs");
  if (c.n != 5) {
    failures++;
    printf("FAIL: %d units in the costs\n", c.n);
    gp_model_free(m);
    return;
  }
  double f[5] = {0}, b[5] = {0};
  int64_t p[5] = {0}, act[5] = {0};
  for (int i = 0; i < m->n_nodes; i++) {
    gp_cost k = {0};
    m->nodes[i].layer.type->cost(&m->nodes[i].layer, &k);
    int u = m->nodes[i].unit;
    f[u] += k.fwd_flops;
    /* 'a' reads only x: the trainer computes no gradient for x, so no data GEMM */
    b[u] += i == 0 ? k.bwd_flops - k.bwd_data_flops : k.bwd_flops;
    p[u] += k.params;
    act[u] += k.out_bytes + k.saved_bytes;
    /* the loss keeps its probabilities over the logits, which its unit makes */
    if (i == m->n_nodes - 1) act[u] -= k.over_input_bytes;
  }
  CHECK(act[4] == 4 * 5 + 4 + 4,
        "unit 4 by hand: %lld bytes kept, want the logits, the loss "
        "and its label",
        (long long)act[4]);
  for (int u = 0; u < 5; u++) {
    CHECK(fabs(c.fwd_flops[u] - mb * f[u]) <= 1e-9 * mb * f[u] && c.fwd[u] == c.fwd_flops[u],
          "unit %d fwd flops %g, want %g", u, c.fwd_flops[u], mb * f[u]);
    CHECK(fabs(c.bwd_flops[u] - mb * b[u]) <= 1e-9 * mb * b[u] && c.bwd[u] == c.bwd_flops[u],
          "unit %d bwd flops %g, want %g", u, c.bwd_flops[u], mb * b[u]);
    CHECK(c.params[u] == p[u] && c.act_bytes[u] == mb * act[u],
          "unit %d params %lld (want %lld), act %lld (want %lld)", u, (long long)c.params[u],
          (long long)p[u], (long long)c.act_bytes[u], (long long)(mb * act[u]));
  }
  CHECK(c.params[0] == 10 * 12 + 12 && c.params[1] == 0 && c.params[4] == 12 * 5 + 5,
        "parameter counts by hand");
  /* by hand: 'a' (10 -> 12) forward 2*10*12 + 12 bias, backward only the weight GEMM + bias */
  CHECK(c.fwd_flops[0] == mb * 252.0 && c.bwd_flops[0] == mb * 252.0,
        "unit 0 (fed by x): fwd %g bwd %g, want %g each", c.fwd_flops[0], c.bwd_flops[0],
        mb * 252.0);
  /* out: a 12 floats, the block's dropout 12, b 12, add 12, the loss 1 (the last node) */
  static const int64_t out[5] = {48, 48, 48, 48, 4};
  for (int u = 0; u < 5; u++)
    CHECK(c.out_bytes[u] == mb * out[u], "unit %d out bytes %lld, want %lld", u,
          (long long)c.out_bytes[u], (long long)(mb * out[u]));
  /* the input gradients each unit's backward allocates, per sample: none for x; tanh's of a
   * and dropout's of tanh 48 each; b's of the block 48; add hands dout to b and allocates a's
   * 48 (seen from its unit both inputs come from before the pass, so not to both); the last
   * linear's of the sum 48 (the loss writes the logits' over them) */
  static const int64_t grad[5] = {0, 96, 48, 48, 48};
  for (int u = 0; u < 5; u++)
    CHECK(c.grad_bytes[u] == mb * grad[u], "unit %d gradient bytes %lld, want %lld", u,
          (long long)c.grad_bytes[u], (long long)(mb * grad[u]));
  /* what B leaves for W, per sample: the output gradients of the nodes with parameters, a's
   * and b's 48 (the last linear's is over its logits, kept already) */
  static const int64_t wkeep[5] = {48, 0, 48, 0, 0};
  for (int u = 0; u < 5; u++)
    CHECK(c.wkeep_bytes[u] == mb * wkeep[u], "unit %d bytes kept for W %lld, want %lld", u,
          (long long)c.wkeep_bytes[u], (long long)(mb * wkeep[u]));
  /* per sample: x 40, label 4, a 48, the block's output 48, b 48, the sum 48 */
  static const int64_t cut[6] = {40 + 4, 48 + 4, 48 + 48 + 4, 48 + 48 + 4, 48 + 4, 0};
  for (int u = 0; u <= 5; u++)
    CHECK(c.cut_bytes[u] == mb * cut[u], "cut %d: %lld bytes, want %lld", u,
          (long long)c.cut_bytes[u], (long long)(mb * cut[u]));
  gp_unit_costs_free(&c);
  CHECK(gp_unit_costs_compute(m, mb, GP_COST_PARAMS, 1, NULL, &c) == GP_OK, "params costs");
  if (c.n == 5) {
    int ok = 1;
    for (int u = 0; u < 5; u++)
      ok &= c.fwd[u] == (double)p[u] && c.bwd[u] == 0 && c.fwd_flops[u] > 0;
    CHECK(ok, "params basis: fwd = parameters, bwd = 0, FLOPs still filled");
  }
  gp_unit_costs_free(&c);
  gp_unit_costs_free(&c); /* twice is harmless */
  CHECK(gp_unit_costs_compute(m, 0, GP_COST_FLOPS, 1, NULL, &c) == GP_ERR_USAGE, "micro-batch 0");
  CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 0, NULL, &c) == GP_ERR_USAGE, "0 threads");
  gp_model_free(m);
  /* A parameter-free layer on a model input runs no backward at all, and the conv after it
   * computes no input gradient either: nothing before it trains. */
  m = load("name: first\n"
           "inputs: {x: [2, 6, 6], label: {shape: [], dtype: i32}}\n"
           "layers:\n"
           "  - {type: relu}\n"
           "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
           "  - {type: flatten}\n"
           "  - {type: linear, out_features: 3}\n"
           "loss: {type: softmax_cross_entropy}\n");
  CHECK(gp_unit_costs_compute(m, 1, GP_COST_FLOPS, 1, NULL, &c) == GP_OK, "relu-first costs");
  if (c.n >= 2) {
    double macs = 4.0 * 36 * 2 * 9; /* 4 x 6 x 6 outputs, 2 x 3 x 3 taps each */
    CHECK(c.bwd_flops[0] == 0 && c.fwd_flops[0] > 0, "relu on x: bwd %g, want 0", c.bwd_flops[0]);
    CHECK(c.bwd_flops[1] == 2.0 * macs + 4 * 36, "conv after relu: bwd %g, want %g", c.bwd_flops[1],
          2.0 * macs + 4 * 36);
  }
  gp_unit_costs_free(&c);
  gp_model_free(m);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Names of the cache files in dir (up to 16). */
static int list_dir(const char *dir, char names[][300]) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d)) && n < 16;)
    if (e->d_name[0] != '.') snprintf(names[n++], 300, "%s/%s", dir, e->d_name);
  closedir(d);
  return n;
}

static int read_file(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = 0;
  fclose(f);
  return 1;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void timed(void) {
  char tmpl[] = "/tmp/gp_partition_cost_XXXXXX";
  if (!mkdtemp(tmpl)) {
    failures++;
    printf("FAIL: mkdtemp\n");
    return;
  }
  char dir[400], names[16][300], text[512];
  snprintf(dir, sizeof dir, "%s/cache/sub", tmpl); /* made with its parents */
  gp_model *m = load(skip_model);
  gp_unit_costs c1, c2, c3;
  double t0 = now_s();
  CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 1, dir, &c1) == GP_OK, "time costs");
  double t1 = now_s();
  CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 1, dir, &c2) == GP_OK, "time costs, cached");
  double t2 = now_s(), cached = t2 - t1;
  /* the quickest of three cached calls: a descheduled one says nothing about the cache */
  for (int i = 0; i < 2; i++) {
    gp_unit_costs cx;
    double ta = now_s();
    CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 1, dir, &cx) == GP_OK, "cached again");
    cached = fmin(cached, now_s() - ta);
    gp_unit_costs_free(&cx);
  }
  int n = list_dir(dir, names);
  CHECK(n == 5, "%d cache files, want one per distinct unit (5)", n);
  if (c1.n != 5 || c2.n != 5 || n < 1) {
    failures++;
    printf("FAIL: no costs to compare\n");
    goto out;
  }
  int pos = 1, same = 1;
  for (int u = 0; u < 5; u++) {
    pos &= c1.fwd[u] > 0 && c1.bwd[u] > 0 && isfinite(c1.fwd[u]) && isfinite(c1.bwd[u]);
    same &= c1.fwd[u] == c2.fwd[u] && c1.bwd[u] == c2.bwd[u] && c1.scratch[u] == c2.scratch[u];
    pos &= c1.scratch[u] >= 0;
  }
  CHECK(pos, "measured times are positive");
  CHECK(same, "the cached call gives identical numbers");
  CHECK(c1.fwd_flops[0] > 0 && c1.cut_bytes[0] == 4 * 44, "analytic fields filled with time");
  /* measuring takes at least 50 ms per distinct unit; reading five small files does not */
  CHECK(cached < (t1 - t0) / 5, "cached call %.5f s, measuring call %.5f s", cached, t1 - t0);
  /* the cache's values are what a call returns */
  CHECK(read_file(names[0], text, sizeof text), "read %s", names[0]);
  char key[64] = "";
  sscanf(strstr(text, "key ") ? strstr(text, "key ") : "", "key %63s", key);
  char planted[512];
  snprintf(planted, sizeof planted,
           "gpipe unit time v3\nkey %s\nfwd 123.5\nbwd 0.25\nscratch 4096\n", key);
  write_file(names[0], planted);
  gp_unit_costs_free(&c2);
  CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 1, dir, &c2) == GP_OK, "time costs, planted");
  int planted_seen = 0;
  for (int u = 0; u < c2.n; u++)
    planted_seen += c2.fwd[u] == 123.5 && c2.bwd[u] == 0.25 && c2.scratch[u] == 4096;
  CHECK(planted_seen == 1, "the planted cache entry is read (%d units use it)", planted_seen);
  /* corrupt: garbage, a wrong key, a truncated entry, a negative or absurd
   * time, a negative scratch, the older format without scratch -> measured and rewritten */
  static const char *bad[] = {
      "garbage\x01\x02",
      "gpipe unit time v3\nkey 0000000000000001\nfwd 1\nbwd 1\nscratch 0\n",
      "gpipe unit time v3\nkey ",
      "gpipe unit time v3\nkey %s\nfwd -1\nbwd 1\nscratch 0\n",
      "gpipe unit time v3\nkey %s\nfwd 1e308\nbwd 1\nscratch 0\n" /* a day or more */,
      "gpipe unit time v3\nkey %s\nfwd 1\nbwd 1\nscratch -1\n",
      "gpipe unit time v1\nkey %s\nfwd 123.5\nbwd 0.25\n"};
  for (int i = 0; i < 7; i++) {
    char body[256];
    snprintf(body, sizeof body, bad[i], key);
    write_file(names[0], body);
    CHECK(gp_unit_costs_compute(m, 4, GP_COST_TIME, 1, dir, &c3) == GP_OK, "time costs, corrupt");
    int fine = c3.n == 5;
    for (int u = 0; u < c3.n; u++)
      fine &= c3.fwd[u] > 0 && c3.fwd[u] != 123.5 && isfinite(c3.fwd[u]);
    CHECK(fine, "corrupt cache file %d is ignored", i);
    CHECK(read_file(names[0], text, sizeof text) &&
              strncmp(text, "gpipe unit time v3\nkey ", 23) == 0 && strstr(text, key) &&
              !strstr(text, "fwd -1") && !strstr(text, "fwd 1e308") && strstr(text, "scratch ") &&
              !strstr(text, "scratch -"),
          "corrupt cache file %d is rewritten: '%.60s'", i, text);
    gp_unit_costs_free(&c3);
  }
  /* another micro-batch is another key */
  CHECK(gp_unit_costs_compute(m, 2, GP_COST_TIME, 1, dir, &c3) == GP_OK, "time costs, mb 2");
  CHECK(list_dir(dir, names) == 10, "a second micro-batch adds five files");
  gp_unit_costs_free(&c3);
out:
  gp_unit_costs_free(&c1);
  gp_unit_costs_free(&c2);
  gp_model_free(m);
  /* repeated units: measured once */
  char dir2[400];
  snprintf(dir2, sizeof dir2, "%s/rep", tmpl);
  m = load(repeat_model);
  CHECK(gp_unit_costs_compute(m, 2, GP_COST_TIME, 1, dir2, &c1) == GP_OK, "repeat model");
  CHECK(list_dir(dir2, names) == 4, "units 1..3 share one measurement: %d files",
        list_dir(dir2, names));
  CHECK(c1.n == 6 && c1.fwd[1] == c1.fwd[2] && c1.fwd[2] == c1.fwd[3] && c1.bwd[1] == c1.bwd[3],
        "identical units, identical times");
  gp_unit_costs_free(&c1);
  /* a cache folder that cannot be made is an error, not a silent skip (gpipe-partition turns
   * it into a warning for its default folder, tests/cli/partition.sh) */
  char blocked[400];
  snprintf(blocked, sizeof blocked, "%s/file", tmpl);
  write_file(blocked, "x");
  snprintf(dir2, sizeof dir2, "%s/file/sub", tmpl);
  CHECK(gp_unit_costs_compute(m, 2, GP_COST_TIME, 1, dir2, &c1) == GP_ERR_IO, "blocked cache dir");
  gp_model_free(m);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmpl);
}

int main(void) {
  analytic();
  timed();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
