/* A growable string for building text (JSON headers, YAML plans). Appends never fail on the
 * spot: running out of memory sets oom, which the caller checks once at the end. */
#ifndef GP_STRBUF_H
#define GP_STRBUF_H

#include <stddef.h>

#include "core/status.h"

typedef struct gp_strbuf {
  char *p; /* NUL-terminated once anything was appended */
  size_t n, cap;
  int oom;
} gp_strbuf;

void gp_strbuf_put(gp_strbuf *b, const char *s, size_t n);
void gp_strbuf_str(gp_strbuf *b, const char *s);
void gp_strbuf_printf(gp_strbuf *b, const char *fmt, ...) GP_PRINTF(2, 3);
void gp_strbuf_free(gp_strbuf *b);

#endif
