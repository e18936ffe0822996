// The CUDA backend: instance state, error checking, memory and ordering on the instance's
// stream, GEMM through cuBLAS and the op table (element-wise ops in kernels.cu, bias and
// reductions in reduce.cu, the cuDNN-family ops in dnn.cu).
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/cuda/bf16.h"
#include "core/cuda/kv.h"
#include "core/cuda/fused.h"
#include "core/cuda/ops.h"

namespace {

struct mem_entry {
  void *p; // NULL: empty slot
  size_t bytes;
};

// gp_backend.impl points here; the public part comes first so gp_cuda_of (a cast to
// gp_cuda_impl *) sees it.
struct cuda_state {
  gp_cuda_impl pub;
  int sms;  // multiprocessors, for grid sizes
  void *ws; // reduction workspace (gp_cuda_workspace), grown on demand
  size_t ws_bytes;
  void *host_result; // pinned, 64 bytes
  int dnn_installed; // gp_cuda_dnn_install was called: release from destroy
  // The size of every live device allocation (cudaFree does not tell it), so free can keep
  // gp_backend.mem_used: open addressing by pointer, linear probing, at most half full.
  mem_entry *mem;
  size_t mem_cap, mem_count;
};
static_assert(offsetof(cuda_state, pub) == 0, "gp_cuda_of casts impl to gp_cuda_impl");

cuda_state *state_of(gp_backend *be) {
  return (cuda_state *)be->impl;
}

// cudaMalloc has no zero-size allocation; the interface promises a valid pointer.
const size_t MIN_ALLOC = 256;

size_t mem_home(const void *p, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull; // Fibonacci hashing
  return (size_t)(h >> 32) & (cap - 1);
}

// Records p; false only when the table cannot grow (out of host memory).
bool mem_put(cuda_state *st, void *p, size_t bytes) {
  if ((st->mem_count + 1) * 2 > st->mem_cap) {
    size_t cap = st->mem_cap ? st->mem_cap * 2 : 64;
    mem_entry *t = (mem_entry *)calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < st->mem_cap; i++)
      if (st->mem[i].p) {
        size_t j = mem_home(st->mem[i].p, cap);
        while (t[j].p)
          j = (j + 1) & (cap - 1);
        t[j] = st->mem[i];
      }
    free(st->mem);
    st->mem = t;
    st->mem_cap = cap;
  }
  size_t i = mem_home(p, st->mem_cap);
  while (st->mem[i].p)
    i = (i + 1) & (st->mem_cap - 1);
  st->mem[i].p = p;
  st->mem[i].bytes = bytes;
  st->mem_count++;
  return true;
}

// Forgets p and returns its size (0 for a pointer this instance did not allocate).
size_t mem_take(cuda_state *st, void *p) {
  if (!st->mem_cap) return 0;
  const size_t mask = st->mem_cap - 1;
  size_t i = mem_home(p, st->mem_cap);
  while (st->mem[i].p && st->mem[i].p != p)
    i = (i + 1) & mask;
  if (!st->mem[i].p) return 0;
  size_t bytes = st->mem[i].bytes;
  st->mem[i].p = NULL;
  st->mem_count--;
  // Backward-shift deletion: move later entries of the run whose home is not in (i, j] into
  // the hole, so lookups never stop early at it.
  for (size_t j = (i + 1) & mask; st->mem[j].p; j = (j + 1) & mask) {
    size_t k = mem_home(st->mem[j].p, st->mem_cap);
    if (((j - k) & mask) >= ((j - i) & mask)) {
      st->mem[i] = st->mem[j];
      st->mem[j].p = NULL;
      i = j;
    }
  }
  return bytes;
}

} // namespace

gp_status gp_cuda_check(cudaError_t e, const char *what, const char *file, int line) {
  if (e == cudaSuccess) return GP_OK;
  return gp_error_set(GP_ERR_RUNTIME, file, line, "%s: %s (%s:%d)", what, cudaGetErrorString(e),
                      file, line);
}

gp_status gp_cublas_check(cublasStatus_t e, const char *what, const char *file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return GP_OK;
  return gp_error_set(GP_ERR_RUNTIME, file, line, "%s: %s (%s:%d)", what, cublasGetStatusString(e),
                      file, line);
}

gp_status gp_cudnn_check(cudnnStatus_t e, const char *what, const char *file, int line) {
  if (e == CUDNN_STATUS_SUCCESS) return GP_OK;
  return gp_error_set(GP_ERR_RUNTIME, file, line, "%s: %s (%s:%d)", what, cudnnGetErrorString(e),
                      file, line);
}

