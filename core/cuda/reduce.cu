// CUDA per-channel bias (add and gradient) and the reductions with host results (sum, sum of
// squares, correct predictions). Sums run in double, in a fixed order (per-block partials,
// then one pass over them): the same inputs give the same bits on every run.
#include "core/cuda/ops.h"

#define GRID_LOOP(T, i, n)                                                                         \
  for (T i = (T)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (T)blockDim.x * gridDim.x)

namespace {

// Rows of the column-sum tile (inner == 1): a block is 32 columns x COL_ROWS threads.
const int COL_ROWS = 8;
// Most row chunks a bias gradient is split into (grid y, and partials per channel).
const int64_t MAX_CHUNKS = 1024;

// Sum of v over the block (blockDim.x == GP_CUDA_BLOCK, a power of two), in a fixed tree
// order; every thread gets the result. Once per kernel (the shared array is not re-synced).
__device__ double block_sum(double v) {
  __shared__ double sh[GP_CUDA_BLOCK];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = GP_CUDA_BLOCK / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

// y[i] += bias[(i / inner) % c]; I is uint32_t when the whole loop fits (cheaper division).
template <typename I>
__global__ void bias_add_k(I total, I c, I inner, const float *bias, float *y) {
  GRID_LOOP(I, i, total) y[i] = __fadd_rn(y[i], bias[(i / inner) % c]);
}

// inner == 1: dy is [n, c]; block (32, COL_ROWS) sums rows [y * per, (y + 1) * per) of 32
// adjacent columns (coalesced) into part[y * c + j].
__global__ void colsum_partial_k(int64_t n, int64_t c, int64_t per, const float *dy, double *part) {
  __shared__ double sh[COL_ROWS][33];
  const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < n ? r0 + per : n;
  double s = 0.0;
  if (j < c)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_ROWS)
      s += dy[r * c + j];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    double t = 0.0;
    for (int q = 0; q < COL_ROWS; q++)
      t += sh[q][threadIdx.x];
    part[(int64_t)blockIdx.y * c + j] = t;
  }
}

// inner > 1: dy is [n, c, inner]; block (x = channel j, y = chunk of samples) sums the
// chunk's planes of channel j into part[y * c + j].
__global__ void chansum_partial_k(int64_t n, int64_t c, int64_t inner, int64_t per, const float *dy,
                                  double *part) {
  const int64_t j = blockIdx.x;
  const int64_t i0 = (int64_t)blockIdx.y * per, i1 = i0 + per < n ? i0 + per : n;
  const int64_t cnt = i1 > i0 ? (i1 - i0) * inner : 0;
  double s = 0.0;
  for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) {
    int64_t i = i0 + t / inner, k = t % inner;
    s += dy[(i * c + j) * inner + k];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) part[(int64_t)blockIdx.y * c + j] = s;
}

__global__ void bias_finish_k(int64_t c, int64_t chunks, const double *part, float *dbias) {
  GRID_LOOP(int64_t, j, c) {
    double s = 0.0;
    for (int64_t q = 0; q < chunks; q++)
      s += part[q * c + j];
    dbias[j] += (float)s;
  }
}

