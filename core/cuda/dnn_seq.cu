// Sequence and loss ops on the CUDA backend: embedding lookups and their gradient, the masked
// softmax of attention scores with its backward, rotary position embedding, and softmax
// cross-entropy; the CPU reference is core/cpu/seq.c and core/cpu/loss.c.
//
// Input checks (ids, labels, masks, segment ids) run on the device and report the first bad
// position through a flag read back before anything is written, so the errors name the same
// value and position as the CPU's. That read waits for the stream: these ops synchronize.
//
// The embedding gradient is deterministic without float atomics: the keys (id << 32 | position)
// are sorted (a bitonic sort: the keys are distinct, so the order is the same on every run,
// and each id's positions come out in order), and one block per id adds its rows into the
// table in position order, exactly as the CPU loop does.
#include <limits.h>
#include <math.h>

#include "core/cuda/dnn_internal.h"

#define NO_FLAG ULLONG_MAX

/* ---- checks ---- */

__global__ void ids_check_kernel(int64_t n, int64_t limit, const int32_t *__restrict__ ids,
                                 unsigned long long *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    if (ids[i] < 0 || ids[i] >= limit) gp_dnn_flag(flag, i);
}

// Position of the first id outside [0, limit), or -1 (flag slot 0).
static gp_status first_out_of_range(gp_backend *be, int64_t n, int64_t limit, const int32_t *ids,
                                    int64_t *pos, int32_t *val) {
  *pos = -1;
  if (n <= 0) return GP_OK;
  gp_dnn_state *st = gp_dnn_of(be);
  GP_TRY(gp_dnn_flags_reset(be, 1));
  ids_check_kernel<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      n, limit, ids, st->flags_dev);
  GP_CUDA_LAUNCHED("ids_check_kernel");
  GP_TRY(gp_dnn_flags_read(be, 1));
  if (st->flags_host[0] == NO_FLAG) return GP_OK;
  *pos = (int64_t)st->flags_host[0];
  return gp_dnn_fetch(be, val, ids + *pos, sizeof *val);
}

static gp_status check_ids(gp_backend *be, int64_t n, int64_t vocab, const int32_t *ids) {
  int64_t pos;
  int32_t id = 0;
  GP_TRY(first_out_of_range(be, n, vocab, ids, &pos, &id));
  if (pos >= 0)
    return GP_ERR(GP_ERR_DATA, "token id %d at position %lld is outside [0, %lld)", (int)id,
                  (long long)pos, (long long)vocab);
  return GP_OK;
}

static gp_status check_labels(gp_backend *be, int64_t n, int64_t k, const int32_t *labels) {
  int64_t pos;
  int32_t y = 0;
  GP_TRY(first_out_of_range(be, n, k, labels, &pos, &y));
  if (pos >= 0)
    return GP_ERR(GP_ERR_RUNTIME, "label %d of sample %lld is outside [0, %lld)", (int)y,
                  (long long)pos, (long long)k);
  return GP_OK;
}

/* ---- embedding ---- */

__global__ void emb_fwd_kernel(int64_t n, int64_t dim, const int32_t *__restrict__ ids,
                               const float *__restrict__ table, float scale,
                               float *__restrict__ y) {
  const int64_t total = n * dim;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / dim, j = e - i * dim;
    const float v = table[(int64_t)ids[i] * dim + j];
    y[e] = scale == 1.0f ? v : __fmul_rn(scale, v);
  }
}

static gp_status emb_forward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                             const int32_t *ids, const float *table, float scale, float *y) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_ids(be, n, vocab, ids)); // before writing anything
  if (n <= 0 || dim <= 0) return GP_OK;
  emb_fwd_kernel<<<gp_dnn_blocks(be, n * dim, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                   gp_cuda_of(be)->stream>>>(n, dim, ids, table, scale, y);
  GP_CUDA_LAUNCHED("emb_fwd_kernel");
  return GP_OK;
}

// Elements of the shared-memory stages of the sort (a power of two; half as many threads).
#define SORT_CHUNK 2048

