/* Decimal numbers as model files and flags take them. */
#ifndef GP_DECIMAL_H
#define GP_DECIMAL_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* strtod's reading of s, less its hexadecimal floats ("0x1p-4", "-0X10"), which no one means
 * here as a number: those read nothing (*end = s, 0). Callers check *end and isfinite. */
static inline double gp_decimal(const char *s, char **end) {
  const char *p = s;
  while (isspace((unsigned char)*p))
    p++;
  p += *p == '+' || *p == '-';
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    *end = (char *)s;
    return 0;
  }
  return strtod(s, end);
}

/* d in the fewest significant digits that read back as d (0.05, not %g's rounding that can
 * show two different numbers alike), into buf (32 bytes suffice). */
static inline const char *gp_decimal_shortest(double d, char *buf, size_t n) {
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, d);
    if (strtod(buf, NULL) == d) break;
  }
  return buf;
}

#endif
