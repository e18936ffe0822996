/* The harness of the CUDA backend tests: a CPU and a CUDA backend side by side, buffers
 * with guard bytes on either, deterministic random inputs and the comparison (normalized
 * MSE, NaN/Inf agreement) of a CUDA result against the CPU reference. Plain C; usable
 * whether or not the build has CUDA (cc_open then says "skip"). */
#ifndef GP_TESTS_CUDA_CHECK_H
#define GP_TESTS_CUDA_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

/* Exit code of a skipped test (meson, automake). */
#define CC_SKIP 77
/* Bytes of guard before and after every buffer (a multiple of 64, so the payload keeps the
 * 64-byte alignment of the allocation). */
#define CC_GUARD_BYTES 256
/* The guard (and initial payload) pattern: a float NaN with a recognizable payload, so an
 * output element an op forgot to write shows up as a NaN in the comparison. */
#define CC_SENTINEL 0x7fa5a5a5u

typedef struct cc_ctx {
  gp_backend *cpu, *gpu;
} cc_ctx;

/* 0: both backends ready (CUDA device 0, CPU with 1 thread); CC_SKIP: no CUDA device (or no
 * CUDA in this build), message printed; 1: creating a backend failed, message printed. */
int cc_open(cc_ctx *c);
void cc_close(cc_ctx *c);

/* Deterministic host fills (splitmix64 of seed and index; independent of the library RNG). */
void cc_fill_uniform(float *h, int64_t n, uint64_t seed, float lo, float hi);
void cc_fill_normal(float *h, int64_t n, uint64_t seed, float stddev);
void cc_fill_int(int32_t *h, int64_t n, uint64_t seed, int32_t lo, int32_t hi); /* [lo, hi) */

/* A buffer on one backend with CC_GUARD_BYTES of sentinel on each side; p is the payload. */
typedef struct cc_buf {
  gp_backend *be;
  void *base;
  void *p;
  size_t bytes;
} cc_buf;

/* Allocates, fills guards and payload with CC_SENTINEL, then (host != NULL) uploads host
 * (bytes of it) into the payload. */
gp_status cc_buf_alloc(gp_backend *be, size_t bytes, const void *host, cc_buf *b);
gp_status cc_buf_upload(cc_buf *b, const void *host, size_t bytes);
gp_status cc_buf_download(const cc_buf *b, void *host, size_t bytes); /* synchronous */
/* 1 when both guards still hold the sentinel; 0 (message printed) when not or on error. */
int cc_buf_guards_ok(const cc_buf *b, const char *what);
void cc_buf_free(cc_buf *b);

/* The same buffer on both backends, with the same initial content. */
typedef struct cc_pair {
  cc_buf cpu, gpu;
  size_t bytes;
} cc_pair;

gp_status cc_pair_alloc(cc_ctx *c, size_t bytes, const void *host, cc_pair *p);
gp_status cc_pair_upload(cc_pair *p, const void *host);
void cc_pair_free(cc_pair *p);
/* Downloads n floats of both, compares them (cc_compare) and checks all four guards. */
int cc_pair_compare(const cc_pair *p, const char *what, int64_t n, double tol);
/* Byte-for-byte comparison (integer outputs, exact ops) and the guards. */
int cc_pair_equal(const cc_pair *p, const char *what);

/* Normalized MSE: sum (ref - got)^2 / sum ref^2 over the positions where both are finite (the
 * plain sum of squared differences when ref is all zero there). */
double cc_nmse(const float *ref, const float *got, int64_t n);
/* Positions where ref and got disagree on being NaN, +Inf or -Inf. */
int64_t cc_nonfinite_mismatches(const float *ref, const float *got, int64_t n);
/* 1 when nmse <= tol and NaN/Inf agree; 0 and a line naming what, the numbers and the first
 * differing element otherwise. */
int cc_compare(const char *what, const float *ref, const float *got, int64_t n, double tol);

#endif
