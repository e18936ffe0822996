/* models/amoebanet-d.yaml scaled with --set to the five configurations of GPipe's Table 1:
 * the parameter count the loader computes from the graph (no weights allocated) equals the
 * count derived from the specification by tests/models/amoebanet_count.py and is within 1%
 * of the published figure; units and their output shapes are the specification's; loading
 * the 1.84B-parameter (72, 512) is cheap in memory and CPU time.
 * Usage: test_amoebanet_counts models/amoebanet-d.yaml */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tests/support/check.h"
#include "tests/models/amoeba_set.h"

static int failures, passes;

/* Loading builds the graph and shapes only. The weights of (72, 512) alone are 7.4 GB: a
 * peak RSS growth of 64 MiB over the whole run means none were allocated (measured: about
 * 10 MiB). The CPU bound is generous for sanitizer builds (measured: about 0.02 s). */
#define MAX_RSS_GROWTH_KIB (64 * 1024)
#define MAX_LOAD_CPU_S 2.0

typedef struct config {
  int L, D, classes;
  int64_t exact;   /* tests/models/amoebanet_count.py: the specification's count */
  double reported; /* the specification's "about" figure (GPipe Table 1 rounds further) */
} config;

static const config configs[] = {
    {18, 208, 1000, 81505540, 81.5e6},   {18, 416, 1000, 319024120, 319e6},
    {18, 544, 1000, 542734840, 542.7e6}, {36, 544, 1000, 1055832376, 1.06e9},
    {72, 512, 1000, 1844858344, 1.84e9}, {6, 16, 10, 173894, 0},
};

static int unit_index(const gp_model *m, const char *name) {
  for (int u = 0; u < m->n_units; u++)
    if (strcmp(m->unit_names[u], name) == 0) return u;
  return -1;
}

/* A unit's output is its last node (the concat of the cell's states); the last unit's is the
 * logits (the loss follows them in that unit). */
static void check_unit(const gp_model *m, const char *name, int64_t c, int64_t hw) {
  int u = unit_index(m, name);
  CHECK(u >= 0, "no unit %s", name);
  if (u < 0) return;
  int node = u == m->n_units - 1 ? m->output_node : m->unit_first[u + 1] - 1;
  const gp_shape *s = &m->nodes[node].layer.out_shape;
  char buf[160];
  int ok = hw ? s->ndim == 3 && s->d[0] == c && s->d[1] == hw && s->d[2] == hw
              : s->ndim == 1 && s->d[0] == c;
  CHECK(ok, "unit %s outputs %s, want [%lld%s%lld%s%lld]", name, gp_shape_str(s, buf, sizeof buf),
        (long long)c, hw ? ", " : "", (long long)hw, hw ? ", " : "", (long long)hw);
}

/* Units and shapes of AmoebaNet-D(L, D) at 224x224: the stem halves the image, the four
 * reduction cells halve it again (112, 56, 28, 14, 7); a reduction cell outputs 3c, a
 * normal cell 4c packed with what it carries for the next cell. */
static void check_structure(const gp_model *m, const config *k) {
  int n = k->L / 3;
  int64_t d = k->D;
  CHECK(m->n_units == 3 * n + 6, "(%d, %d): %d units, want %d", k->L, k->D, m->n_units, 3 * n + 6);
  check_unit(m, "stem", d / 4, 112);
  check_unit(m, "reduce1", 3 * d / 2, 56);
  check_unit(m, "reduce2", 3 * d, 28);
  check_unit(m, "normal1_first", 4 * d + 3 * d, 28); /* packed with reduce2 */
  check_unit(m, n > 2 ? "normal1.0" : "normal1", 8 * d, 28);
  check_unit(m, "reduce3", 6 * d, 14);
  check_unit(m, "normal2_first", 8 * d + 6 * d, 14);
  check_unit(m, "reduce4", 12 * d, 7);
  check_unit(m, "normal3_first", 16 * d + 12 * d, 7);
  check_unit(m, "head", k->classes, 0);
}

static long max_rss_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    printf("usage: %s models/amoebanet-d.yaml\n", argv[0]);
    return 2;
  }
  long rss0 = max_rss_kib();
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    const config *k = &configs[i];
    int image = k->reported > 0 ? 224 : 32;
    clock_t t0 = clock();
    gp_model *m = amoeba_load(argv[1], k->L, k->D, k->classes, image);
    double cpu = (double)(clock() - t0) / CLOCKS_PER_SEC;
    long grew = max_rss_kib() - rss0;
    CHECK(m != NULL, "(%d, %d) does not load", k->L, k->D);
    if (!m) continue;
    CHECK(m->n_params == k->exact,
          "(%d, %d), %d classes: %lld parameters, the specification "
          "gives %lld",
          k->L, k->D, k->classes, (long long)m->n_params, (long long)k->exact);
    if (k->reported > 0) {
      double rel = ((double)m->n_params - k->reported) / k->reported;
      CHECK(rel > -0.01 && rel < 0.01, "(%d, %d): %lld parameters is %.2f%% off %.4g", k->L, k->D,
            (long long)m->n_params, 100 * rel, k->reported);
      check_structure(m, k);
    }
    CHECK(grew < MAX_RSS_GROWTH_KIB, "(%d, %d): the peak RSS grew by %ld KiB since the start", k->L,
          k->D, grew);
    CHECK(cpu < MAX_LOAD_CPU_S, "(%d, %d): loading took %.2f s of CPU", k->L, k->D, cpu);
    printf("(%d, %d) %d classes: %d units, %d layers, %lld parameters; load %.3f s CPU, peak RSS "
           "+%ld KiB since the start\n",
           k->L, k->D, k->classes, m->n_units, m->n_nodes, (long long)m->n_params, cpu, grew);
    gp_model_free(m);
  }
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
