// The dnn family of the CUDA backend: its state (workspace, check flags, the convolution
// cache), the install/release hooks of backend.cu, and 2-D convolution on cuDNN.
//
// Convolution: per shape (the whole gp_conv2d_desc) and direction, cuDNN's FindEx times the
// legacy algorithms once and the fastest deterministic one that does plain FP32 arithmetic
// (no TF32 tensor cores) is cached with its descriptors in a small open-addressing table, and
// remembered for the process (every stage on a device runs a shape the same way). The graph
// API's engines (conv_graph.cu) are timed too, under the same rules, and run instead when
// faster (the legacy algorithm stays for calls whose pointers are not aligned for them).
// In bf16 mode (be->precision) the operands are converted to bf16 (bf16.cu) and cuDNN runs
// with bf16 tensors and f32 compute: its results come back as bf16 and are widened to f32
// (then the bias is added, or the filter gradient accumulated, in f32). The cache keys on the
// precision too.
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/bf16.h"
#include "core/cuda/conv_graph.h"
#include "core/env.h"
#include "core/cuda/dnn_internal.h"

#include "core/cuda/dnn.h"

// The largest workspace an algorithm search offers cuDNN: algorithms that want more are
// left out (the workspace only grows, so a greedy FFT plan would hold its memory for good).
#define CONV_WS_CAP ((size_t)256 << 20)

enum { DIR_FWD, DIR_DATA, DIR_FILTER, DIR_COUNT };
static const char *const dir_name[DIR_COUNT] = {"forward", "backward data", "backward filter"};

// What an entry is for: the shape and the precision (int64_t, so the struct has no padding
// and memcmp and the hash see only these bytes).
typedef struct conv_key {
  gp_conv2d_desc d;
  int64_t precision;        // gp_precision
  int64_t nondeterministic; // gp_backend.nondeterministic: which algorithms may be chosen
} conv_key;

typedef struct conv_entry {
  conv_key key;
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  int found[DIR_COUNT];  // the direction's choice is made (legacy, graph or both)
  int legacy[DIR_COUNT]; // a legacy algorithm is known
  int algo[DIR_COUNT];
  size_t ws[DIR_COUNT];
  cudnnMathType_t math[DIR_COUNT]; // bf16: the math type the chosen algorithm was timed with
  gp_conv_graph *graph[DIR_COUNT]; // a faster graph-API plan, or NULL
} conv_entry;

struct gp_dnn_conv_cache {
  conv_entry **slot; // open addressing, linear probing; cap a power of two, at most half full
  size_t cap, used;
};

/* ---- state shared by the family ---- */

unsigned gp_dnn_blocks(gp_backend *be, int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  int64_t cap = (int64_t)gp_dnn_of(be)->sms * 32;
  if (b > cap) b = cap;
  if (b < 1) b = 1;
  return (unsigned)b;
}

int gp_dnn_row_threads(int64_t cols) {
  if (cols >= 2048) return 512;
  if (cols >= 256) return 256;
  int64_t t = (cols + 31) / 32 * 32;
  return (int)(t < 32 ? 32 : t);
}

gp_status gp_dnn_work(gp_backend *be, size_t bytes, void **out) {
  gp_dnn_state *st = gp_dnn_of(be);
  if (bytes > st->work_bytes || !st->work) {
    // Earlier kernels may still read the old buffer.
    GP_TRY(gp_cuda_wait(be, "the cuDNN work buffer grows"));
    if (st->work) GP_CUDA_TRY(gp_cuda_dev_free(be, st->work));
    st->work = NULL;
    st->work_bytes = 0;
    size_t n = bytes > 256 ? bytes : 256;
    GP_TRY(gp_cuda_dev_alloc(be, n, &st->work));
    st->work_bytes = n;
  }
  *out = st->work;
  return GP_OK;
}

gp_status gp_dnn_flags_reset(gp_backend *be, int count) {
  GP_CUDA_TRY(cudaMemsetAsync(gp_dnn_of(be)->flags_dev, 0xff,
                              (size_t)count * sizeof(unsigned long long), gp_cuda_of(be)->stream));
  return GP_OK;
}

gp_status gp_dnn_flags_read(gp_backend *be, int count) {
  gp_dnn_state *st = gp_dnn_of(be);
  cudaStream_t s = gp_cuda_of(be)->stream;
  GP_CUDA_TRY(cudaMemcpyAsync(st->flags_host, st->flags_dev,
                              (size_t)count * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                              s));
  GP_TRY(gp_cuda_wait(be, "a check of ids, labels or masks reads the device's flags"));
  return GP_OK;
}