gp_status gp_cuda_use(gp_backend *be) {
  int cur = -1;
  GP_CUDA_TRY(cudaGetDevice(&cur));
  if (cur != be->device) GP_CUDA_TRY(cudaSetDevice(be->device));
  return GP_OK;
}

unsigned gp_cuda_blocks(gp_backend *be, int64_t n) {
  // Enough blocks to fill every multiprocessor several times; the grid-stride loops of the
  // kernels cover the rest, so any n (2^31 elements and more) works with this grid.
  int64_t cap = (int64_t)state_of(be)->sms * 32;
  int64_t b = n / GP_CUDA_BLOCK + (n % GP_CUDA_BLOCK != 0);
  if (b > cap) b = cap;
  if (b < 1) b = 1;
  return (unsigned)b;
}

/* ---- memory and ordering ---- */

// cudaMalloc, with the device's memory or be->mem_limit running out reported as GP_ERR_FULL like
// the CPU backend's limit, and counted in be->mem_used / mem_peak as the CPU backend counts.
gp_status gp_cuda_dev_alloc(gp_backend *be, size_t bytes, void **out) {
  GP_TRY(gp_cuda_unsafe(be, "device memory is allocated"));
  const size_t n = bytes < MIN_ALLOC ? MIN_ALLOC : bytes;
  if (be->mem_limit && (n > be->mem_limit || be->mem_used > be->mem_limit - n))
    return GP_ERR(GP_ERR_FULL,
                  "allocating %zu bytes on CUDA device %d would pass the memory limit of %zu "
                  "bytes (%zu in use)",
                  bytes, be->device, be->mem_limit, be->mem_used);
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); // not sticky: clear it so the next launch check is clean
    return GP_ERR(GP_ERR_FULL,
                  "out of memory on CUDA device %d allocating %zu bytes (%zu in use by this "
                  "instance): %s",
                  be->device, bytes, be->mem_used, cudaGetErrorString(e));
  }
  GP_TRY(gp_cuda_check(e, "cudaMalloc", __FILE__, __LINE__));
  if (!mem_put(state_of(be), p, n)) {
    (void)cudaFree(p);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for the CUDA allocation table");
  }
  be->mem_used += n;
  if (be->mem_used > be->mem_peak) be->mem_peak = be->mem_used;
  *out = p;
  return GP_OK;
}

cudaError_t gp_cuda_dev_free(gp_backend *be, void *p) {
  if (!p) return cudaSuccess;
  gp_cuda_impl *im = gp_cuda_of(be);
  im->frees++; // (graphs recorded before may point at it: graph_counters)
  im->unsafe++;
  im->why = "device memory is freed";
  be->mem_used -= mem_take(state_of(be), p);
  return cudaFree(p);
}

static gp_status cuda_alloc(gp_backend *be, size_t bytes, void **out) {
  GP_TRY(gp_cuda_use(be));
  return gp_cuda_dev_alloc(be, bytes, out); // cudaMalloc aligns to at least 256 bytes
}

static void cuda_free(gp_backend *be, void *p) {
  if (!p) return;
  // The interface has no status here; a failure (a sticky error from an earlier kernel) is
  // reported again by the next call that returns one.
  (void)cudaSetDevice(be->device);
  (void)gp_cuda_dev_free(be, p);
}

static gp_status cuda_zero(gp_backend *be, void *dst, size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, gp_cuda_of(be)->stream));
  return GP_OK;
}

static gp_status cuda_copy(gp_backend *be, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  cudaStream_t st = gp_cuda_of(be)->stream;
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d + bytes <= s || s + bytes <= d) {
    GP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
    return GP_OK;
  }
  // Overlapping ranges (memmove semantics, as on the CPU): cudaMemcpy does not allow them, so
  // go through a temporary. Rare; cudaFree waits for the copies.
  void *tmp = NULL;
  GP_TRY(gp_cuda_dev_alloc(be, bytes, &tmp));
  gp_status r = gp_cuda_check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st),
                              "cudaMemcpyAsync (to a temporary)", __FILE__, __LINE__);
  if (r == GP_OK)
    r = gp_cuda_check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st),
                      "cudaMemcpyAsync (from a temporary)", __FILE__, __LINE__);
  cudaError_t e = gp_cuda_dev_free(be, tmp);
  if (r == GP_OK) r = gp_cuda_check(e, "cudaFree", __FILE__, __LINE__);
  return r;
}

static gp_status cuda_to_host(gp_backend *be, void *host, const void *src, size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gp_cuda_unsafe(be, "a copy to the host waits for the device"));
  cudaStream_t st = gp_cuda_of(be)->stream;
  GP_CUDA_TRY(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, st));
  GP_CUDA_TRY(cudaStreamSynchronize(st));
  return GP_OK;
}