__global__ void emb_keys_kernel(int64_t n, int64_t n2, const int32_t *__restrict__ ids,
                                unsigned long long *__restrict__ keys) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n2;
       i += (int64_t)gridDim.x * blockDim.x)
    keys[i] = i < n ? (unsigned long long)ids[i] << 32 | (unsigned long long)i : ~0ULL;
}

// Compare-exchange of the pair (i, i + j) for the bitonic merge of size k: ascending where
// bit k of i is 0.
static __device__ __forceinline__ void bitonic_step(unsigned long long *a, int64_t i, int64_t j,
                                                    bool up) {
  unsigned long long x = a[i], y = a[i + j];
  if ((x > y) == up) {
    a[i] = y;
    a[i + j] = x;
  }
}

// Stages (k, j) with j < chunk of the chunk of this block, in shared memory: every k from 2 to
// kmax when first (sorting chunks), else j from chunk / 2 down for k = kmax (merging).
__global__ void bitonic_shared_kernel(unsigned long long *__restrict__ keys, int64_t chunk,
                                      int64_t kmax, int first) {
  extern __shared__ unsigned long long sh[];
  const int64_t base = (int64_t)blockIdx.x * chunk;
  for (int64_t t = threadIdx.x; t < chunk; t += blockDim.x)
    sh[t] = keys[base + t];
  __syncthreads();
  for (int64_t k = first ? 2 : kmax; k <= kmax; k <<= 1)
    for (int64_t j = (k < chunk ? k : chunk) >> 1; j > 0; j >>= 1) {
      for (int64_t t = threadIdx.x; t < chunk / 2; t += blockDim.x) {
        const int64_t i = 2 * t - (t & (j - 1)); // the lower index of pair t
        bitonic_step(sh, i, j, ((base + i) & k) == 0);
      }
      __syncthreads();
    }
  for (int64_t t = threadIdx.x; t < chunk; t += blockDim.x)
    keys[base + t] = sh[t];
}

__global__ void bitonic_global_kernel(unsigned long long *__restrict__ keys, int64_t n2, int64_t k,
                                      int64_t j) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n2 / 2;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = 2 * t - (t & (j - 1));
    bitonic_step(keys, i, j, (i & k) == 0);
  }
}

// Sorts n2 (a power of two) distinct keys ascending.
static gp_status bitonic_sort(gp_backend *be, unsigned long long *keys, int64_t n2) {
  cudaStream_t s = gp_cuda_of(be)->stream;
  const int64_t chunk = n2 < SORT_CHUNK ? n2 : SORT_CHUNK;
  const unsigned blocks = (unsigned)(n2 / chunk);
  const int threads = (int)(chunk / 2 < 1024 ? (chunk / 2 < 32 ? 32 : chunk / 2) : 1024);
  const size_t shm = (size_t)chunk * sizeof(unsigned long long);
  bitonic_shared_kernel<<<blocks, threads, shm, s>>>(keys, chunk, chunk, 1);
  GP_CUDA_LAUNCHED("bitonic_shared_kernel");
  for (int64_t k = 2 * chunk; k <= n2; k <<= 1) {
    for (int64_t j = k >> 1; j >= chunk; j >>= 1) {
      bitonic_global_kernel<<<gp_dnn_blocks(be, n2 / 2, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
          keys, n2, k, j);
      GP_CUDA_LAUNCHED("bitonic_global_kernel");
    }
    bitonic_shared_kernel<<<blocks, threads, shm, s>>>(keys, chunk, k, 0);
    GP_CUDA_LAUNCHED("bitonic_shared_kernel");
  }
  return GP_OK;
}