gp_status gp_dnn_fetch(gp_backend *be, void *host, const void *dev, size_t bytes) {
  cudaStream_t s = gp_cuda_of(be)->stream;
  GP_CUDA_TRY(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
  GP_TRY(gp_cuda_wait(be, "a value is read back to the host"));
  return GP_OK;
}

/* ---- the convolution cache ---- */

static void entry_free(conv_entry *e) {
  if (!e) return;
  for (int i = 0; i < DIR_COUNT; i++)
    gp_conv_graph_free(e->graph[i]);
  if (e->x) cudnnDestroyTensorDescriptor(e->x);
  if (e->y) cudnnDestroyTensorDescriptor(e->y);
  if (e->bias) cudnnDestroyTensorDescriptor(e->bias);
  if (e->w) cudnnDestroyFilterDescriptor(e->w);
  if (e->conv) cudnnDestroyConvolutionDescriptor(e->conv);
  free(e);
}

void gp_dnn_conv_release(gp_dnn_state *st) {
  gp_dnn_conv_cache *c = st->conv;
  if (!c) return;
  for (size_t i = 0; i < c->cap; i++)
    entry_free(c->slot[i]);
  free(c->slot);
  free(c);
  st->conv = NULL;
}

static uint64_t desc_hash(const conv_key *d) {
  const unsigned char *p = (const unsigned char *)d;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < sizeof *d; i++)
    h = (h ^ p[i]) * 0x100000001b3ULL;
  return h ^ (h >> 29);
}

static gp_status cache_grow(gp_dnn_conv_cache *c) {
  size_t cap = c->cap ? 2 * c->cap : 16;
  conv_entry **slot = (conv_entry **)calloc(cap, sizeof *slot);
  if (!slot) return GP_ERR(GP_ERR_NOMEM, "conv2d: out of host memory for the algorithm cache");
  for (size_t i = 0; i < c->cap; i++) {
    conv_entry *e = c->slot[i];
    if (!e) continue;
    size_t j = desc_hash(&e->key) & (cap - 1);
    while (slot[j])
      j = (j + 1) & (cap - 1);
    slot[j] = e;
  }
  free(c->slot);
  c->slot = slot;
  c->cap = cap;
  return GP_OK;
}

static int fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