// Synchronous too: the caller may reuse host as soon as this returns, pinned or not.
static gp_status cuda_from_host(gp_backend *be, void *dst, const void *host, size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gp_cuda_unsafe(be, "a copy from the host waits for the device"));
  cudaStream_t st = gp_cuda_of(be)->stream;
  GP_CUDA_TRY(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, st));
  GP_CUDA_TRY(cudaStreamSynchronize(st));
  return GP_OK;
}

static gp_status cuda_sync(gp_backend *be) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gp_cuda_unsafe(be, "the host waits for the device"));
  GP_CUDA_TRY(cudaStreamSynchronize(gp_cuda_of(be)->stream));
  return GP_OK;
}

// A grow-only device buffer: freed and reallocated larger (cudaFree waits for its users).
static gp_status grow(gp_backend *be, void **buf, size_t *have, size_t bytes) {
  if (*buf && bytes <= *have) return GP_OK;
  GP_TRY(gp_cuda_unsafe(be, "a work buffer grows"));
  if (*buf) {
    void *old = *buf;
    *buf = NULL;
    *have = 0;
    GP_CUDA_TRY(gp_cuda_dev_free(be, old));
  }
  void *p = NULL;
  GP_TRY(gp_cuda_dev_alloc(be, bytes, &p));
  *buf = p;
  *have = bytes < MIN_ALLOC ? MIN_ALLOC : bytes;
  return GP_OK;
}

gp_status gp_cuda_scratch(gp_backend *be, size_t bytes, void **out) {
  GP_TRY(gp_cuda_use(be));
  gp_cuda_impl *im = gp_cuda_of(be);
  GP_TRY(grow(be, &im->scratch, &im->scratch_bytes, bytes));
  *out = im->scratch;
  return GP_OK;
}

gp_status gp_cuda_workspace(gp_backend *be, size_t bytes, void **out) {
  cuda_state *st = state_of(be);
  GP_TRY(grow(be, &st->ws, &st->ws_bytes, bytes));
  *out = st->ws;
  return GP_OK;
}

void *gp_cuda_host_result(gp_backend *be) {
  return state_of(be)->host_result;
}

static void cuda_destroy(gp_backend *be) {
  if (!be) return;
  cuda_state *st = state_of(be);
  if (st) {
    // No status to return: tear down as much as possible, in the reverse order of creation.
    (void)cudaSetDevice(st->pub.device);
    if (st->pub.stream) (void)cudaStreamSynchronize(st->pub.stream);
    gp_cuda_order_release(be);
    gp_cuda_graph_release(be);
    if (st->dnn_installed) gp_cuda_dnn_release(be);
    if (st->pub.dnn) (void)cudnnDestroy(st->pub.dnn);
    gp_cuda_lt_release(be);
    if (st->pub.blas) (void)cublasDestroy(st->pub.blas);
    if (st->pub.scratch) (void)gp_cuda_dev_free(be, st->pub.scratch);
    if (st->ws) (void)gp_cuda_dev_free(be, st->ws);
    if (st->host_result) (void)cudaFreeHost(st->host_result);
    if (st->pub.stream) (void)cudaStreamDestroy(st->pub.stream);
    free(st->mem);
    free(st);
  }
  free(be);
}

/* ---- GEMM ---- */

static int fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

// Row-major C = alpha op(A) op(B) + beta C is column-major C^T = alpha op(B)^T op(A)^T +
// beta C^T, and a row-major matrix with leading dimension ld is its transpose, column-major,
// with the same ld: so cuBLAS gets B before A, n before m, and the same transpose flags.
static gp_status cuda_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
                           int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
      !fits_int(ldc))
    return GP_ERR(GP_ERR_RUNTIME, "gemm %lld x %lld x %lld exceeds the 32-bit BLAS interface",
                  (long long)m, (long long)n, (long long)k);
  if (m == 0 || n == 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  if (k == 0) return gp_cuda_scale2d(be, m, n, beta, c, ldc);
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < a_cols || ldb < b_cols || ldc < n)
    return GP_ERR(GP_ERR_RUNTIME,
                  "gemm: leading dimensions lda %lld, ldb %lld, ldc %lld are smaller than the rows "
                  "(%lld, %lld, %lld columns)",
                  (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols,
                  (long long)b_cols, (long long)n);
  if (be->precision != GP_PREC_FP32) // bf16 operands, f32 accumulation and output (bf16.cu)
    return gp_cuda_bf16_gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  GP_CUBLAS_TRY(cublasSgemm(gp_cuda_of(be)->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b,
                            (int)ldb, a, (int)lda, &beta, c, (int)ldc));
  return GP_OK;
}

