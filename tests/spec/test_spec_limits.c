/* Files built to exhaust memory or time must be refused quickly with an error: "billion
 * laughs" aliases, quadratic merge chains, repeat counts, nested repeats, block expansion
 * that re-reads a large alias per instance, deep nesting, absurd dimensions. Each case also
 * checks the CPU time it took (generous: sanitizer builds are slow), since the point of the
 * limits is that refusing costs next to nothing. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/spec/spec_test.h"

#define H "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
#define LOSS "loss: {type: softmax_cross_entropy}\n"
#define MAX_CPU_S 5.0

typedef struct buf {
  char *s;
  size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) GP_PRINTF(2, 3);
static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = b->cap ? b->cap * 2 : 4096;
    b->s = realloc(b->s, b->cap);
    if (!b->s) abort();
    if (b->n == 0) b->s[0] = 0;
  }
}

static void refused(const char *what, const char *text, const char *const *parts, int n) {
  clock_t t0 = clock();
  gp_t_load_fails(what, text, NULL, 0, GP_ERR_SPEC, parts, n);
  double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
  CHECK(s < MAX_CPU_S, "%s: took %.2f s of CPU to refuse", what, s);
  if (getenv("GP_T_VERBOSE")) printf("%-40s %.3f s\n", what, s);
}

/* Ten levels of ten aliases each: 10^10 nodes if expanded. */
static void billion_laughs(void) {
  buf b = {0};
  put(&b,
      H "layers:\n  - {type: relu, a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]}\n");
  for (int i = 1; i < 10; i++) {
    put(&b, "  - {type: relu, a%d: &a%d [", i, i);
    for (int j = 0; j < 10; j++)
      put(&b, "%s*a%d", j ? ", " : "", i - 1);
    put(&b, "]}\n");
  }
  put(&b, LOSS);
  static const char *const parts[] = {"t.yaml:8:", "expands to more than 1000000 YAML nodes"};
  refused("billion laughs", b.s, parts, 2);
  /* the same bomb through merge keys */
  b.n = 0;
  put(&b, H "layers:\n  - &m0 {type: relu, k0: 1}\n");
  for (int i = 1; i < 40; i++)
    put(&b, "  - &m%d {<<: [*m%d, *m%d], k%d: 1, x%d: [*m%d, *m%d]}\n", i, i - 1, i - 1, i, i,
        i - 1, i - 1);
  put(&b, LOSS);
  static const char *const parts2[] = {"t.yaml:", "expands to more than 1000000 YAML nodes"};
  refused("billion laughs with merge keys", b.s, parts2, 2);
  free(b.s);
}

/* Each mapping merges the previous one and adds a key: n^2/2 pairs for n mappings. */
static void merge_chain(void) {
  buf b = {0};
  put(&b, H "layers:\n  - &m0 {type: relu, k0: 1}\n");
  for (int i = 1; i < 3000; i++)
    put(&b, "  - &m%d {<<: *m%d, k%d: 1}\n", i, i - 1, i);
  put(&b, LOSS);
  static const char *const parts[] = {"t.yaml:", "expands to more than 1000000 YAML nodes"};
  refused("quadratic merge chain", b.s, parts, 2);
  free(b.s);
}

static void repeats(void) {
  static const char *const p1[] = {"t.yaml:2:31: ",
                                   "repeat: 1000000000 is more than the limit of 10000"};
  refused("repeat 1e9", H "layers: [{type: relu, repeat: 1000000000}]\n" LOSS, p1, 2);
  static const char *const p2[] = {"t.yaml:2:31: ", "more than the limit"};
  refused("repeat beyond int64", H "layers: [{type: relu, repeat: 99999999999999999999999}]\n" LOSS,
          p2, 2);
  /* 10^4 copies of a block of 10^4 layers: refused after the first copy */
  static const char *const p3[] = {"t.yaml:4:29: ",
                                   "repeat: 10000 copies of 10000 layers make more than 100000"};
  refused("nested repeat",
          H "blocks:\n  b: {layers: [{type: relu, repeat: 10000}]}\n"
            "layers: [{block: b, repeat: 10000}]\n" LOSS,
          p3, 2);
  /* the same through three levels, each within the repeat limit */
  static const char *const p4[] = {"t.yaml:", "make more than 100000 layers"};
  refused("three levels of repeat",
          H "blocks:\n  a: {layers: [{type: relu, repeat: 100}]}\n"
            "  b: {layers: [{block: a, repeat: 100}]}\n"
            "layers: [{block: b, repeat: 100}]\n" LOSS,
          p4, 2);
}

/* A block entry that carries a large alias is re-read for every instance. */
static void expansion_reads(void) {
  buf b = {0};
  put(&b, H "blocks:\n"
            "  inner: {params: {junk: 0}, layers: [{type: relu}]}\n"
            "  outer: {layers: [{block: inner, junk: &big [");
  for (int i = 0; i < 2000; i++)
    put(&b, "%s%d", i ? ", " : "", i);
  put(&b, "]}, {block: inner, junk: *big}, {block: inner, junk: *big}]}\n"
          "layers: [{block: outer, repeat: 10000}]\n" LOSS);
  static const char *const parts[] = {"t.yaml:", "expanding the blocks reads more than"};
  refused("expansion re-reads", b.s, parts, 2);
  free(b.s);
}