template <int SQ> __global__ void sum_partial_k(int64_t n, const float *x, double *part) {
  double s = 0.0;
  GRID_LOOP(int64_t, i, n) {
    double v = x[i];
    s += SQ ? v * v : v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// One block: out[0] = the sum of part[0..nb).
__global__ void sum_finish_k(int64_t nb, const double *part, double *out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < nb; i += blockDim.x)
    s += part[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] = s;
}

// One warp per row: torch.argmax as core/cpu/loss.c finds it, the first NaN if the row has
// one, else the first maximum. better(): NaN above every number, the lower index among equals.
__device__ __forceinline__ bool argmax_better(float v, long long i, float bv, long long bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  const bool vn = v != v, bn = bv != bv;
  if (vn != bn) return vn;
  if (vn || v == bv) return i < bi;
  return v > bv;
}

__global__ void count_correct_k(int64_t n, int64_t k, const float *z, const int32_t *labels,
                                unsigned long long *count) {
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  unsigned long long hits = 0;
  for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < n; i += warps) {
    const float *row = z + i * k;
    float bv = 0.0f;
    long long bi = -1; // none yet
    for (int64_t j = lane; j < k; j += 32) {
      float v = row[j];
      if (argmax_better(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      float ov = __shfl_down_sync(FULL, bv, off);
      long long oi = __shfl_down_sync(FULL, bi, off);
      if (argmax_better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) hits += (bi < 0 ? 0 : bi) == (long long)labels[i];
  }
  if (lane == 0 && hits) atomicAdd(count, hits);
}

cudaStream_t stream_of(gp_backend *be) {
  return gp_cuda_of(be)->stream;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

} // namespace

gp_status gp_cuda_bias_add(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *bias,
                           float *y) {
  if (n <= 0 || c <= 0 || inner <= 0) return GP_OK;
  if (n > INT64_MAX / c || n * c > INT64_MAX / inner)
    return GP_ERR(GP_ERR_RUNTIME, "bias_add: %lld x %lld x %lld is too large", (long long)n,
                  (long long)c, (long long)inner);
  GP_TRY(gp_cuda_use(be));
  const int64_t total = n * c * inner;
  const unsigned nb = gp_cuda_blocks(be, total);
  // 32-bit indices when i + the grid stride cannot wrap around.
  if (total <= INT32_MAX)
    bias_add_k<uint32_t><<<nb, GP_CUDA_BLOCK, 0, stream_of(be)>>>((uint32_t)total, (uint32_t)c,
                                                                  (uint32_t)inner, bias, y);
  else
    bias_add_k<int64_t><<<nb, GP_CUDA_BLOCK, 0, stream_of(be)>>>(total, c, inner, bias, y);
  GP_CUDA_LAUNCHED("bias_add kernel");
  return GP_OK;
}

gp_status gp_cuda_bias_grad(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                            float *dbias) {
  if (n <= 0 || c <= 0 || inner <= 0) return GP_OK;
  if (c > INT32_MAX || n > INT64_MAX / c || n * c > INT64_MAX / inner)
    return GP_ERR(GP_ERR_RUNTIME, "bias_grad: %lld x %lld x %lld is too large", (long long)n,
                  (long long)c, (long long)inner);
  GP_TRY(gp_cuda_use(be));
  cudaStream_t st = stream_of(be);
  // Split the rows into chunks until the grid has a few blocks per multiprocessor.
  const int64_t want = (int64_t)gp_cuda_blocks(be, INT64_MAX) / 4;
  const int64_t gx = inner == 1 ? ceil_div(c, 32) : c;
  const int64_t max_chunks = inner == 1 ? ceil_div(n, COL_ROWS) : n;
  int64_t chunks = ceil_div(want, gx);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > MAX_CHUNKS) chunks = MAX_CHUNKS;
  if (chunks < 1) chunks = 1;
  const int64_t per = ceil_div(n, chunks);
  chunks = ceil_div(n, per);
  double *part = NULL;
  GP_TRY(gp_cuda_workspace(be, (size_t)(chunks * c) * sizeof(double), (void **)&part));
  if (inner == 1) {
    colsum_partial_k<<<dim3((unsigned)gx, (unsigned)chunks), dim3(32, COL_ROWS), 0, st>>>(n, c, per,
                                                                                          dy, part);
  } else {
    chansum_partial_k<<<dim3((unsigned)gx, (unsigned)chunks), GP_CUDA_BLOCK, 0, st>>>(
        n, c, inner, per, dy, part);
  }
  GP_CUDA_LAUNCHED("bias_grad partial kernel");
  bias_finish_k<<<gp_cuda_blocks(be, c), GP_CUDA_BLOCK, 0, st>>>(c, chunks, part, dbias);
  GP_CUDA_LAUNCHED("bias_grad finish kernel");
  return GP_OK;
}

// sum (SQ = 0) or sum of squares (SQ = 1) of x, in double, onto the host.
template <int SQ>
static gp_status sum_to_host(gp_backend *be, int64_t n, const float *x, double *host_out) {
  if (n <= 0) {
    *host_out = 0.0;
    return GP_OK;
  }
  GP_TRY(gp_cuda_use(be));
  cudaStream_t st = stream_of(be);
  const unsigned nb = gp_cuda_blocks(be, n);
  double *part = NULL;
  GP_TRY(gp_cuda_workspace(be, (size_t)(nb + 1) * sizeof(double), (void **)&part));
  sum_partial_k<SQ><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, part);
  GP_CUDA_LAUNCHED(SQ ? "sumsq kernel" : "sum kernel");
  sum_finish_k<<<1, GP_CUDA_BLOCK, 0, st>>>(nb, part, part + nb);
  GP_CUDA_LAUNCHED(SQ ? "sumsq finish kernel" : "sum finish kernel");
  GP_TRY(gp_cuda_unsafe(be, "a sum is read back to the host"));
  double *host = (double *)gp_cuda_host_result(be);
  GP_CUDA_TRY(cudaMemcpyAsync(host, part + nb, sizeof(double), cudaMemcpyDeviceToHost, st));
  GP_CUDA_TRY(cudaStreamSynchronize(st));
  *host_out = host[0];
  return GP_OK;
}

gp_status gp_cuda_sum(gp_backend *be, int64_t n, const float *x, double *host_out) {
  return sum_to_host<0>(be, n, x, host_out);
}

gp_status gp_cuda_sumsq(gp_backend *be, int64_t n, const float *x, double *host_out) {
  return sum_to_host<1>(be, n, x, host_out);
}

gp_status gp_cuda_count_correct(gp_backend *be, int64_t n, int64_t k, const float *logits,
                                const int32_t *labels, int64_t *host_out) {
  if (n <= 0) {
    *host_out = 0;
    return GP_OK;
  }
  if (k < 0 || (k > 0 && n > INT64_MAX / k))
    return GP_ERR(GP_ERR_RUNTIME, "count_correct: %lld x %lld logits", (long long)n, (long long)k);
  GP_TRY(gp_cuda_use(be));
  cudaStream_t st = stream_of(be);
  unsigned long long *count = NULL;
  GP_TRY(gp_cuda_workspace(be, sizeof *count, (void **)&count));
  GP_CUDA_TRY(cudaMemsetAsync(count, 0, sizeof *count, st));
  // A warp (32 threads) per row.
  const int64_t threads = n < INT64_MAX / 32 ? n * 32 : INT64_MAX;
  count_correct_k<<<gp_cuda_blocks(be, threads), GP_CUDA_BLOCK, 0, st>>>(n, k, logits, labels,
                                                                         count);
  GP_CUDA_LAUNCHED("count_correct kernel");
  GP_TRY(gp_cuda_unsafe(be, "a count is read back to the host"));
  unsigned long long *host = (unsigned long long *)gp_cuda_host_result(be);
  GP_CUDA_TRY(cudaMemcpyAsync(host, count, sizeof *host, cudaMemcpyDeviceToHost, st));
  GP_CUDA_TRY(cudaStreamSynchronize(st));
  *host_out = (int64_t)host[0];
  return GP_OK;
}
