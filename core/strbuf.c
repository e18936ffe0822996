/* Growable strings. */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(gp_strbuf *b, size_t extra) {
  if (b->oom) return 0;
  if (b->n + extra + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return 0;
  }
  b->p = p;
  b->cap = cap;
  return 1;
}

void gp_strbuf_put(gp_strbuf *b, const char *s, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void gp_strbuf_str(gp_strbuf *b, const char *s) {
  gp_strbuf_put(b, s, strlen(s));
}

void gp_strbuf_printf(gp_strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0) {
    b->oom = 1;
    return;
  }
  if (!reserve(b, (size_t)k)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)k;
}

void gp_strbuf_free(gp_strbuf *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}
