/* Decimal numbers as model files and flags take them. */
#ifndef GP_DECIMAL_H
#define GP_DECIMAL_H

#include <ctype.h>
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

#endif
