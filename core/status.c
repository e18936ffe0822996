/* Thread-local error record behind gp_status. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GP_MSG_MAX 1024

static _Thread_local char msg[GP_MSG_MAX];
static _Thread_local char origin[128];

gp_status gp_error_set(gp_status code, const char *src_file, int src_line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(origin, sizeof origin, "%s:%d", src_file, src_line);
  return code;
}

gp_status gp_error_prefix(gp_status code, const char *fmt, ...) {
  char pre[GP_MSG_MAX], old[GP_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, msg, sizeof old);
  size_t k = strlen(pre);
  if (k >= sizeof msg) k = sizeof msg - 1;
  memcpy(msg, pre, k);
  size_t rest = strlen(old);
  if (rest > sizeof msg - 1 - k) rest = sizeof msg - 1 - k;
  memcpy(msg + k, old, rest);
  msg[k + rest] = 0;
  return code;
}

const char *gp_error_message(void) {
  return msg;
}

const char *gp_error_origin(void) {
  return origin;
}

void gp_error_clear(void) {
  msg[0] = 0;
  origin[0] = 0;
}

const char *gp_status_name(gp_status s) {
  static const char *const names[] = {
      "ok",          "usage error",   "model file error",  "data error",
      "i/o error",   "out of memory", "runtime error",     "device error",
      "unsupported", "interrupted",   "device memory full"};
  _Static_assert(sizeof names / sizeof names[0] == GP_STATUS_COUNT, "status names");
  return (unsigned)s < GP_STATUS_COUNT ? names[s] : "unknown status";
}

int gp_status_exit_code(gp_status s) {
  if (s == GP_OK) return 0;
  if (s == GP_ERR_INTERRUPTED) return 130;
  return (s == GP_ERR_USAGE || s == GP_ERR_SPEC) ? 2 : 1;
}