// The shared descriptor checks (core/backend_desc.c), plus cuDNN's int limits.
static gp_status check_desc(const gp_conv2d_desc *d) {
  GP_TRY(gp_conv2d_desc_check(d));
  const int64_t v[] = {d->n,  d->c,  d->h,  d->w,  d->k,  d->oh, d->ow, d->kh,
                       d->kw, d->sh, d->sw, d->ph, d->pw, d->dh, d->dw, d->groups};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (!fits_int(v[i])) return GP_ERR(GP_ERR_RUNTIME, "conv2d: a size exceeds cuDNN's int range");
  // cuDNN's legacy tensors hold at most 2^31 - 1 elements.
  if (d->n * d->c > INT_MAX / (d->h * d->w) || d->n * d->k > INT_MAX / (d->oh * d->ow) ||
      d->k * (d->c / d->groups) > INT_MAX / (d->kh * d->kw))
    return GP_ERR(GP_ERR_RUNTIME,
                  "conv2d: a tensor of %lldx%lldx%lldx%lld -> %lldx%lldx%lldx%lld has more than "
                  "2^31 elements, more than cuDNN takes (use smaller micro-batches)",
                  (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w,
                  (long long)d->n, (long long)d->k, (long long)d->oh, (long long)d->ow);
  return GP_OK;
}

static gp_status entry_make(const conv_key *key, conv_entry **out) {
  conv_entry *e = (conv_entry *)calloc(1, sizeof *e);
  if (!e) return GP_ERR(GP_ERR_NOMEM, "conv2d: out of host memory for the algorithm cache");
  e->key = *key;
  const gp_conv2d_desc *d = &key->d;
  // bf16: bf16 tensors with f32 compute (cuDNN's pseudo-bf16 configuration, as PyTorch runs
  // bf16 convolutions); the output tensor is bf16 too, there is no f32 output with bf16 inputs.
  const int bf16 = key->precision == GP_PREC_BF16;
  const cudnnDataType_t dt = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  gp_status s = GP_OK;
#define ENTRY_TRY(call)                                                                            \
  do {                                                                                             \
    s = gp_cudnn_check((call), #call, __FILE__, __LINE__);                                         \
    if (s != GP_OK) goto error;                                                                    \
  } while (0)
  ENTRY_TRY(cudnnCreateTensorDescriptor(&e->x));
  ENTRY_TRY(cudnnCreateTensorDescriptor(&e->y));
  ENTRY_TRY(cudnnCreateTensorDescriptor(&e->bias));
  ENTRY_TRY(cudnnCreateFilterDescriptor(&e->w));
  ENTRY_TRY(cudnnCreateConvolutionDescriptor(&e->conv));
  ENTRY_TRY(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, dt, (int)d->n, (int)d->c, (int)d->h,
                                       (int)d->w));
  ENTRY_TRY(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NCHW, dt, (int)d->n, (int)d->k,
                                       (int)d->oh, (int)d->ow));
  ENTRY_TRY(
      cudnnSetTensor4dDescriptor(e->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)d->k, 1, 1));
  ENTRY_TRY(cudnnSetFilter4dDescriptor(e->w, dt, CUDNN_TENSOR_NCHW, (int)d->k,
                                       (int)(d->c / d->groups), (int)d->kh, (int)d->kw));
  ENTRY_TRY(cudnnSetConvolution2dDescriptor(e->conv, (int)d->ph, (int)d->pw, (int)d->sh, (int)d->sw,
                                            (int)d->dh, (int)d->dw, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  ENTRY_TRY(cudnnSetConvolutionGroupCount(e->conv, (int)d->groups));
  // FMA_MATH, not DEFAULT_MATH: on Ampere and later DEFAULT_MATH lets FP32 convolutions run
  // on TF32 tensor cores (10-bit mantissa): on an H100 it made ResNet-56's backward filter
  // round to TF32 (test_cuda_dnn's no-TF32 check). bf16 operands are what tensor cores take
  // (exact products, f32 accumulation): TENSOR_OP_MATH.
  ENTRY_TRY(cudnnSetConvolutionMathType(e->conv, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  {
    int on, oc, ohh, oww;
    ENTRY_TRY(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &on, &oc, &ohh, &oww));
    if (on != d->n || oc != d->k || ohh != d->oh || oww != d->ow) {
      s = GP_ERR(GP_ERR_RUNTIME,
                 "conv2d: cuDNN computes output %dx%dx%dx%d, expected %lldx%lldx%lldx%lld", on, oc,
                 ohh, oww, (long long)d->n, (long long)d->k, (long long)d->oh, (long long)d->ow);
      goto error;
    }
  }
#undef ENTRY_TRY
  *out = e;
  return GP_OK;
error:
  entry_free(e);
  return s;
}

// The cached entry of shape d, made (descriptors, no algorithm yet) when new.
static gp_status entry_get(gp_backend *be, const gp_conv2d_desc *desc, conv_entry **out) {
  conv_key key;
  memset(&key, 0, sizeof key);
  key.d = *desc;
  key.precision = be->precision != GP_PREC_FP32 ? GP_PREC_BF16 : GP_PREC_FP32; // (mixed: same)
  key.nondeterministic = be->nondeterministic != 0;
  const conv_key *d = &key;
  gp_dnn_state *st = gp_dnn_of(be);
  if (!st->conv) {
    st->conv = (gp_dnn_conv_cache *)calloc(1, sizeof *st->conv);
    if (!st->conv) return GP_ERR(GP_ERR_NOMEM, "conv2d: out of host memory for the cache");
  }
  gp_dnn_conv_cache *c = st->conv;
  if (c->cap) {
    size_t j = desc_hash(d) & (c->cap - 1);
    for (; c->slot[j]; j = (j + 1) & (c->cap - 1))
      if (memcmp(&c->slot[j]->key, d, sizeof *d) == 0) {
        *out = c->slot[j];
        return GP_OK;
      }
  }
  if (2 * (c->used + 1) > c->cap) GP_TRY(cache_grow(c));
  conv_entry *e = NULL;
  GP_TRY(entry_make(d, &e));
  size_t j = desc_hash(d) & (c->cap - 1);
  while (c->slot[j])
    j = (j + 1) & (c->cap - 1);
  c->slot[j] = e;
  c->used++;
  *out = e;
  return GP_OK;
}

// The workspace a search may offer: the most any algorithm of the direction asks for, capped
// by CONV_WS_CAP and a quarter of the free device memory (of what mem_limit leaves, if set).
static gp_status search_ws_limit(gp_backend *be, const conv_entry *e, int dir, size_t *out) {
  cudnnHandle_t h = gp_cuda_of(be)->dnn;
  size_t most = 0;
  const int n = dir == DIR_FWD    ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                : dir == DIR_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                  : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  for (int a = 0; a < n; a++) {
    size_t sz = 0;
    cudnnStatus_t r;
    if (dir == DIR_FWD)
      r = cudnnGetConvolutionForwardWorkspaceSize(h, e->x, e->w, e->conv, e->y,
                                                  (cudnnConvolutionFwdAlgo_t)a, &sz);
    else if (dir == DIR_DATA)
      r = cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->w, e->y, e->conv, e->x,
                                                       (cudnnConvolutionBwdDataAlgo_t)a, &sz);
    else
      r = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->x, e->y, e->conv, e->w,
                                                         (cudnnConvolutionBwdFilterAlgo_t)a, &sz);
    if (r == CUDNN_STATUS_SUCCESS && sz > most) most = sz; // unsupported algorithms: skipped
  }
  size_t free_b = 0, total_b = 0;
  GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  size_t cap = CONV_WS_CAP < free_b / 4 ? CONV_WS_CAP : free_b / 4;
  if (be->mem_limit) { // a capped instance is a device of mem_limit bytes: a quarter of its rest
    size_t left = be->mem_limit > be->mem_used ? be->mem_limit - be->mem_used : 0;
    if (left / 4 < cap) cap = left / 4;
  }
  *out = most < cap ? most : cap;
  return GP_OK;
}