/* ---- creation ---- */

static gp_status cuda_init(gp_backend *be) {
  cuda_state *st = state_of(be);
  const int dev = be->device;
  GP_CUDA_TRY(cudaSetDevice(dev));
  GP_CUDA_TRY(cudaDeviceGetAttribute(&st->sms, cudaDevAttrMultiProcessorCount, dev));
  if (st->sms < 1) st->sms = 1;
  cudaStream_t stream = NULL;
  GP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  st->pub.stream = stream;
  cublasHandle_t blas = NULL;
  GP_CUBLAS_TRY(cublasCreate(&blas));
  st->pub.blas = blas;
  GP_CUBLAS_TRY(cublasSetStream(blas, stream));
  // fp32 means fp32: no TF32 tensor-core rounding of the inputs (CUBLAS_DEFAULT_MATH never
  // uses TF32 unless NVIDIA_TF32_OVERRIDE says so).
  GP_CUBLAS_TRY(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  cudnnHandle_t dnn = NULL;
  GP_CUDNN_TRY(cudnnCreate(&dnn));
  st->pub.dnn = dnn;
  GP_CUDNN_TRY(cudnnSetStream(dnn, stream));
  GP_TRY(gp_cuda_order_install(be));
  void *host = NULL;
  GP_CUDA_TRY(cudaMallocHost(&host, 64));
  st->host_result = host;

  be->alloc = cuda_alloc;
  be->free = cuda_free;
  be->zero = cuda_zero;
  be->copy = cuda_copy;
  be->to_host = cuda_to_host;
  be->from_host = cuda_from_host;
  be->sync = cuda_sync;
  be->scratch = gp_cuda_scratch;
  be->destroy = cuda_destroy;

  be->gemm = cuda_gemm;
  be->gemm_strided_batched = gp_cuda_gemm_strided_batched; // kv.cu
  be->bias_add = gp_cuda_bias_add;
  be->bias_grad = gp_cuda_bias_grad;
  be->act_forward = gp_cuda_act_forward;
  be->act_backward = gp_cuda_act_backward;
  be->dropout_forward = gp_cuda_dropout_forward;
  be->dropout_backward = gp_cuda_dropout_backward;
  be->axpby = gp_cuda_axpby;
  be->mul = gp_cuda_mul;
  be->round_bf16 = gp_cuda_round_bf16;
  be->pack_bf16 = gp_cuda_pack_bf16;
  be->unpack_bf16 = gp_cuda_unpack_bf16;
  be->copy2d = gp_cuda_copy2d;
  be->gather_rows = gp_cuda_gather_rows; // kv.cu
  be->sum = gp_cuda_sum;
  be->count_correct = gp_cuda_count_correct;
  be->sumsq = gp_cuda_sumsq;
  be->sgd_update = gp_cuda_sgd_update;
  be->adamw_update = gp_cuda_adamw_update;
  be->rmsprop_update = gp_cuda_rmsprop_update;

  // conv2d, pool2d, batchnorm, layernorm, rmsnorm, embedding, attention softmax, softmax backward,
  // softmax cross-entropy: dnn.cu.
  st->dnn_installed = 1; // release even after a failed install (it frees what it made)
  GP_TRY(gp_cuda_dnn_install(be));
  gp_cuda_fused_install(be); // cuBLASLt epilogues, add + norm kernels (lt.cu, fused.cu)
  return gp_cuda_graph_install(be);
}

extern "C" gp_status gp_cuda_backend_create_impl(int device, gp_backend **out) {
  *out = NULL;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return GP_ERR(GP_ERR_RUNTIME, "this machine has no usable NVIDIA GPU (%s)",
                  cudaGetErrorString(e));
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return gp_cuda_check(e, "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  if (device < 0 || device >= count)
    return GP_ERR(GP_ERR_RUNTIME, "CUDA device %d does not exist (this machine shows %d)", device,
                  count);
  gp_backend *be = (gp_backend *)calloc(1, sizeof *be);
  cuda_state *st = (cuda_state *)calloc(1, sizeof *st);
  if (!be || !st) {
    free(be);
    free(st);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory creating a CUDA backend");
  }
  be->name = "cuda";
  be->device = device;
  be->threads = 1;
  be->impl = st;
  be->destroy = cuda_destroy;
  st->pub.device = device;
  gp_status s = cuda_init(be);
  if (s != GP_OK) {
    cuda_destroy(be);
    return s;
  }
  *out = be;
  return GP_OK;
}