// A block per run of equal ids in the sorted keys (the block of its first position): the
// table row plus scale * dy of each position in order, as the CPU's sequential loop sums.
__global__ void emb_bwd_kernel(int64_t n, int64_t dim, int64_t skip, float scale,
                               const unsigned long long *__restrict__ keys,
                               const float *__restrict__ dy, float *__restrict__ dtable) {
  for (int64_t s = blockIdx.x; s < n; s += gridDim.x) {
    const int64_t id = (int64_t)(keys[s] >> 32);
    if ((s > 0 && (int64_t)(keys[s - 1] >> 32) == id) || id == skip) continue;
    int64_t end = s + 1;
    while (end < n && (int64_t)(keys[end] >> 32) == id)
      end++;
    float *row = dtable + id * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float acc = row[j];
      for (int64_t t = s; t < end; t++) {
        const int64_t pos = (int64_t)(keys[t] & 0xffffffffULL);
        acc = __fadd_rn(acc, __fmul_rn(scale, dy[pos * dim + j]));
      }
      row[j] = acc;
    }
  }
}

static gp_status emb_backward(gp_backend *be, int64_t n, int64_t dim, int64_t vocab,
                              const int32_t *ids, const float *dy, float scale, int64_t skip,
                              float *dtable) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_ids(be, n, vocab, ids));
  if (n <= 0 || dim <= 0) return GP_OK;
  if (n > INT32_MAX)
    return GP_ERR(GP_ERR_RUNTIME, "embedding backward over %lld positions (at most 2^31 - 1)",
                  (long long)n);
  cudaStream_t s = gp_cuda_of(be)->stream;
  int64_t n2 = 1;
  while (n2 < n)
    n2 <<= 1;
  void *w;
  GP_TRY(gp_dnn_work(be, (size_t)n2 * sizeof(unsigned long long), &w));
  unsigned long long *keys = (unsigned long long *)w;
  emb_keys_kernel<<<gp_dnn_blocks(be, n2, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(n, n2, ids, keys);
  GP_CUDA_LAUNCHED("emb_keys_kernel");
  GP_TRY(bitonic_sort(be, keys, n2));
  const int t = gp_dnn_row_threads(dim);
  emb_bwd_kernel<<<gp_dnn_blocks(be, n * t, t), t, 0, s>>>(n, dim, skip, scale, keys, dy, dtable);
  GP_CUDA_LAUNCHED("emb_bwd_kernel");
  return GP_OK;
}

/* ---- attention softmax ---- */

__global__ void mask_check_kernel(int64_t n, const float *__restrict__ kf,
                                  const int32_t *__restrict__ ki, unsigned long long *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double v = kf ? (double)kf[i] : (double)ki[i];
    if (v != 0.0 && v != 1.0) gp_dnn_flag(flag, i); // NaN included
  }
}

__global__ void seg_check_kernel(int64_t n, const int32_t *__restrict__ seg,
                                 unsigned long long *flag) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    if (seg[i] < 0) gp_dnn_flag(flag, i);
}