// FFT and Winograd transform the operands before multiplying; bf16 mode wants the products of
// the bf16 operands themselves (what the CPU emulation computes, up to summation order).
static bool transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
static bool transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
static bool transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first (fastest: FindEx sorts by time) result that ran, is deterministic (unless the
// instance allows others: any), does FP32 FMA arithmetic and fits the workspace; -1 when none
// does. bf16: tensor cores are fine (bf16 products are exact, sums f32), converting to a
// narrower type or transforming is not.
template <typename Perf> static int pick(const Perf *p, int n, size_t ws, int bf16, int any) {
  for (int i = 0; i < n; i++)
    if (p[i].status == CUDNN_STATUS_SUCCESS && (any || p[i].determinism == CUDNN_DETERMINISTIC) &&
        (bf16 ? !transforms(p[i].algo) : p[i].mathType != CUDNN_TENSOR_OP_MATH) &&
        p[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && p[i].memory <= ws)
      return i;
  return -1;
}

// The choice per (device, shape, precision, direction) for the whole process: every stage on a
// GPU, and every later pipeline in the process, runs a shape with the algorithm the first
// search chose. FindEx's timings vary from run to run, and two stages (or two pipelines of other
// K and M) that picked different algorithms would sum in different orders; with the memo, where
// the stages sit changes nothing. A small append-only list under a mutex: searches are rare.
typedef struct conv_choice {
  int device, dir;
  conv_key key;
  int legacy, algo; // legacy: whether algo (a legacy algorithm) is usable
  size_t ws;
  cudnnMathType_t math;
  int graph; // whether the graph engine below was faster
  gp_conv_engine engine;
} conv_choice;
static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_choice *memo;
static size_t memo_n, memo_cap;

static int memo_get(int device, const conv_key *k, int dir, conv_choice *out) {
  int hit = 0;
  pthread_mutex_lock(&memo_mu);
  for (size_t i = 0; i < memo_n && !hit; i++)
    if (memo[i].device == device && memo[i].dir == dir && memcmp(&memo[i].key, k, sizeof *k) == 0)
      *out = memo[i], hit = 1;
  pthread_mutex_unlock(&memo_mu);
  return hit;
}

static void memo_put(const conv_choice *c) { // best effort: without room, nothing is shared
  pthread_mutex_lock(&memo_mu);
  if (memo_n == memo_cap) {
    size_t cap = memo_cap ? 2 * memo_cap : 64;
    conv_choice *m = (conv_choice *)realloc(memo, cap * sizeof *m);
    if (m) memo = m, memo_cap = cap;
  }
  if (memo_n < memo_cap) memo[memo_n++] = *c;
  pthread_mutex_unlock(&memo_mu);
}

// GP_CUDNN_LOG=1: every search's candidates on stderr (algorithm, time, workspace, whether
// deterministic, math type), the chosen one marked.
static int search_log(void) {
  static int on = -1;
  if (on < 0) on = gp_env_get(GP_ENV_CUDNN_LOG, 0);
  return on;
}

template <typename Perf>
static void log_search(const conv_entry *e, int dir, const Perf *p, int n, int at, size_t ws) {
  if (!search_log()) return;
  const gp_conv2d_desc *d = &e->key.d;
  fprintf(stderr,
          "cudnn search: %s %s n%lld c%lld %lldx%lld -> k%lld %lldx%lld kernel %lldx%lld stride "
          "%lld groups %lld (workspace cap %zu)\n",
          dir_name[dir], e->key.precision == GP_PREC_BF16 ? "bf16" : "fp32", (long long)d->n,
          (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k, (long long)d->oh,
          (long long)d->ow, (long long)d->kh, (long long)d->kw, (long long)d->sh,
          (long long)d->groups, ws);
  for (int i = 0; i < n; i++)
    fprintf(stderr, "  %s algo %d: %s %.4f ms, %zu bytes, %s, math %d\n", i == at ? "*" : " ",
            (int)p[i].algo, p[i].status == CUDNN_STATUS_SUCCESS ? "ok" : "failed", p[i].time,
            p[i].memory,
            p[i].determinism == CUDNN_DETERMINISTIC ? "deterministic" : "not deterministic",
            (int)p[i].mathType);
}

// The graph-API operation of a direction: bf16 results go to a bf16 buffer (beta 0) and are
// accumulated after; fp32 backward filter accumulates into dw itself (beta 1).
static gp_conv_graph_want graph_want(const conv_entry *e, int dir, size_t ws) {
  gp_conv_graph_want w;
  memset(&w, 0, sizeof w);
  w.bf16 = e->key.precision == GP_PREC_BF16;
  w.nondeterministic = (int)e->key.nondeterministic;
  w.beta = !w.bf16 && dir == DIR_FILTER ? 1.0f : 0.0f;
  w.workspace = ws;
  w.max_candidates = 16;
  w.log = search_log();
  return w;
}

// Takes over the memo's choice for this instance (its own handle: the graph plan is rebuilt).
static gp_status take_choice(gp_backend *be, conv_entry *e, int dir, const conv_choice *c) {
  e->legacy[dir] = c->legacy;
  e->algo[dir] = c->algo;
  e->ws[dir] = c->ws;
  e->math[dir] = c->math;
  if (c->graph) {
    gp_conv_graph_want want = graph_want(e, dir, c->engine.workspace);
    gp_conv_graph *g = NULL;
    cudnnHandle_t h = gp_cuda_of(be)->dnn;
    gp_status s = gp_conv_graph_make(h, &e->key.d, dir, &want, &g);
    if (s == GP_OK) s = gp_conv_graph_use(h, g, &c->engine);
    if (s == GP_OK) {
      e->graph[dir] = g;
    } else {
      gp_conv_graph_free(g);
      if (!c->legacy) return s;
      gp_error_clear(); // the legacy algorithm does the work
    }
  }
  e->found[dir] = 1;
  return GP_OK;
}

// The graph API's fastest engine for a direction, timed on the search's buffers (X, W, Y
// roles); *g NULL when it has none or is off.
static gp_status graph_search(gp_backend *be, conv_entry *e, int dir, void *const ptrs[3],
                              void *wsp, size_t ws, gp_conv_graph **g, gp_conv_engine *best,
                              float *ms) {
  *g = NULL;
  if (!gp_conv_graph_enabled() || !gp_conv_graph_aligned(ptrs)) return GP_OK;
  gp_cuda_impl *im = gp_cuda_of(be);
  gp_conv_graph_want want = graph_want(e, dir, ws);
  gp_conv_graph *made = NULL;
  if (gp_conv_graph_make(im->dnn, &e->key.d, dir, &want, &made) != GP_OK) {
    gp_error_clear(); // a graph cuDNN does not take: the legacy API only
    return GP_OK;
  }
  int found = 0, tried = 0;
  gp_status s =
      gp_conv_graph_search(im->dnn, im->stream, made, ptrs, wsp, &found, best, ms, &tried);
  if (s != GP_OK || !found) {
    gp_conv_graph_free(made);
    return s;
  }
  *g = made;
  return GP_OK;
}

// Times the algorithms of one direction on the caller's buffers and caches the choice: the
// legacy API's and the graph API's, the faster kept. The output buffer of backward filter is
// a stand-in: the searches overwrite it, and dw accumulates.
static gp_status conv_search(gp_backend *be, conv_entry *e, int dir, const void *x, const void *w,
                             const void *y, void *out) {
  gp_cuda_impl *im = gp_cuda_of(be);
  const gp_conv2d_desc *d = &e->key.d;
  const int bf16 = e->key.precision == GP_PREC_BF16;
  // (an earlier direction's run may have left its algorithm's math type on the descriptor)
  if (bf16) GP_CUDNN_TRY(cudnnSetConvolutionMathType(e->conv, CUDNN_TENSOR_OP_MATH));
  size_t ws = 0;
  GP_TRY(search_ws_limit(be, e, dir, &ws));
  conv_choice c;
  if (memo_get(im->device, &e->key, dir, &c) && c.ws <= ws &&
      (!c.graph || c.engine.workspace <= ws)) { // within this instance's limit
    GP_TRY(take_choice(be, e, dir, &c));
    gp_dnn_of(be)->conv_searches++; // a choice made for this instance, as a search would
    return GP_OK;
  }
  size_t ws_al = (ws + 255) & ~(size_t)255;
  size_t dw_bytes =
      dir == DIR_FILTER ? (size_t)(d->k * (d->c / d->groups) * d->kh * d->kw) * sizeof(float) : 0;
  void *buf = NULL;
  GP_TRY(gp_dnn_work(be, ws_al + dw_bytes, &buf));
  void *wsp = ws ? buf : NULL;
  // FindEx runs and times the algorithms itself: the inputs must be ready before it starts.
  GP_TRY(gp_cuda_wait(be, "a convolution algorithm search times the device"));
  int got = 0, at = -1, algo = 0;
  size_t mem = 0;
  float legacy_ms = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  void *ptrs[3]; // X, W, Y roles for the graph search
  if (dir == DIR_FWD) {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    GP_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(im->dnn, e->x, x, e->w, w, e->conv, e->y,
                                                        out, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                        p, wsp, ws));
    at = pick(p, got, ws, bf16, (int)e->key.nondeterministic);
    log_search(e, dir, p, got, at, ws);
    if (at >= 0)
      algo = (int)p[at].algo, mem = p[at].memory, math = p[at].mathType, legacy_ms = p[at].time;
    ptrs[0] = (void *)x, ptrs[1] = (void *)w, ptrs[2] = out;
  } else if (dir == DIR_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    GP_CUDNN_TRY(cudnnFindConvolutionBackwardDataAlgorithmEx(
        im->dnn, e->w, w, e->y, y, e->conv, e->x, out, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
        p, wsp, ws));
    at = pick(p, got, ws, bf16, (int)e->key.nondeterministic);
    log_search(e, dir, p, got, at, ws);
    if (at >= 0)
      algo = (int)p[at].algo, mem = p[at].memory, math = p[at].mathType, legacy_ms = p[at].time;
    ptrs[0] = out, ptrs[1] = (void *)w, ptrs[2] = (void *)y;
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    void *stand_in = (char *)buf + ws_al;
    GP_CUDNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        im->dnn, e->x, x, e->y, y, e->conv, e->w, stand_in, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        &got, p, wsp, ws));
    at = pick(p, got, ws, bf16, (int)e->key.nondeterministic);
    log_search(e, dir, p, got, at, ws);
    if (at >= 0)
      algo = (int)p[at].algo, mem = p[at].memory, math = p[at].mathType, legacy_ms = p[at].time;
    ptrs[0] = (void *)x, ptrs[1] = stand_in, ptrs[2] = (void *)y;
  }
  gp_conv_graph *g = NULL;
  gp_conv_engine engine;
  float graph_ms = 0;
  memset(&engine, 0, sizeof engine);
  GP_TRY(graph_search(be, e, dir, ptrs, wsp, ws, &g, &engine, &graph_ms));
  if (g && at >= 0 && graph_ms >= legacy_ms) { // the legacy algorithm is as fast: keep it alone
    gp_conv_graph_free(g);
    g = NULL;
  }
  if (search_log())
    fprintf(stderr, "  chosen: %s (legacy %.4f ms, graph %.4f ms)\n", g ? "graph engine" : "legacy",
            at >= 0 ? legacy_ms : -1.0f, g ? graph_ms : -1.0f);
  if (at < 0 && !g)
    return GP_ERR(GP_ERR_RUNTIME,
                  "conv2d %s: cuDNN has no usable %s algorithm for %lldx%lldx%lldx%lld, "
                  "kernel %lldx%lld, %lld groups (%d tried)",
                  dir_name[dir], bf16 ? "BF16" : "FP32", (long long)d->n, (long long)d->c,
                  (long long)d->h, (long long)d->w, (long long)d->kh, (long long)d->kw,
                  (long long)d->groups, got);
  e->legacy[dir] = at >= 0;
  e->algo[dir] = algo;
  e->ws[dir] = mem;
  e->math[dir] = math;
  e->graph[dir] = g;
  e->found[dir] = 1;
  gp_dnn_of(be)->conv_searches++;
  memset(&c, 0, sizeof c);
  c.device = im->device, c.dir = dir, c.key = e->key, c.legacy = at >= 0, c.algo = algo;
  c.ws = mem, c.math = math, c.graph = g != NULL;
  if (g) c.engine = engine;
  memo_put(&c);
  return GP_OK;
}

