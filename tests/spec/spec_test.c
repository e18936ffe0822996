/* Helpers shared by the spec loader's tests. */
#include "tests/spec/spec_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gp_t_failures, gp_t_passes;

void gp_t_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  va_list ap;
  printf("FAIL %s:%d: %s: ", file, line, cond);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  gp_t_failures++;
}

gp_model *gp_t_load(const char *what, const char *text, const gp_override *ov, int n_ov) {
  gp_model *m = NULL;
  gp_status s = gp_model_load_string(text, "t.yaml", ov, n_ov, &m);
  if (s != GP_OK) {
    gp_t_fail(__FILE__, __LINE__, what, "expected it to load, got %s: %s", gp_status_name(s),
              gp_error_message());
    return NULL;
  }
  if (!m) gp_t_fail(__FILE__, __LINE__, what, "GP_OK but no model");
  gp_t_passes += m != NULL;
  return m;
}

int gp_t_load_fails(const char *what, const char *text, const gp_override *ov, int n_ov,
                    gp_status code, const char *const *parts, int n_parts) {
  gp_model *m = (gp_model *)1;
  gp_error_clear();
  gp_status s = gp_model_load_string(text, "t.yaml", ov, n_ov, &m);
  const char *msg = gp_error_message();
  int ok = 1;
  if (getenv("GP_T_VERBOSE")) printf("%-40s %s\n", what, msg);
  if (s != code) {
    gp_t_fail(__FILE__, __LINE__, what, "expected status '%s', got '%s' (%s)", gp_status_name(code),
              gp_status_name(s), msg);
    ok = 0;
  }
  if (s != GP_OK && m != NULL) {
    gp_t_fail(__FILE__, __LINE__, what, "a failed load must leave *out NULL");
    ok = 0;
  }
  if (s == GP_OK) gp_model_free(m);
  const char *at = msg;
  for (int i = 0; ok && i < n_parts; i++) {
    if (!parts[i]) continue;
    const char *hit = strstr(at, parts[i]);
    if (!hit) {
      gp_t_fail(__FILE__, __LINE__, what, "message lacks \"%s\" (in order): %s", parts[i], msg);
      ok = 0;
    } else {
      at = hit + strlen(parts[i]);
    }
  }
  if (ok && strchr(msg, '\n'))
    gp_t_fail(__FILE__, __LINE__, what, "message has more than one line: %s", msg), ok = 0;
  gp_t_passes += ok;
  return ok;
}

int gp_t_node(const gp_model *m, const char *path) {
  for (int i = 0; i < m->n_nodes; i++)
    if (!strcmp(m->nodes[i].layer.path, path)) return i;
  gp_t_fail(__FILE__, __LINE__, path, "no node with this path");
  return -1;
}

const char *gp_t_out(const gp_model *m, int node, char *buf, int n) {
  if (node < 0 || node >= m->n_nodes) return "(no node)";
  return gp_shape_str(&m->nodes[node].layer.out_shape, buf, (size_t)n);
}

int gp_t_finish(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, gp_t_passes, gp_t_failures);
  return gp_t_failures ? 1 : 0;
}
