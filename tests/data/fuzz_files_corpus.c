/* Runs the file parsers' fuzz entry point (fuzz_files.c) over a deterministic corpus: valid
 * seeds of each format, every truncation, a changed byte at every position (up to a cap) and
 * random edits. Under ASan/UBSan this is the CI stand-in for a libFuzzer run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/io/safetensors.h"
#include "core/rng.h"
#include "core/spec/spec.h"
#include "core/plan/plan.h"
#include "core/plan/plan_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct buf {
  uint8_t *p;
  size_t n;
} buf;

static buf slurp(const char *path, uint8_t kind) {
  FILE *f = fopen(path, "rb");
  buf b = {malloc(1 << 20), 1};
  b.p[0] = kind;
  if (f) {
    b.n += fread(b.p + 1, 1, (1 << 20) - 1, f);
    fclose(f);
  }
  return b;
}

static buf seed_json(void) {
  const char *t =
      "{\"a\": [1, 2.5e3, -0.25, true, null], \"b\": {\"c\": \"\\u00e9\\n\"}, \"d\": \"x\"}";
  buf b = {malloc(strlen(t) + 1), strlen(t) + 1};
  b.p[0] = 0;
  memcpy(b.p + 1, t, strlen(t));
  return b;
}

static buf seed_safetensors(void) {
  gp_st_writer *w = gp_st_writer_new();
  float v[6] = {1, 2, 3, 4, 5, 6};
  int64_t d[2] = {2, 3}, e = 2;
  gp_shape s1 = gp_shape_of(2, d), s2 = gp_shape_of(1, &e);
  gp_st_add(w, "a.weight", GP_F32, &s1, v);
  gp_st_add(w, "a.bias", GP_F32, &s2, v);
  gp_st_meta_set(w, "format", "pt");
  gp_st_write(w, "/tmp/gp-fuzz-seed.safetensors");
  gp_st_writer_free(w);
  buf b = slurp("/tmp/gp-fuzz-seed.safetensors", 1);
  remove("/tmp/gp-fuzz-seed.safetensors");
  return b;
}

static buf seed_idx(int gz) {
  uint8_t raw[16 + 3 * 4 * 4] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 4};
  for (int i = 16; i < (int)sizeof raw; i++)
    raw[i] = (uint8_t)(i * 7);
  buf b = {malloc(4096), 1};
  b.p[0] = 2;
  if (!gz) {
    memcpy(b.p + 1, raw, sizeof raw);
    b.n += sizeof raw;
    return b;
  }
  gzFile f = gzopen("/tmp/gp-fuzz-seed.idx.gz", "wb");
  gzwrite(f, raw, sizeof raw);
  gzclose(f);
  free(b.p);
  b = slurp("/tmp/gp-fuzz-seed.idx.gz", 2);
  remove("/tmp/gp-fuzz-seed.idx.gz");
  return b;
}

static buf seed_plan(void) {
  static const char *model = "name: m\n"
                             "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                             "layers:\n"
                             "  - {type: linear, out_features: 4, name: a}\n"
                             "  - {type: relu, name: b}\n"
                             "  - {type: linear, out_features: 3, name: c}\n"
                             "loss: {type: softmax_cross_entropy}\n";
  gp_model *m;
  gp_plan p;
  if (gp_model_load_string(model, "m.yaml", NULL, 0, &m) != GP_OK) abort();
  m->pipeline.stages = 2;
  m->pipeline.micro_batches = 2;
  if (gp_plan_make(m, &m->pipeline, &p) != GP_OK) abort();
  gp_plan_write("/tmp/gp-fuzz-seed-plan.yaml", m, &p);
  gp_model_free(m);
  buf b = slurp("/tmp/gp-fuzz-seed-plan.yaml", 3);
  remove("/tmp/gp-fuzz-seed-plan.yaml");
  return b;
}

int main(void) {
  buf seeds[] = {seed_json(), seed_safetensors(), seed_idx(0), seed_idx(1), seed_plan()};
  long runs = 0;
  gp_rng r;
  gp_rng_seed(&r, 11);
  uint8_t *m = malloc(1 << 20);
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    buf s = seeds[i];
    if (s.n < 2) {
      printf("FAIL: seed %zu was not made\n0 passed, 1 failed\n", i);
      return 1;
    }
    for (size_t len = 1; len <= s.n; len += 1 + len / 64, runs++) /* truncations */
      LLVMFuzzerTestOneInput(s.p, len);
    for (size_t pos = 1; pos < s.n && pos < 600; pos++, runs++) { /* a changed byte */
      memcpy(m, s.p, s.n);
      m[pos] ^= (uint8_t)(1 + gp_rng_below(&r, 255));
      LLVMFuzzerTestOneInput(m, s.n);
    }
    for (int k = 0; k < 400; k++, runs++) { /* a few random edits */
      memcpy(m, s.p, s.n);
      for (int e = 0; e < 3; e++)
        m[1 + gp_rng_below(&r, s.n - 1)] = (uint8_t)gp_rng_below(&r, 256);
      LLVMFuzzerTestOneInput(m, s.n);
    }
    free(s.p);
  }
  free(m);
  printf("%ld inputs parsed or refused without a crash\n1 passed, 0 failed\n", runs);
  return 0;
}