// The entry of d with the algorithm of dir chosen, and its workspace.
static gp_status conv_prepare(gp_backend *be, const gp_conv2d_desc *d, int dir, const void *x,
                              const void *w, const void *y, void *out, conv_entry **ep, void **ws) {
  conv_entry *e = NULL;
  GP_TRY(entry_get(be, d, &e));
  if (e->found[dir])
    gp_dnn_of(be)->conv_hits++;
  else
    GP_TRY(conv_search(be, e, dir, x, w, y, out));
  *ws = NULL;
  size_t need = e->ws[dir];
  if (e->graph[dir] && gp_conv_graph_workspace(e->graph[dir]) > need)
    need = gp_conv_graph_workspace(e->graph[dir]);
  if (need) GP_TRY(gp_dnn_work(be, need, ws));
  *ep = e;
  return GP_OK;
}

// Runs dir's graph plan when there is one and the pointers (X, W, Y roles) suit it: *done 1.
// Otherwise *done 0, and the legacy algorithm must run (an error when there is none).
static gp_status try_graph(gp_backend *be, conv_entry *e, int dir, const void *px, const void *pw,
                           const void *py, void *ws, int *done) {
  void *const ptrs[3] = {(void *)px, (void *)pw, (void *)py};
  *done = 0;
  if (e->graph[dir] && gp_conv_graph_aligned(ptrs)) {
    GP_TRY(gp_conv_graph_run(gp_cuda_of(be)->dnn, e->graph[dir], ptrs, ws));
    *done = 1;
    return GP_OK;
  }
  if (!e->legacy[dir])
    return GP_ERR(GP_ERR_RUNTIME,
                  "conv2d %s: the only cuDNN engine for this shape needs %d-byte aligned tensors",
                  dir_name[dir], GP_CONV_GRAPH_ALIGN);
  return GP_OK;
}

