/* A test bench for one layer: builds it from a YAML flow mapping the way the spec loader
 * does (parse, find the type, configure, check unknown keys, shape), allocates its
 * parameters, gradients, statistics and batch tensors on a backend with guard bytes after
 * every buffer, and runs forward and backward in a gp_exec with its own arena. */
#ifndef LT_HARNESS_H
#define LT_HARNESS_H

#include <stdint.h>

#include "core/layer.h"
#include "tests/layers/tolerances.h"

typedef struct lt_buf lt_buf;

typedef struct lt_layer {
  gp_layer l;
  gp_layer_bind b; /* l's parameters, gradients and statistics (e.bind points here) */
  gp_cfg *cfg;
  gp_backend *be;
  gp_arena arena;
  gp_exec e;
  int64_t batch;
  gp_tensor in[GP_MAX_INPUTS], din[GP_MAX_INPUTS];
  gp_tensor out, dout;
  void *saved;
  lt_buf *bufs; /* every buffer with guard bytes, for lt_layer_guards */
} lt_layer;

/* Stage 1 (pure): parse, find the type, configure, check unknown keys, shape, as the spec
 * loader does. A type that is not registered gives GP_ERR_UNSUPPORTED ("layer type 'x' is
 * not registered"). */
gp_status lt_layer_configure(lt_layer *t, const char *yaml, int n_in, const gp_shape *in_shapes,
                             const gp_dtype *in_dtypes);
/* The same with the type given (NULL: found by the mapping's type), for test-only types. */
gp_status lt_layer_configure_as(lt_layer *t, const gp_layer_type *type, const char *yaml, int n_in,
                                const gp_shape *in_shapes, const gp_dtype *in_dtypes);
/* Stage 2: parameters (initialized by gp_param_init_host with seed 1), gradients (zero),
 * statistics (zero), inputs (zero), output, dout and din on be for a batch. */
gp_status lt_layer_alloc(lt_layer *t, gp_backend *be, int64_t batch);
/* Both stages. */
gp_status lt_layer_build(lt_layer *t, gp_backend *be, const char *yaml, int n_in,
                         const gp_shape *in_shapes, const gp_dtype *in_dtypes, int64_t batch);
gp_status lt_layer_build_as(lt_layer *t, const gp_layer_type *type, gp_backend *be,
                            const char *yaml, int n_in, const gp_shape *in_shapes,
                            const gp_dtype *in_dtypes, int64_t batch);
void lt_layer_free(lt_layer *t);

/* Resets the arena and loss accumulators, then runs forward into t->out. The mode comes
 * from t->e (training, recompute, step, ...), which lt_layer_alloc sets to training, step 0,
 * loss_count = batch. */
gp_status lt_forward(lt_layer *t);
/* Runs backward from t->dout into t->din (inputs whose din.data is NULL are skipped) and
 * into the parameter gradients. */
gp_status lt_backward(lt_layer *t);
/* One half of it (gp_layer_backward_part): GP_GRAD_INPUT into t->din only, GP_GRAD_WEIGHT
 * into the parameter gradients only. */
gp_status lt_backward_part(lt_layer *t, gp_grad_part part);
/* GP_ERR_RUNTIME naming the first buffer whose guard bytes were overwritten. */
gp_status lt_layer_guards(lt_layer *t);

/* Index of the parameter with this name, or -1. */
int lt_param_index(const lt_layer *t, const char *name);
int64_t lt_param_numel(const lt_layer *t, int i);

/* lt_layer_build that prints "  FAIL build YAML: message" and frees t when it fails;
 * returns 1 when built. */
int lt_build_or_report(lt_layer *t, gp_backend *be, const char *yaml, int n_in,
                       const gp_shape *in_shapes, const gp_dtype *in_dtypes, int64_t batch);
/* Prints "ok   WHAT" or "FAIL WHAT" and counts it in *passed or *failed. */
void lt_tally(int ok, const char *what, int *passed, int *failed);

/* ---- comparisons ---- */

/* 1: comparisons stop printing (the self-tests that expect them to fail). */
void lt_set_quiet(int q);
/* Compares n values; prints the worst offender as "what: max err E at i (got G, want W,
 * tolerance T)" when it fails. Returns 1 when all pass. *max_err (may be NULL) is set. */
int lt_compare(const char *what, const float *got, const double *want, int64_t n, lt_tol_id tol,
               double *max_err);
int lt_compare_f(const char *what, const float *got, const float *want, int64_t n, lt_tol_id tol,
                 double *max_err);

/* ---- random data (a small deterministic generator per test) ---- */
void lt_fill_uniform(uint64_t seed, float *x, int64_t n, float lo, float hi);
/* Values with |x| in [margin, hi], random sign: no kinks within +-margin (relu). */
void lt_fill_away_from_zero(uint64_t seed, float *x, int64_t n, float margin, float hi);
/* A random permutation of an evenly spaced grid with spacing `gap`, centred on 0: all
 * values distinct by at least gap (no ties for max pooling). */
void lt_fill_distinct(uint64_t seed, float *x, int64_t n, float gap);

#endif
