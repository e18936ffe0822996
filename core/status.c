/* Thread-local error record behind gp_status. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/utf8.h"

#define GP_MSG_MAX 1024

static _Thread_local char msg[GP_MSG_MAX];
static _Thread_local char origin[128];

char *gp_text_one_line(char *out, size_t cap, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t k = 0;
  while (*p) {
    unsigned cp;
    int n = gp_utf8_seq(p, 4, &cp);
    char esc[8];
    const char *piece = esc;
    size_t len;
    if (n == 0) { /* a byte that is not UTF-8: a Latin-1 terminal reads 0x9b as CSI */
      len = (size_t)snprintf(esc, sizeof esc, "\\x%02x", *p);
      n = 1;
    } else if (cp == '\n' || cp == '\t' || cp == '\r') {
      len = (size_t)snprintf(esc, sizeof esc, "\\%c", cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r');
    } else if (cp < 0x20 || cp == 0x7F) {
      len = (size_t)snprintf(esc, sizeof esc, "\\x%02x", cp);
    } else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
               /* bidirectional controls: they reorder the rest of the line as shown */
               cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
               (cp >= 0x2066 && cp <= 0x2069)) {
      len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp);
    } else {
      piece = (const char *)p;
      len = (size_t)n;
    }
    if (k + len >= cap) break;
    memcpy(out + k, piece, len);
    k += len;
    p += n;
  }
  if (cap) out[k] = 0;
  return out;
}

gp_status gp_error_set(gp_status code, const char *src_file, int src_line, const char *fmt, ...) {
  char raw[GP_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  /* a character the cut split is bytes that are not UTF-8 at the end, whose escapes do not
   * fit in what is left of msg: they are dropped */
  gp_text_one_line(msg, sizeof msg, raw);
  snprintf(origin, sizeof origin, "%s:%d", src_file, src_line);
  return code;
}

gp_status gp_error_prefix(gp_status code, const char *fmt, ...) {
  char pre[GP_MSG_MAX], both[2 * GP_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  snprintf(both, sizeof both, "%s%s", pre, msg);
  gp_text_one_line(msg, sizeof msg, both);
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