// bf16 mode: the operands as bf16 copies, cuDNN writes a bf16 result, widened to f32 (and the
// bias added, or the result added to dw) in f32 by bf16.cu. The math type of the chosen
// algorithm is set before each run: the descriptor is shared by the three directions, and
// FindEx reports for each algorithm the math type it was timed with.
static gp_status conv_forward_bf16(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                   const float *w, const float *bias, float *y) {
  const int64_t nx = d->n * d->c * d->h * d->w, nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  const int64_t ny = d->n * d->k * d->oh * d->ow;
  void *xb, *wb, *yb, *ws;
  GP_TRY(gp_cuda_bf16_operands(be, x, nx, w, nw, ny, &xb, &wb, &yb));
  conv_entry *e;
  GP_TRY(conv_prepare(be, d, DIR_FWD, xb, wb, NULL, yb, &e, &ws));
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_FWD, xb, wb, yb, ws, &done));
  const float one = 1.0f, zero = 0.0f;
  if (!done) {
    GP_CUDNN_TRY(cudnnSetConvolutionMathType(e->conv, e->math[DIR_FWD]));
    GP_CUDNN_TRY(cudnnConvolutionForward(gp_cuda_of(be)->dnn, &one, e->x, xb, e->w, wb, e->conv,
                                         (cudnnConvolutionFwdAlgo_t)e->algo[DIR_FWD], ws,
                                         e->ws[DIR_FWD], &zero, e->y, yb));
  }
  return gp_cuda_bf16_widen(be, ny, d->k, d->oh * d->ow, yb, bias, 0, y);
}

