/* What every unit test shares: the check macro, which counts passes and failures and prints
 * each failure with where it is, the condition, a message and the last error (a test declares
 * `static int failures, passes;` and ends with a "N passed, M failed" line), and gp_t_die for
 * a setup step without which the test cannot go on. Built into tests/support's library. */
#ifndef GP_TESTS_SUPPORT_CHECK_H
#define GP_TESTS_SUPPORT_CHECK_H

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

/* Prints "FAIL: what: <the last error>" and exits 1. */
_Noreturn void gp_t_die(const char *what);

#endif
