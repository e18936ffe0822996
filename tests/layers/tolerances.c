/* The tolerance table of the layer tests: one row per kind of comparison, with its reason. */
#include "tests/layers/tolerances.h"

static const lt_tol table[] = {
    [LT_TOL_EXACT] = {"exact", 0.0, 0.0,
                      "identity, flatten, pad, concat, dropout at p = 0 and eval mode only move "
                      "or scale floats by 1: any difference is a bug"},
    [LT_TOL_ACCUM] = {"accum", 0.0, 1e-6,
                      "g + g is exactly 2g in float, but a backend may accumulate through GEMM "
                      "with beta = 1 whose blocking can change the rounding by an ulp or so"},
    [LT_TOL_FD_LINEAR] = {"fd_linear", 5e-4, 5e-3,
                          "central differences with h = 1e-2 on f32 outputs: no truncation error "
                          "for maps linear in the perturbed value, but the objective carries the "
                          "f32 rounding of every touched output (~1e-6) divided by 2h; observed "
                          "at most 6e-5 (conv2d), so a 10x margin"},
    [LT_TOL_FD_SMOOTH] = {"fd_smooth", 1e-3, 1e-2,
                          "as fd_linear plus the truncation error h^2/6 f''' (~2e-5 times the "
                          "third derivative, a few units at most for gelu/tanh/softmax); "
                          "observed at most 3e-5, except attention with dim 12 and weights in "
                          "[-1, 1]: scores of several units make the softmax's third "
                          "derivative large; observed 7e-3 there, within the bound"},
    [LT_TOL_FD_NORM] = {"fd_norm", 1e-3, 1e-2,
                        "normalization divides by a standard deviation of few samples: the "
                        "rounding of x - mean is amplified by invstd and var^-1/2 has a large "
                        "third derivative; observed at most 3e-5"},
    [LT_TOL_TORCH_FWD] = {"torch_fwd", 1e-5, 1e-4,
                          "both sides float32; PyTorch (MKL/oneDNN) and OpenBLAS sum dot "
                          "products in different orders: a few ulp times sqrt(terms)"},
    [LT_TOL_TORCH_GRAD] = {"torch_grad", 3e-5, 3e-4,
                           "gradients sum over the batch and spatial positions (up to a few "
                           "hundred terms) in different orders than PyTorch"},
    [LT_TOL_TORCH_STAT] = {"torch_stat", 1e-5, 1e-4,
                           "running variance goes through invstd and back (1/invstd^2 - eps) "
                           "and the n/(n-1) correction: a few ulp"},
    [LT_TOL_TORCH_LOSS] = {"torch_loss", 1e-6, 1e-5,
                           "loss_sum is accumulated in double from f32 per-sample losses"},
    [LT_TOL_DROPOUT] = {"dropout_sigma", 5.0, 0.0,
                        "dropout cannot match PyTorch's RNG, so its kept fraction is tested "
                        "statistically: within 5 binomial standard deviations of 1 - p "
                        "(a false failure about once in 3.5 million seeds; the seed is fixed)"},
    [LT_TOL_SCALE] = {"scale", 0.0, 2.5e-7,
                      "inverted dropout may multiply by a rounded 1/(1-p) or divide by (1-p): "
                      "the two differ by up to 2 ulp (2^-23 = 1.2e-7 relative each)"},
    [LT_TOL_INIT_BOUND] = {"init_bound", 0.0, 1e-6,
                           "b is computed in double and the draws (2u - 1) b in float, so a "
                           "draw may exceed the double b by an ulp"},
    [LT_TOL_TABLE] = {"table", 1e-7, 1.2e-7,
                      "the sinusoidal table is computed in double and rounded once; another "
                      "double formula (pow instead of exp/log) may round the other way: 1 ulp"},
    [LT_TOL_MICRO] = {"micro", 1e-6, 1e-5,
                      "the same samples as a whole mini-batch or as micro-batches: parameter "
                      "gradients sum the same terms in another order (the dropout masks must "
                      "be the same, or errors are of order 1)"},
    [LT_TOL_TORCH_F64] = {"torch_f64", 1.25, 1e-6,
                          "atol is a factor, not a distance: where float32 rounding is large "
                          "(inputs whose mean is 1e3 to 1e5 times their spread) the fixture's "
                          "reference is float64, and ours may be at most 1.25 times as far from "
                          "it as PyTorch's own float32 result (its error is stored with it): as "
                          "accurate as PyTorch, give or take summation order where both are at "
                          "the limit (batch norm's dx at spread 1e-2: 0.0158 and 0.0157; "
                          "elsewhere ours is 0.1 to 0.7 of PyTorch's), plus rtol, a few ulp of "
                          "the value: a sum of a few terms (a bias gradient) may round to the "
                          "other neighbour"},
};

_Static_assert(sizeof table / sizeof table[0] == LT_TOL_COUNT, "one tolerance per id");

const lt_tol *lt_tol_get(lt_tol_id id) {
  return &table[id];
}