static gp_status conv_backward_data_bf16(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                         const float *w, float *dx) {
  const int64_t nx = d->n * d->c * d->h * d->w, nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  const int64_t ny = d->n * d->k * d->oh * d->ow;
  void *dyb, *wb, *dxb, *ws;
  GP_TRY(gp_cuda_bf16_operands(be, dy, ny, w, nw, nx, &dyb, &wb, &dxb));
  conv_entry *e;
  GP_TRY(conv_prepare(be, d, DIR_DATA, NULL, wb, dyb, dxb, &e, &ws));
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_DATA, dxb, wb, dyb, ws, &done));
  const float one = 1.0f, zero = 0.0f;
  if (!done) {
    GP_CUDNN_TRY(cudnnSetConvolutionMathType(e->conv, e->math[DIR_DATA]));
    GP_CUDNN_TRY(cudnnConvolutionBackwardData(
        gp_cuda_of(be)->dnn, &one, e->w, wb, e->y, dyb, e->conv,
        (cudnnConvolutionBwdDataAlgo_t)e->algo[DIR_DATA], ws, e->ws[DIR_DATA], &zero, e->x, dxb));
  }
  return gp_cuda_bf16_widen(be, nx, 1, 1, dxb, NULL, 0, dx);
}

static gp_status conv_backward_filter_bf16(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                           const float *dy, float *dw, float *dbias) {
  const int64_t nx = d->n * d->c * d->h * d->w, nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  const int64_t ny = d->n * d->k * d->oh * d->ow;
  void *xb, *dyb, *dwb, *ws;
  GP_TRY(gp_cuda_bf16_operands(be, x, nx, dy, ny, nw, &xb, &dyb, &dwb));
  conv_entry *e;
  GP_TRY(conv_prepare(be, d, DIR_FILTER, xb, NULL, dyb, NULL, &e, &ws));
  // beta = 0 into the bf16 result; the accumulation over micro-batches is the f32 add after.
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_FILTER, xb, dwb, dyb, ws, &done));
  const float one = 1.0f, zero = 0.0f;
  if (!done) {
    GP_CUDNN_TRY(cudnnSetConvolutionMathType(e->conv, e->math[DIR_FILTER]));
    GP_CUDNN_TRY(
        cudnnConvolutionBackwardFilter(gp_cuda_of(be)->dnn, &one, e->x, xb, e->y, dyb, e->conv,
                                       (cudnnConvolutionBwdFilterAlgo_t)e->algo[DIR_FILTER], ws,
                                       e->ws[DIR_FILTER], &zero, e->w, dwb));
  }
  GP_TRY(gp_cuda_bf16_widen(be, nw, 1, 1, dwb, NULL, 1, dw));
  if (dbias) GP_TRY(gp_dnn_channel_sum(be, d->n, d->k, d->oh * d->ow, dy, dbias));
  return GP_OK;
}

static gp_status conv_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                              const float *w, const float *bias, float *y) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_desc(d));
  if (d->n == 0) return GP_OK;
  if (be->precision != GP_PREC_FP32) return conv_forward_bf16(be, d, x, w, bias, y);
  conv_entry *e;
  void *ws;
  GP_TRY(conv_prepare(be, d, DIR_FWD, x, w, NULL, y, &e, &ws));
  const float one = 1.0f, zero = 0.0f;
  cudnnHandle_t h = gp_cuda_of(be)->dnn;
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_FWD, x, w, y, ws, &done));
  if (!done)
    GP_CUDNN_TRY(cudnnConvolutionForward(h, &one, e->x, x, e->w, w, e->conv,
                                         (cudnnConvolutionFwdAlgo_t)e->algo[DIR_FWD], ws,
                                         e->ws[DIR_FWD], &zero, e->y, y));
  if (bias) GP_CUDNN_TRY(cudnnAddTensor(h, &one, e->bias, bias, &one, e->y, y));
  return GP_OK;
}

static gp_status conv_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                    const float *w, float *dx) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_desc(d));
  if (d->n == 0) return GP_OK;
  if (be->precision != GP_PREC_FP32) return conv_backward_data_bf16(be, d, dy, w, dx);
  conv_entry *e;
  void *ws;
  GP_TRY(conv_prepare(be, d, DIR_DATA, NULL, w, dy, dx, &e, &ws));
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_DATA, dx, w, dy, ws, &done));
  const float one = 1.0f, zero = 0.0f;
  if (!done)
    GP_CUDNN_TRY(cudnnConvolutionBackwardData(gp_cuda_of(be)->dnn, &one, e->w, w, e->y, dy, e->conv,
                                              (cudnnConvolutionBwdDataAlgo_t)e->algo[DIR_DATA], ws,
                                              e->ws[DIR_DATA], &zero, e->x, dx));
  return GP_OK;
}

