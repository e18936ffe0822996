// be->linear_act_forward on cuBLASLt: y = x w^T + bias and its activation in one GEMM's
// epilogue, so the bias add and the activation do not read and write the output again.
// ReLU: RELU_BIAS writes relu(y) alone (the fused node runs it in place: ReLU's backward reads
// its mask from the output). GELU tanh: GELU_AUX_BIAS writes gelu(y) and keeps y (the aux
// output) for the backward. GELU (erf): cuBLASLt's GELU is the tanh form, so the epilogue adds
// the bias alone and the activation runs after it. Arithmetic as cuda_gemm's: fp32 with
// CUBLAS_COMPUTE_32F (no TF32), bf16 and bf16-mixed with the operands rounded by bf16.cu's
// kernels and f32 accumulation and output.
#include <climits>
#include <cublasLt.h>

#include "core/cuda/bf16.h"
#include "core/cuda/fused.h"
#include "core/cuda/ops.h"

namespace {

// cuBLASLt's workspace: what NVIDIA suggests for Hopper's kernels (32 MiB).
constexpr size_t LT_WORKSPACE = (size_t)32 << 20;

struct lt_call {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~lt_call() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two up to 256 that divides the address (the heuristic must know it).
uint32_t alignment(const void *p) {
  uint32_t al = 256;
  while (al > 1 && ((uintptr_t)p % al))
    al >>= 1;
  return al;
}

} // namespace

void gp_cuda_lt_release(gp_backend *be) {
  gp_cuda_impl *c = gp_cuda_of(be);
  if (c && c->lt) (void)cublasLtDestroy((cublasLtHandle_t)c->lt);
  if (c) c->lt = nullptr;
}

gp_status gp_cuda_lt_linear_act(gp_backend *be, gp_activation act, int64_t rows, int64_t n,
                                int64_t k, const float *x, const float *w, const float *bias,
                                float *pre, float *z, int *taken) {
  *taken = 0;
  if (act != GP_ACTIVATION_RELU && act != GP_ACTIVATION_GELU && act != GP_ACTIVATION_GELU_TANH)
    return GP_OK;
  if (rows <= 0 || n <= 0 || k <= 0 || rows > INT_MAX || n > INT_MAX || k > INT_MAX) return GP_OK;
  // ReLU's epilogue writes its output alone: only in place; GELU's aux output's leading
  // dimension must be a multiple of 8
  if (act == GP_ACTIVATION_RELU && pre != z) return GP_OK;
  if (act == GP_ACTIVATION_GELU_TANH && n % 8) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  const int bf16 = be->precision != GP_PREC_FP32;
  const void *A = w, *B = x;
  void *ws = nullptr;
  if (bf16) { // packed bf16 copies of w and x, then the workspace (as bf16 "results")
    void *bw = nullptr, *bx = nullptr;
    GP_TRY(gp_cuda_bf16_operands(be, w, n * k, x, rows * k, (int64_t)(LT_WORKSPACE / 2), &bw, &bx,
                                 &ws));
    A = bw;
    B = bx;
  } else {
    GP_TRY(gp_cuda_workspace(be, LT_WORKSPACE, &ws));
  }
  float *d_out = act == GP_ACTIVATION_GELU ? pre : z;
  const cudaDataType_t in_t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // Row-major to column-major as cuda_gemm: the row-major [rows, n] output is D, n x rows
  // column-major; A is w read as k x n column-major, transposed; B is x read as k x rows.
  lt_call c;
  GP_CUBLAS_TRY(cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  GP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  GP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi;
  if (act == GP_ACTIVATION_RELU)
    epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (act == GP_ACTIVATION_GELU_TANH)
    epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else
    epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  GP_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias)
    GP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof bias));
  if (act == GP_ACTIVATION_GELU_TANH) {
    const int64_t ld = n;
    GP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                 &pre, sizeof pre));
    GP_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  GP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.a, in_t, (uint64_t)k, (uint64_t)n, k));
  GP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.b, in_t, (uint64_t)k, (uint64_t)rows, k));
  GP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, (uint64_t)n, (uint64_t)rows, n));
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&c.pref));
  const uint64_t wsb = LT_WORKSPACE;
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
      c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  const uint32_t al_a = alignment(A), al_b = alignment(B), al_d = alignment(d_out);
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
      c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
      c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
      c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  GP_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
      c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  if (!gp_cuda_of(be)->lt) { // the instance's own (a cuBLASLt handle has no stream or device)
    cublasLtHandle_t h = nullptr;
    GP_CUBLAS_TRY(cublasLtCreate(&h));
    gp_cuda_of(be)->lt = h;
  }
  cublasLtHandle_t lt = (cublasLtHandle_t)gp_cuda_of(be)->lt;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt, c.op, c.a, c.b, c.d, c.d, c.pref, 1, &heur, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found < 1)
    return GP_OK; // no kernel for this shape or alignment: the caller composes
  const float one = 1.0f, zero = 0.0f;
  GP_CUBLAS_TRY(cublasLtMatmul(lt, c.op, &one, A, c.a, B, c.b, &zero, d_out, c.d, d_out, c.d,
                               &heur.algo, ws, LT_WORKSPACE, gp_cuda_of(be)->stream));
  if (act == GP_ACTIVATION_GELU) GP_TRY(gp_cuda_act_forward(be, act, rows * n, pre, z));
  *taken = 1;
  return GP_OK;
}