// The CPU's checks in its order (mask, query segments, key segments), one wait for all.
static gp_status attn_check(gp_backend *be, const gp_attn_softmax_desc *d) {
  const int masked = d->keep_f32 || d->keep_i32;
  const int segk = d->seg_q && d->seg_k != d->seg_q;
  if (!masked && !d->seg_q) return GP_OK;
  gp_dnn_state *st = gp_dnn_of(be);
  cudaStream_t s = gp_cuda_of(be)->stream;
  const int64_t nk = d->batch * d->tk, nq = d->batch * d->tq;
  GP_TRY(gp_dnn_flags_reset(be, 3));
  if (masked && nk > 0) {
    mask_check_kernel<<<gp_dnn_blocks(be, nk, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
        nk, d->keep_f32, d->keep_i32, st->flags_dev);
    GP_CUDA_LAUNCHED("mask_check_kernel");
  }
  if (d->seg_q && nq > 0) {
    seg_check_kernel<<<gp_dnn_blocks(be, nq, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
        nq, d->seg_q, st->flags_dev + 1);
    GP_CUDA_LAUNCHED("seg_check_kernel");
  }
  if (segk && nk > 0) {
    seg_check_kernel<<<gp_dnn_blocks(be, nk, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
        nk, d->seg_k, st->flags_dev + 2);
    GP_CUDA_LAUNCHED("seg_check_kernel");
  }
  GP_TRY(gp_dnn_flags_read(be, 3));
  const unsigned long long f[3] = {st->flags_host[0], st->flags_host[1], st->flags_host[2]};
  if (f[0] != NO_FLAG) {
    const int64_t i = (int64_t)f[0];
    double v;
    if (d->keep_f32) {
      float x;
      GP_TRY(gp_dnn_fetch(be, &x, d->keep_f32 + i, sizeof x));
      v = x;
    } else {
      int32_t x;
      GP_TRY(gp_dnn_fetch(be, &x, d->keep_i32 + i, sizeof x));
      v = x;
    }
    return GP_ERR(GP_ERR_DATA,
                  "key-padding mask value %g of sample %lld, key %lld is not 0 (pad) or 1 "
                  "(token)",
                  v, (long long)(i / d->tk), (long long)(i % d->tk));
  }
  for (int k = 1; k < 3; k++) {
    if (f[k] == NO_FLAG) continue;
    const int64_t i = (int64_t)f[k], t = k == 1 ? d->tq : d->tk;
    int32_t x;
    GP_TRY(gp_dnn_fetch(be, &x, (k == 1 ? d->seg_q : d->seg_k) + i, sizeof x));
    return GP_ERR(GP_ERR_DATA,
                  "segment id %d of sample %lld, %s %lld is negative (0 = padding, 1, 2, ... = "
                  "a sentence of the row)",
                  (int)x, (long long)(i / t), k == 1 ? "query" : "key", (long long)(i % t));
  }
  return GP_OK;
}

// The masks by value for the kernel.
struct attn_geo {
  int64_t batch, heads, tq, tk;
  int causal;
  const float *kf;
  const int32_t *ki, *sq, *sk;
};

// Whether key j is attended to by a query of segment qs (the CPU's key_kept).
static __device__ __forceinline__ bool key_kept(int64_t j, const float *kf, const int32_t *ki,
                                                const int32_t *sk, int32_t qs) {
  if (kf && kf[j] == 0.0f) return false;
  if (ki && ki[j] == 0) return false;
  return !sk || sk[j] == qs;
}

// A block per row of [batch, heads, tq, tk]; every element is read and written by one thread,
// so probs may alias scores.
__global__ void attn_fwd_kernel(attn_geo g, const float *s_all, float *p_all) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  const int64_t rows = g.batch * g.heads * g.tq, tk = g.tk;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = row / (g.heads * g.tq), i = row % g.tq;
    const float *kf = g.kf ? g.kf + b * tk : NULL;
    const int32_t *ki = g.ki ? g.ki + b * tk : NULL;
    const int32_t *sq = g.sq ? g.sq + b * g.tq : NULL;
    const int32_t *sk = g.sk ? g.sk + b * tk : NULL;
    const float *s = s_all + row * tk;
    float *p = p_all + row * tk;
    int64_t end = g.causal && i + 1 < tk ? i + 1 : tk; // keys [0, end) before masks
    const int32_t qs = sq ? sq[i] : 0;
    if (sq && qs == 0) end = 0; // a padding query of a packed row attends to nothing
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < end; j += blockDim.x)
      if (key_kept(j, kf, ki, sk, qs) && s[j] > mx) mx = s[j];
    mx = gp_dnn_block_reduce(mx, -INFINITY, gp_dnn_max(), shf);
    if (mx == -INFINITY) { // every key masked: no attention at all
      for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
        p[j] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) {
      const float e = j < end && key_kept(j, kf, ki, sk, qs) ? expf(s[j] - mx) : 0.0f;
      p[j] = e;
      sum += e;
    }
    sum = gp_dnn_block_reduce(sum, 0.0, gp_dnn_add(), shd);
    const float inv = (float)(1.0 / sum); // sum >= 1: the maximum contributes exp(0)
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
      p[j] = __fmul_rn(p[j], inv);
  }
}

