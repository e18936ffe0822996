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

/* d as the shortest text that reads back as d, from six significant digits up (0.05, 1e-50,
 * 1234567.8, 0.0500000001: not %g's rounding, which can show two different numbers alike);
 * an integral d below 9e15 as an integer (1000000, not 1e+06). Into buf (32 bytes suffice). */
static inline const char *gp_decimal_shortest(double d, char *buf, size_t n) {
  if (d > -9.0e15 && d < 9.0e15 && d == (double)(long long)d) { /* NaN: no */
    snprintf(buf, n, "%lld", (long long)d);
    return buf;
  }
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, d);
    if (strtod(buf, NULL) == d) break;
  }
  return buf;
}

#endif
