/* Fuzz target for the file parsers (libFuzzer's entry point): the first byte picks the parser
 * — JSON, safetensors, IDX (plain or gzip), a pipeline plan — and the rest is the file. Any
 * bytes must be read or refused with a message, never crash, hang or leak. Also built into
 * test_fuzz_files_corpus, which runs it over deterministic mutations of valid seeds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io/json.h"
#include "core/io/safetensors.h"
#include "core/spec/spec.h"
#include "core/plan/plan_io.h"
#include "data/idx.h"
#include "tests/data/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *plan_model = "name: m\n"
                                "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                "layers:\n"
                                "  - {type: linear, out_features: 4, name: a}\n"
                                "  - {type: relu, name: b}\n"
                                "  - {type: linear, out_features: 3, name: c}\n"
                                "loss: {type: softmax_cross_entropy}\n";

/* A refusal must say something: an empty message is a bug, so crash for the fuzzer. */
static void refused(gp_status s) {
  if (s != GP_OK && gp_error_message()[0] == 0) abort();
}

static gp_status with_file(const uint8_t *d, size_t n, int kind) {
  char path[64];
  if (fuzz_tmp_write("files", d, n, path, sizeof path) != 0) return GP_OK;
  gp_status s = GP_OK;
  if (kind == 1) {
    gp_st_file *f = NULL;
    s = gp_st_read(path, &f);
    if (s == GP_OK) {
      for (int i = 0; i < gp_st_count(f); i++) /* touch every tensor's bytes */
        if (gp_st_data(f, gp_st_entry_at(f, i)) == NULL) abort();
      gp_st_free(f);
    }
  } else if (kind == 2) {
    gp_idx x = {0};
    s = gp_idx_read(path, 0x08, 3, 1000, "image", &x);
    if (s == GP_OK) gp_idx_free(&x);
  } else {
    static gp_model *m;
    if (!m && gp_model_load_string(plan_model, "fuzz.yaml", NULL, 0, &m) != GP_OK) abort();
    gp_plan p;
    s = gp_plan_read(path, m, &p);
  }
  unlink(path);
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  gp_error_clear();
  int kind = data[0] % 4;
  if (kind == 0) {
    gp_json *j = NULL;
    gp_status s = gp_json_parse((const char *)data + 1, size - 1, "fuzz.json", &j);
    refused(s);
    gp_json_free(j);
    return 0;
  }
  refused(with_file(data + 1, size - 1, kind));
  return 0;
}