static gp_status attn_forward(gp_backend *be, const gp_attn_softmax_desc *d, const float *scores,
                              float *probs) {
  GP_TRY(gp_cuda_use(be));
  if (!d->seg_q != !d->seg_k)
    return GP_ERR(GP_ERR_RUNTIME, "attention softmax: segment ids of the queries and of the keys "
                                  "must be given together");
  GP_TRY(attn_check(be, d));
  const int64_t rows = d->batch * d->heads * d->tq;
  if (rows <= 0 || d->tk <= 0) return GP_OK;
  const attn_geo g = {d->batch,    d->heads,    d->tq,    d->tk,   d->causal,
                      d->keep_f32, d->keep_i32, d->seg_q, d->seg_k};
  const int t = gp_dnn_row_threads(d->tk);
  attn_fwd_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(g, scores,
                                                                                    probs);
  GP_CUDA_LAUNCHED("attn_fwd_kernel");
  return GP_OK;
}

// dx = y (dy - sum_j y_j dy_j) per row; dx may alias dy (one thread per element).
__global__ void softmax_bwd_kernel(int64_t rows, int64_t cols, const float *y, const float *dy,
                                   float *dx) {
  __shared__ double sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *yr = y + r * cols, *g = dy + r * cols;
    float *o = dx + r * cols;
    double dot = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dot += (double)yr[j] * (double)g[j];
    const float fd = (float)gp_dnn_block_reduce(dot, 0.0, gp_dnn_add(), sh);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      o[j] = __fmul_rn(yr[j], g[j] - fd);
  }
}

static gp_status softmax_backward(gp_backend *be, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx) {
  GP_TRY(gp_cuda_use(be));
  if (rows <= 0 || cols <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cols);
  softmax_bwd_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(rows, cols,
                                                                                       y, dy, dx);
  GP_CUDA_LAUNCHED("softmax_bwd_kernel");
  return GP_OK;
}

/* ---- softmax cross-entropy ---- */

// A block per sample: probs = softmax(z) and the smoothed cross-entropy, in double where the
// CPU uses double.
__global__ void xent_fwd_kernel(int64_t n, int64_t k, float smoothing, const float *logits,
                                const int32_t *__restrict__ labels, float *probs,
                                float *__restrict__ loss) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float *z = logits + i * k;
    float *p = probs + i * k;
    const float zl = z[labels[i]], z0 = z[0]; // before probs (which may alias) is written
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
      m = z[j] > m ? z[j] : m;
    // The CPU starts from z[0]: a NaN there stays the maximum, a NaN elsewhere never wins.
    m = gp_dnn_block_reduce(m, -INFINITY, gp_dnn_max(), shf);
    const float mx = isnan(z0) ? z0 : m;
    double se = 0.0, sz = 0.0;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      const float e = expf(z[j] - mx);
      sz += (double)(z[j] - mx);
      p[j] = e;
      se += e;
    }
    se = gp_dnn_block_reduce(se, 0.0, gp_dnn_add(), shd);
    sz = gp_dnn_block_reduce(sz, 0.0, gp_dnn_add(), shd);
    const float inv = (float)(1.0 / se);
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
      p[j] = __fmul_rn(p[j], inv);
    if (threadIdx.x == 0) {
      // log p_j = z_j - mx - log(se): exact even where p_j underflows to 0.
      const double lse = log(se);
      const double nll = -((double)zl - mx - lse);
      const double smooth = -(sz / (double)k - lse);
      // nll alone without smoothing, as on the CPU (0 * an infinite smooth would be NaN)
      loss[i] = smoothing == 0.0f ? (float)nll
                                  : (float)__dadd_rn(__dmul_rn(1.0 - smoothing, nll),
                                                     __dmul_rn(smoothing, smooth));
    }
  }
}

