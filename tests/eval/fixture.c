/* Reading the JSON fixtures of the eval tests. */
#include "tests/eval/fixture.h"

#include <stdio.h>
#include <stdlib.h>

gp_json *fx_load(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("FAIL: cannot open %s\n", path);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *p = realloc(buf, cap *= 2);
      if (!p) free(buf);
      buf = p;
    }
  }
  fclose(f);
  gp_json *j = NULL;
  if (!buf || gp_json_parse(buf, n, path, &j) != GP_OK) {
    printf("FAIL: %s: %s\n", path, buf ? gp_error_message() : "out of memory");
    j = NULL;
  }
  free(buf);
  return j;
}

const gp_json *fx_array(const gp_json *j, const char *key, const char *where) {
  const gp_json *a = gp_json_get(j, key);
  if (!a || a->type != GP_JSON_ARRAY) {
    printf("FAIL: %s: no array '%s'\n", where, key);
    return NULL;
  }
  return a;
}
