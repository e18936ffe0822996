/* Fuzz target for the spec loader (libFuzzer's entry point): any bytes must load or be
 * refused with a located message, never crash, hang or leak. Also built into
 * test_spec_fuzz_corpus, which runs it over a deterministic corpus of mutated model files.
 *   clang -fsanitize=fuzzer,address,undefined ... tests/spec/fuzz_spec.c (see meson.build) */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a crash, so that a fuzzer reports it. */
static void invariant(int ok, const char *what, const char *text) {
  if (ok) return;
  fprintf(stderr, "fuzz_spec: invariant broken: %s\nmessage: %s\ninput:\n%s\n", what,
          gp_error_message(), text);
  abort();
}

static void check_model(const gp_model *m, const char *text) {
  invariant(m->n_inputs >= 1 && m->n_inputs <= GP_MAX_MODEL_INPUTS, "n_inputs", text);
  invariant(m->n_units >= 1 && m->n_nodes > m->n_units - 1, "units and nodes", text);
  invariant(m->unit_first[0] == 0 && m->unit_first[m->n_units] == m->n_nodes, "unit_first ends",
            text);
  for (int u = 0; u < m->n_units; u++)
    invariant(m->unit_first[u] < m->unit_first[u + 1], "every unit has a node", text);
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_node *n = &m->nodes[i];
    invariant(n->layer.type && n->layer.path && n->layer.conf, "node fields", text);
    invariant(n->unit >= 0 && n->unit < m->n_units && m->unit_first[n->unit] <= i &&
                  i < m->unit_first[n->unit + 1],
              "node unit", text);
    for (int j = 0; j < n->n_in; j++)
      invariant(n->in[j] >= 0 && n->in[j] < m->n_inputs + i, "inputs come first", text);
  }
  invariant(!strcmp(m->nodes[m->n_nodes - 1].layer.path, "loss"), "loss is last", text);
  invariant(m->output_node >= 0 && m->output_node < m->n_nodes - 1, "output_node", text);
  invariant(m->n_params >= 0, "n_params", text);
}

/* "fuzz.yaml:LINE:COL: what" */
static int located(const char *msg) {
  const char *p = "fuzz.yaml:";
  if (strncmp(msg, p, strlen(p))) return 0;
  msg += strlen(p);
  for (int part = 0; part < 2; part++) {
    if (!isdigit((unsigned char)*msg)) return 0;
    while (isdigit((unsigned char)*msg))
      msg++;
    if (*msg++ != ':') return 0;
  }
  return *msg == ' ' && msg[1];
}

static void run(const char *text, const gp_override *ov, int n_ov) {
  gp_model *m = NULL;
  gp_error_clear();
  gp_status s = gp_model_load_string(text, "fuzz.yaml", ov, n_ov, &m);
  if (s == GP_OK) {
    invariant(m != NULL, "GP_OK gives a model", text);
    check_model(m, text);
    gp_model_free(m);
    return;
  }
  invariant(m == NULL, "a failed load leaves *out NULL", text);
  invariant(s == GP_ERR_SPEC || s == GP_ERR_USAGE || s == GP_ERR_NOMEM, "status kind", text);
  invariant(!strchr(gp_error_message(), '\n'), "one line", text);
  if (s == GP_ERR_SPEC) invariant(located(gp_error_message()), "FILE:LINE:COL: message", text);
  if (s == GP_ERR_USAGE)
    invariant(!strncmp(gp_error_message(), "--set ", 6), "--set message", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  run(text, NULL, 0);
  /* a quarter of the inputs also go through --set, whose paths meet whatever the tree became */
  if (size % 4 == 1) {
    gp_override ov[] = {{"layers.0.name", "z"}, {"train.batch_size", "3"}};
    run(text, ov, 2);
  }
  free(text);
  return 0;
}
