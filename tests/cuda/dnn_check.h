/* What the dnn-family CUDA tests share (test_cuda_dnn.c, test_cuda_norm.c): the CPU and
 * GPU pointers of a pair, BOTH (a call on each backend, both checked), host buffers and
 * pairs that end the test when they cannot be had, a pair compared, an error expected. A
 * file includes it after its `static int failures, passes;` (CHECK counts there). */
#ifndef GP_TEST_DNN_CHECK_H
#define GP_TEST_DNN_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/cuda_check.h"
#include "tests/support/check.h"

#define CPUF(q) ((float *)(q).cpu.p)
#define GPUF(q) ((float *)(q).gpu.p)
#define CPUI(q) ((int32_t *)(q).cpu.p)
#define GPUI(q) ((int32_t *)(q).gpu.p)
/* Inside BOTH: the pointer of the side being run. */
#define F(q) (side_ ? GPUF(q) : CPUF(q))
#define I(q) (side_ ? GPUI(q) : CPUI(q))
/* Runs `call` on the CPU (be = cpu, F/I the CPU buffers), then on CUDA; checks both succeed. */
#define BOTH(c, call)                                                                              \
  do {                                                                                             \
    for (int side_ = 0; side_ < 2; side_++) {                                                      \
      gp_backend *be = side_ ? (c)->gpu : (c)->cpu;                                                \
      gp_status s_ = (call);                                                                       \
      CHECK(s_ == GP_OK, "%s on %s", #call, be->name);                                             \
    }                                                                                              \
  } while (0)

static inline void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("out of host memory\n");
    exit(1);
  }
  return p;
}

static inline float *normal(int64_t n, uint64_t seed, float sd, float mean) {
  float *h = xmalloc((size_t)n * sizeof(float));
  cc_fill_normal(h, n, seed, sd);
  for (int64_t i = 0; i < n; i++)
    h[i] += mean;
  return h;
}

static inline int32_t *ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi) {
  int32_t *h = xmalloc((size_t)n * sizeof(int32_t));
  cc_fill_int(h, n, seed, lo, hi);
  return h;
}

/* Allocates a pair (host NULL: sentinel payload) or ends the test. */
static inline void mk(cc_ctx *c, cc_pair *p, size_t bytes, const void *host) {
  if (cc_pair_alloc(c, bytes, host, p) != GP_OK) {
    printf("allocating %zu bytes failed: %s\n", bytes, gp_error_message());
    exit(1);
  }
}

static inline void cmp(const cc_pair *p, const char *what, int64_t n, double tol) {
  CHECK(cc_pair_compare(p, what, n, tol), "%s", what);
}

/* The CUDA side of a call failed with `code` and a message containing `text`. */
static inline void expect_error(gp_status s, gp_status code, const char *text, const char *what) {
  CHECK(s == code, "%s: %s instead of %s", what, gp_status_name(s), gp_status_name(code));
  CHECK(strstr(gp_error_message(), text) != NULL, "%s: message lacks \"%s\"", what, text);
}

#endif