static void nesting(void) {
  buf b = {0};
  put(&b, H "layers: [{type: relu}]\n" LOSS "train: {a: ");
  for (int i = 0; i < 1000000; i++)
    put(&b, "[");
  for (int i = 0; i < 1000000; i++)
    put(&b, "]");
  put(&b, "}\n");
  static const char *const parts[] = {"t.yaml:4:", "nested more than 64 levels deep"};
  refused("deep nesting", b.s, parts, 2);
  b.n = 0;
  put(&b, H "layers: [{type: linear, out_features: '${");
  for (int i = 0; i < 5000; i++)
    put(&b, "(");
  put(&b, "1");
  for (int i = 0; i < 5000; i++)
    put(&b, ")");
  put(&b, "}'}]\n" LOSS);
  static const char *const p2[] = {"t.yaml:2:39: ", "parentheses nested too deep"};
  refused("deep expression", b.s, p2, 2);
  b.n = 0;
  put(&b, H "layers: [{type: linear, out_features: '${");
  for (int i = 0; i < 5000; i++)
    put(&b, "-");
  put(&b, "1}'}]\n" LOSS);
  static const char *const p3[] = {"t.yaml:2:39: ", "too many signs"};
  refused("many signs", b.s, p3, 2);
  /* a long chain of blocks, each using the next: refused by depth, not by the C stack */
  b.n = 0;
  put(&b, H "blocks:\n");
  for (int i = 0; i < 200; i++)
    put(&b, "  b%d: {layers: [{block: b%d}]}\n", i, i + 1);
  put(&b, "  b200: {layers: [{type: relu}]}\nlayers: [{block: b0}]\n" LOSS);
  static const char *const p4[] = {"t.yaml:", "blocks nested more than 64 deep"};
  refused("block chain", b.s, p4, 2);
  free(b.s);
}

/* A flat list of a million and one scalars: refused by counting while parsing. */
static void many_nodes(void) {
  buf b = {0};
  put(&b, H "layers: [{type: relu}]\n" LOSS "train: {a: [");
  for (int i = 0; i <= 1000000; i++)
    put(&b, "%s", i ? ",0" : "0");
  put(&b, "]}\n");
  static const char *const parts[] = {"t.yaml:4:", "more than 1000000 YAML nodes"};
  refused("a million nodes", b.s, parts, 2);
  free(b.s);
}

/* Lookups in one mapping are linear, so its size is bounded. */
static void many_keys(void) {
  buf b = {0};
  put(&b, H "layers:\n  - {type: relu");
  for (int i = 0; i < 300; i++)
    put(&b, ", k%d: 0", i);
  put(&b, "}\n" LOSS);
  static const char *const parts[] = {"t.yaml:3:5: ", "301 settings in one mapping; at most 256"};
  refused("a layer with 300 keys", b.s, parts, 2);
  b.n = 0;
  put(&b, H "blocks: {b: {layers: [{type: relu}]}}\nlayers:\n  - {block: b");
  for (int i = 0; i < 300; i++)
    put(&b, ", k%d: 0", i);
  put(&b, "}\n" LOSS);
  static const char *const p2[] = {"t.yaml:4:5: ", "301 keys in one block entry; at most 256"};
  refused("a block entry with 300 keys", b.s, p2, 2);
  free(b.s);
}

static void dims(void) {
  static const char *const p1[] = {"t.yaml:1:13: ", "has more than 1099511627776 elements"};
  refused("absurd input dims",
          "inputs: {x: [1000000000, 1000000000, 1000000000], label: {shape: [], dtype: i32}}\n"
          "layers: [{type: flatten}, {type: linear, out_features: 2}]\n" LOSS,
          p1, 2);
  static const char *const p2[] = {"t.yaml:2:10: ", "more than"};
  refused("absurd output dims",
          "inputs: {x: [1048576, 1048576], label: {shape: [], dtype: i32}}\n"
          "layers: [{type: linear, out_features: 1048577}]\n" LOSS,
          p2, 2);
}

/* A file past the limit is read no further than needed, and its size is not guessed. */
static void big_file(void) {
  char path[] = "/tmp/gp_spec_big_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  CHECK(ftruncate(fd, (off_t)40 << 20) == 0, "ftruncate"); /* sparse: 40 MiB of NUL bytes */
  close(fd);
  gp_model *m = NULL;
  clock_t t0 = clock();
  gp_status s = gp_model_load(path, NULL, 0, &m);
  double cpu = (double)(clock() - t0) / CLOCKS_PER_SEC;
  const char *msg = gp_error_message();
  CHECK(s == GP_ERR_SPEC && !m, "a 40 MiB file: %s %s", gp_status_name(s), msg);
  CHECK(strstr(msg, ":1:1: the file has more than 16777216 bytes"), "a 40 MiB file: %s", msg);
  CHECK(cpu < MAX_CPU_S, "a 40 MiB file: took %.2f s of CPU to refuse", cpu);
  gp_model_free(m);
  remove(path);
}

int main(void) {
  billion_laughs();
  merge_chain();
  repeats();
  expansion_reads();
  nesting();
  many_nodes();
  many_keys();
  dims();
  big_file();
  return gp_t_finish("spec limits");
}