static gp_status conv_backward_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                      const float *dy, float *dw, float *dbias) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_desc(d));
  if (d->n == 0) return GP_OK;
  // BF16_MIXED: dw, unrounded so M changes nothing, by the fp32 path on bf16-rounded f32 copies
  // of the operands (exact products, as the CPU); dbias first: it uses the copies' workspace.
  if (be->precision == GP_PREC_BF16_MIXED) {
    if (dbias) GP_TRY(gp_dnn_channel_sum(be, d->n, d->k, d->oh * d->ow, dy, dbias));
    float *xr, *dyr; // (products of bf16 values are exact in f32: no TF32 needed)
    GP_TRY(gp_cuda_bf16_rounded_f32(be, x, d->n * d->c * d->h * d->w, dy,
                                    d->n * d->k * d->oh * d->ow, &xr, &dyr));
    be->precision = GP_PREC_FP32; // (the fp32 path and its algorithm cache entry)
    gp_status st = conv_backward_filter(be, d, xr, dyr, dw, NULL);
    be->precision = GP_PREC_BF16_MIXED;
    return st;
  }
  if (be->precision != GP_PREC_FP32) return conv_backward_filter_bf16(be, d, x, dy, dw, dbias);
  conv_entry *e;
  void *ws;
  GP_TRY(conv_prepare(be, d, DIR_FILTER, x, NULL, dy, NULL, &e, &ws));
  // beta = 1: parameter gradients accumulate over micro-batches (the graph's operation too).
  int done = 0;
  GP_TRY(try_graph(be, e, DIR_FILTER, x, dw, dy, ws, &done));
  const float one = 1.0f;
  if (!done)
    GP_CUDNN_TRY(
        cudnnConvolutionBackwardFilter(gp_cuda_of(be)->dnn, &one, e->x, x, e->y, dy, e->conv,
                                       (cudnnConvolutionBwdFilterAlgo_t)e->algo[DIR_FILTER], ws,
                                       e->ws[DIR_FILTER], &one, e->w, dw));
  if (dbias) GP_TRY(gp_dnn_channel_sum(be, d->n, d->k, d->oh * d->ow, dy, dbias));
  return GP_OK;
}

void gp_dnn_install_conv(gp_backend *be) {
  be->conv2d_forward = conv_forward;
  be->conv2d_backward_data = conv_backward_data;
  be->conv2d_backward_filter = conv_backward_filter;
}

/* ---- install and release ---- */

gp_status gp_cuda_dnn_install(gp_backend *be) {
  gp_cuda_impl *im = gp_cuda_of(be);
  if (im->dnn_state) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  gp_dnn_state *st = (gp_dnn_state *)calloc(1, sizeof *st);
  if (!st) return GP_ERR(GP_ERR_NOMEM, "out of host memory for the CUDA dnn state");
  im->dnn_state = st; // from here gp_cuda_dnn_release frees whatever is set
  GP_CUDA_TRY(cudaDeviceGetAttribute(&st->sms, cudaDevAttrMultiProcessorCount, im->device));
  if (st->sms < 1) st->sms = 1;
  GP_TRY(gp_cuda_dev_alloc(be, GP_DNN_FLAGS * sizeof(unsigned long long), (void **)&st->flags_dev));
  GP_CUDA_TRY(cudaMallocHost(&st->flags_host, GP_DNN_FLAGS * sizeof(unsigned long long)));
  gp_dnn_install_conv(be);
  gp_dnn_install_pool(be);
  gp_dnn_install_norm(be);
  gp_dnn_install_rmsnorm(be);
  gp_dnn_install_seq(be);
  gp_dnn_install_shapes(be);
  gp_dnn_install_resize(be);
  gp_dnn_install_sdpa(be);
  return GP_OK;
}

void gp_cuda_dnn_release(gp_backend *be) {
  if (!be || !be->impl) return;
  gp_cuda_impl *im = gp_cuda_of(be);
  gp_dnn_state *st = (gp_dnn_state *)im->dnn_state;
  if (!st) return;
  if (gp_cuda_use(be) == GP_OK && im->stream) cudaStreamSynchronize(im->stream);
  gp_dnn_conv_release(st);
  gp_dnn_sdpa_release(be);
  if (st->work) gp_cuda_dev_free(be, st->work);
  if (st->flags_dev) gp_cuda_dev_free(be, st->flags_dev);
  if (st->flags_host) cudaFreeHost(st->flags_host);
  free(st);
  im->dnn_state = NULL;
}

extern "C" gp_status gp_cuda_conv_cache_stats(gp_backend *be, int64_t *searches, int64_t *hits) {
  if (!be || !be->name || strcmp(be->name, "cuda") != 0 || !be->impl || !gp_cuda_of(be)->dnn_state)
    return GP_ERR(GP_ERR_USAGE, "gp_cuda_conv_cache_stats: not a CUDA backend instance");
  gp_dnn_state *st = gp_dnn_of(be);
  *searches = st->conv_searches;
  *hits = st->conv_hits;
  return GP_OK;
}
