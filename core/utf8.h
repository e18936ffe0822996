/* UTF-8 as RFC 3629 has it, for the readers and writers that check or escape text. */
#ifndef GP_UTF8_H
#define GP_UTF8_H

#include <stddef.h>

/* Bytes of the valid UTF-8 sequence at p, of which at most n may be read, with its code point
 * in *cp; 0 where none starts: a byte that cannot lead, a cut sequence, an overlong form, a
 * surrogate, past U+10FFFF. A NUL ends any sequence, so a string needs no n of its own
 * (give 4). */
static inline int gp_utf8_seq(const unsigned char *p, size_t n, unsigned *cp) {
  if (n == 0) return 0;
  if (p[0] < 0x80) {
    *cp = p[0];
    return 1;
  }
  int k = p[0] >= 0xC2 && p[0] <= 0xDF   ? 2
          : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
          : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
                                         : 0;
  if ((size_t)k > n) return 0;
  unsigned lo = p[0] == 0xE0 ? 0xA0 : p[0] == 0xF0 ? 0x90 : 0x80;
  unsigned hi = p[0] == 0xED ? 0x9F : p[0] == 0xF4 ? 0x8F : 0xBF;
  unsigned v = p[0] & (0x7Fu >> k);
  for (int i = 1; i < k; i++) {
    if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF)) return 0;
    v = v << 6 | (p[i] & 0x3Fu);
  }
  *cp = v;
  return k;
}

#endif
