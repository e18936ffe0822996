/* The one table of tolerances the layer tests use (tests/layers/tolerances.c), each entry
 * with the reason it is as large as it is. Checks name an entry; none carries its own. */
#ifndef LT_TOLERANCES_H
#define LT_TOLERANCES_H

typedef enum lt_tol_id {
  LT_TOL_EXACT,      /* copies and data movement: must be bit-identical */
  LT_TOL_ACCUM,      /* backward run twice: param grads must be exactly 2x (+= convention) */
  LT_TOL_FD_LINEAR,  /* finite differences of layers linear in the perturbed value */
  LT_TOL_FD_SMOOTH,  /* finite differences of smooth nonlinear layers (gelu, tanh, ...) */
  LT_TOL_FD_NORM,    /* finite differences through batch/layer normalization statistics */
  LT_TOL_TORCH_FWD,  /* outputs against PyTorch float32 */
  LT_TOL_TORCH_GRAD, /* gradients against PyTorch float32 */
  LT_TOL_TORCH_STAT, /* batchnorm running statistics after step_end against PyTorch */
  LT_TOL_TORCH_LOSS, /* the mini-batch mean loss (loss_sum) against PyTorch */
  LT_TOL_DROPOUT,    /* dropout kept fraction vs 1-p, in binomial standard deviations */
  LT_TOL_SCALE,      /* x / (1 - p) computed as a division or as a product with 1/(1-p) */
  LT_TOL_INIT_BOUND, /* initial weights inside PyTorch's U(-b, b), b = 1/sqrt(fan_in) */
  LT_TOL_TABLE,      /* a table computed in double and rounded, against another formula */
  LT_TOL_MICRO,      /* a mini-batch in micro-batches against the whole (summation order) */
  LT_TOL_TORCH_F64,  /* against a float64 reference: atol times PyTorch's own float32 error */
  LT_TOL_COUNT
} lt_tol_id;

typedef struct lt_tol {
  const char *name;
  double atol, rtol; /* pass iff |got - want| <= atol + rtol * max(|got|, |want|) */
  const char *why;
} lt_tol;

const lt_tol *lt_tol_get(lt_tol_id id);

#endif