static gp_status xent_forward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                              const float *logits, const int32_t *labels, float *probs,
                              float *loss) {
  GP_TRY(gp_cuda_use(be));
  if (k <= 0) return GP_ERR(GP_ERR_RUNTIME, "softmax over %lld classes", (long long)k);
  GP_TRY(check_labels(be, n, k, labels));
  if (n <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(k);
  xent_fwd_kernel<<<gp_dnn_blocks(be, n * t, t), t, 0, gp_cuda_of(be)->stream>>>(
      n, k, smoothing, logits, labels, probs, loss);
  GP_CUDA_LAUNCHED("xent_fwd_kernel");
  return GP_OK;
}

// dlogits = scale * (probs - target), target = (1 - s) onehot + s / k, rounded as the CPU.
// d may be probs (the loss's gradient over its probabilities): each element is read and written
// by one thread, so neither is __restrict__.
__global__ void xent_bwd_kernel(int64_t n, int64_t k, float off, float on, float scale,
                                const float *probs, const int32_t *__restrict__ labels, float *d) {
  const int64_t total = n * k;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / k, j = e - i * k;
    float v = __fmul_rn(scale, probs[e] - off);
    if (j == labels[i]) v = __fsub_rn(v, __fmul_rn(scale, on));
    d[e] = v;
  }
}

static gp_status xent_backward(gp_backend *be, int64_t n, int64_t k, float smoothing, float scale,
                               const float *probs, const int32_t *labels, float *dlogits) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_labels(be, n, k, labels));
  if (n <= 0 || k <= 0) return GP_OK;
  const float off = smoothing / (float)k, on = 1.0f - smoothing;
  xent_bwd_kernel<<<gp_dnn_blocks(be, n * k, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                    gp_cuda_of(be)->stream>>>(n, k, off, on, scale, probs, labels, dlogits);
  GP_CUDA_LAUNCHED("xent_bwd_kernel");
  return GP_OK;
}

/* ---- rotary position embedding ---- */

// One thread per (row, head, pair); the angle in f32 as the CPU's (and transformers') is, with
// the library's powf, cosf and sinf (within an ulp or two of the host's, not bit for bit).
__global__ void rope_kernel(int64_t rows, int64_t heads, int64_t dh, int64_t ld, float theta,
                            const int32_t *__restrict__ pos, float sgn, float *__restrict__ x) {
  const int64_t half = dh / 2, total = rows * heads * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e % half, h = (e / half) % heads, r = e / (half * heads);
    const float inv = __fdiv_rn(1.0f, powf(theta, __fdiv_rn((float)(2 * i), (float)dh)));
    const float ang = __fmul_rn((float)pos[r], inv), c = cosf(ang), s = sgn * sinf(ang);
    float *u = x + r * ld + h * dh + i, *w = u + half;
    const float x1 = *u, x2 = *w;
    *u = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    *w = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

static gp_status rope(gp_backend *be, int64_t rows, int64_t heads, int64_t dh, int64_t ld,
                      double theta, const int32_t *pos, int inverse, float *x) {
  GP_TRY(gp_cuda_use(be));
  if (dh % 2)
    return GP_ERR(GP_ERR_RUNTIME, "rope: the head size %lld is odd: its halves cannot pair",
                  (long long)dh);
  int64_t at;
  int32_t p = 0;
  GP_TRY(first_out_of_range(be, rows, (1 << 24) + 1, pos, &at, &p));
  if (at >= 0)
    return GP_ERR(GP_ERR_DATA,
                  "rope: position %d of token %lld of the micro-batch is outside [0, 16777216] "
                  "(f32 holds every integer only up to 2^24)",
                  (int)p, (long long)at);
  const int64_t n = rows * heads * (dh / 2);
  if (n <= 0) return GP_OK;
  rope_kernel<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      rows, heads, dh, ld, (float)theta, pos, inverse ? -1.0f : 1.0f, x);
  GP_CUDA_LAUNCHED("rope_kernel");
  return GP_OK;
}

void gp_dnn_install_seq(gp_backend *be) {
  be->rope = rope;
  be->embedding_forward = emb_forward;
  be->embedding_backward = emb_backward;
  be->attn_softmax_forward = attn_forward;
  be->softmax_backward = softmax_backward;
  be->softmax_xent_forward = xent_forward;
  be->softmax_xent_backward = xent_backward;
}
