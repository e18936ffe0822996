/* The check macro of the unit tests: counts passes and failures and prints each failure with
 * where it is, the condition, a message and the last error. A test declares
 * `static int failures, passes;` and ends with a "N passed, M failed" line. */
#ifndef GP_TESTS_CHECK_H
#define GP_TESTS_CHECK_H

#include <stdio.h>

#include "core/status.h"

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passes++;                                                                                    \
    } else {                                                                                       \
      failures++;                                                                                  \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                       \
      printf(__VA_ARGS__);                                                                         \
      printf(" [%s]\n", gp_error_message());                                                       \
    }                                                                                              \
  } while (0)

#endif
