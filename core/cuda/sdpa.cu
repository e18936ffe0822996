// Fused attention on the CUDA backend (core/backend.h sdpa_forward / sdpa_backward): cuDNN's
// flash-attention engines through the graphs of sdpa_graph.cu, their plans cached per shape.
// The layer's tensors are f32 with any row strides; they go through bf16 packed copies in the
// dnn family's private workspace (rounded as the bf16 GEMMs round their operands) and the
// results come back widened to f32. Where cuDNN, the device or the shape cannot, the op says
// so once per reason on stderr and answers "not taken": the layer runs its plain path.
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cuda/dnn_internal.h"
#include "core/cuda/sdpa.h"
#include "core/env.h"

#define NO_FLAG ULLONG_MAX

// Plans per shape: a forward, and for training a backward; `why` is set when cuDNN built
// none (the shape is then not tried again).
typedef struct sdpa_entry {
  gp_sdpa_shape s;
  gp_sdpa_graph *fwd, *bwd;
  const char *why;
  struct sdpa_entry *next;
} sdpa_entry;

struct gp_sdpa_cache {
  sdpa_entry *head;
};

namespace {

// The reasons the fused path is not taken, each said once per process.
enum { WHY_VERSION, WHY_ARCH, WHY_WIDTH, WHY_MASK, WHY_ENGINE, WHY_COUNT };
int said[WHY_COUNT];

void say_once(int why, const char *fmt, const char *detail) {
  if (__atomic_exchange_n(&said[why], 1, __ATOMIC_RELAXED)) return;
  fprintf(stderr, "gpipe: attention runs unfused (plain bf16 path): ");
  fprintf(stderr, fmt, detail);
  fputc('\n', stderr);
}

// Round to nearest, ties to even, NaN kept: the bits of bf16.cu's (and the CPU's) rounding.
__device__ __forceinline__ uint16_t to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t q = (u | 0x00400000u) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

// rows x cols of src (row stride ld) to packed bf16.
__global__ void pack_k(int64_t rows, int64_t cols, const float *__restrict__ src, int64_t ld,
                       uint16_t *__restrict__ dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[i] = to_bf16(src[r * ld + c]);
  }
}

// packed bf16 rows x cols to f32 rows of stride ld.
__global__ void unpack_k(int64_t rows, int64_t cols, const uint16_t *__restrict__ src,
                         float *__restrict__ dst, int64_t ld) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[r * ld + c] = __uint_as_float((uint32_t)src[i] << 16);
  }
}

// Per sample: seq_q = tq, seq_kv = the count of leading 1s of its key mask (tk without one);
// the sample is flagged (slot 0) when the mask is not 1s then 0s with at least one 1, or holds
// another value.
template <typename T>
__global__ void lengths_k(int64_t batch, int64_t tq, int64_t tk, const T *__restrict__ keep,
                          int32_t *seq_q, int32_t *seq_kv, unsigned long long *flag) {
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < batch;
       b += (int64_t)gridDim.x * blockDim.x) {
    const T *m = keep ? keep + b * tk : NULL;
    int64_t len = m ? 0 : tk;
    while (m && len < tk && m[len] == (T)1)
      len++;
    int bad = len == 0;
    for (int64_t j = len; j < tk && !bad; j++)
      bad = m[j] != (T)0;
    seq_q[b] = (int32_t)tq;
    seq_kv[b] = (int32_t)len;
    if (bad && flag) gp_dnn_flag(flag, b);
  }
}

gp_status pack(gp_backend *be, int64_t rows, int64_t cols, const float *src, int64_t ld,
               void *dst) {
  const int64_t n = rows * cols;
  pack_k<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, src, ld, (uint16_t *)dst);
  GP_CUDA_LAUNCHED("sdpa pack_k");
  return GP_OK;
}

gp_status unpack(gp_backend *be, int64_t rows, int64_t cols, const void *src, float *dst,
                 int64_t ld) {
  const int64_t n = rows * cols;
  unpack_k<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, (const uint16_t *)src, dst, ld);
  GP_CUDA_LAUNCHED("sdpa unpack_k");
  return GP_OK;
}

// The key lengths of a padding mask (or full ones, without) into seq (seq_q then seq_kv,
// [batch] each); with check,
// *prefix says whether every sample's mask is 1s then 0s (this waits for the device).
gp_status lengths(gp_backend *be, const gp_sdpa_desc *d, int32_t *seq, int check, int *prefix) {
  gp_dnn_state *st = gp_dnn_of(be);
  cudaStream_t s = gp_cuda_of(be)->stream;
  const unsigned blocks = gp_dnn_blocks(be, d->batch, 64);
  unsigned long long *flag = check ? st->flags_dev : NULL;
  if (check) GP_TRY(gp_dnn_flags_reset(be, 1));
  if (!d->keep_i32)
    lengths_k<float>
        <<<blocks, 64, 0, s>>>(d->batch, d->tq, d->tk, d->keep_f32, seq, seq + d->batch, flag);
  else
    lengths_k<int32_t>
        <<<blocks, 64, 0, s>>>(d->batch, d->tq, d->tk, d->keep_i32, seq, seq + d->batch, flag);
  GP_CUDA_LAUNCHED("sdpa lengths_k");
  if (!check) return GP_OK;
  GP_TRY(gp_dnn_flags_read(be, 1));
  *prefix = st->flags_host[0] == NO_FLAG;
  return GP_OK;
}

// cuDNN up to 9.15.0 computes the backward wrongly for key counts not a multiple of 128
// without a padding mask (cudnn-frontend works around it so): the backward graph then takes
// one, with every sample's full lengths.
int bwd_needs_lengths(const gp_sdpa_shape *s) {
  return !s->padding && s->tk % 128 && cudnnGetVersion() <= 91500;
}

gp_sdpa_shape shape_of(const gp_backend *be, const gp_sdpa_desc *d) {
  gp_sdpa_shape s;
  s.nondeterministic = be->nondeterministic != 0;
  s.b = d->batch;
  s.h = d->heads;
  s.hk = d->kv_heads;
  s.tq = d->tq;
  s.tk = d->tk;
  s.d = d->dh;
  s.causal = d->causal != 0;
  s.padding = d->keep_f32 || d->keep_i32;
  return s;
}

int same(const gp_sdpa_shape *a, const gp_sdpa_shape *b) {
  return a->b == b->b && a->h == b->h && a->hk == b->hk && a->tq == b->tq && a->tk == b->tk &&
         a->d == b->d && a->causal == b->causal && a->padding == b->padding &&
         a->nondeterministic == b->nondeterministic;
}

gp_sdpa_cache *cache_of(gp_backend *be) {
  gp_dnn_state *st = gp_dnn_of(be);
  if (!st->sdpa) st->sdpa = (gp_sdpa_cache *)calloc(1, sizeof *st->sdpa);
  return st->sdpa;
}

// The entry of d's shape, its plans built on first use (the backward's when training).
gp_status lookup(gp_backend *be, const gp_sdpa_desc *d, int need_bwd, sdpa_entry **out) {
  *out = NULL;
  gp_sdpa_cache *c = cache_of(be);
  if (!c) return GP_ERR(GP_ERR_NOMEM, "attention: out of host memory for the plan cache");
  const gp_sdpa_shape s = shape_of(be, d);
  sdpa_entry *e = c->head;
  while (e && !same(&e->s, &s))
    e = e->next;
  if (!e) {
    e = (sdpa_entry *)calloc(1, sizeof *e);
    if (!e) return GP_ERR(GP_ERR_NOMEM, "attention: out of host memory for the plan cache");
    e->s = s;
    e->next = c->head;
    c->head = e;
  }
  cudnnHandle_t h = gp_cuda_of(be)->dnn;
  if (!e->why && !e->fwd) GP_TRY(gp_sdpa_graph_make(h, &s, 0, &e->fwd, &e->why));
  if (!e->why && need_bwd && !e->bwd) {
    gp_sdpa_shape sb = s;
    sb.padding = s.padding || bwd_needs_lengths(&s);
    GP_TRY(gp_sdpa_graph_make(h, &sb, 1, &e->bwd, &e->why));
  }
  *out = e;
  return GP_OK;
}

// 1 (and the reason said once) when something rules the fused path out before any shape is
// tried: the loaded cuDNN, the device, the head width; 0 otherwise.
int unsupported(gp_backend *be, const gp_sdpa_desc *d) {
  char buf[96];
  const size_t v = cudnnGetVersion();
  if (v < 90000 || v == 91000 || v == 91001) { // 9.10.0 and 9.10.1: cuDNN's known SDPA bugs
    snprintf(buf, sizeof buf, "%zu", v);
    say_once(WHY_VERSION, "cuDNN %s: the fused path needs 9.0 or newer, not 9.10.0 or 9.10.1", buf);
    return 1;
  }
  int major = 0, minor = 0;
  const int dev = gp_cuda_of(be)->device;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      major < 8) {
    cudaGetLastError();
    snprintf(buf, sizeof buf, "%d.%d", major, minor);
    say_once(WHY_ARCH, "compute capability %s: cuDNN's fused attention needs 8.0 or newer", buf);
    return 1;
  }
  if (d->dh % 8 || d->dh > 128) {
    snprintf(buf, sizeof buf, "%lld", (long long)d->dh);
    say_once(WHY_WIDTH, "head width %s: the fused path takes multiples of 8 up to 128", buf);
    return 1;
  }
  return 0;
}

size_t up(size_t bytes) {
  return (bytes + 255) & ~(size_t)255;
}

gp_status check_desc(const gp_sdpa_desc *d) {
  if (d->batch < 1 || d->heads < 1 || d->kv_heads < 1 || d->tq < 1 || d->tk < 1 || d->dh < 1 ||
      d->heads % d->kv_heads || d->ldq < d->heads * d->dh || d->ldkv < d->kv_heads * d->dh ||
      (d->keep_f32 && d->keep_i32) || d->batch * d->heads * d->tq > INT_MAX || d->tq > INT_MAX ||
      d->tk > INT_MAX)
    return GP_ERR(GP_ERR_RUNTIME,
                  "sdpa: bad descriptor (batch %lld, heads %lld / %lld, tq %lld, tk %lld, dh %lld, "
                  "ldq %lld, ldkv %lld)",
                  (long long)d->batch, (long long)d->heads, (long long)d->kv_heads,
                  (long long)d->tq, (long long)d->tk, (long long)d->dh, (long long)d->ldq,
                  (long long)d->ldkv);
  return GP_OK;
}

// The bf16 copies and the rest of one call, in the private workspace.
struct staging {
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *sum, *ws, *dq_acc;
  int32_t *seq;
};

gp_status stage(gp_backend *be, const gp_sdpa_desc *d, const sdpa_entry *e, int bwd, staging *g) {
  const int acc = bwd && e->s.nondeterministic;
  const size_t plan_ws = gp_sdpa_graph_workspace(bwd ? e->bwd : e->fwd);
  const size_t nq = (size_t)(d->batch * d->tq * d->heads * d->dh) * 2,
               nk = (size_t)(d->batch * d->tk * d->kv_heads * d->dh) * 2;
  const size_t sizes[12] = {up(nq),
                            up(nk),
                            up(nk),
                            up(nq),
                            bwd ? up(nq) : 0,
                            bwd ? up(nq) : 0,
                            bwd ? up(nk) : 0,
                            bwd ? up(nk) : 0,
                            bwd ? up((size_t)(d->batch * d->heads * d->tq) * 4) : 0,
                            up((size_t)d->batch * 8),
                            up(plan_ws),
                            acc ? up(nq / 2 * 4) : 0};
  size_t total = 0;
  for (int i = 0; i < 12; i++)
    total += sizes[i];
  char *w = NULL;
  GP_TRY(gp_dnn_work(be, total, (void **)&w));
  void *at[12];
  for (int i = 0; i < 12; i++) {
    at[i] = sizes[i] ? w : NULL;
    w += sizes[i];
  }
  g->q = at[0];
  g->k = at[1];
  g->v = at[2];
  g->o = at[3];
  g->dout = at[4];
  g->dq = at[5];
  g->dk = at[6];
  g->dv = at[7];
  g->sum = at[8];
  g->seq = (int32_t *)at[9];
  g->ws = at[10];
  g->dq_acc = at[11];
  return GP_OK;
}

float neg_inf_value(void) {
  // cuDNN before 9.10 wants the lowest float rather than -inf as the masked score
  return cudnnGetVersion() < 91000 ? -FLT_MAX : -INFINITY;
}

gp_status sdpa_forward(gp_backend *be, const gp_sdpa_desc *d, const float *q, const float *k,
                       const float *v, float *o, float *lse, int *taken) {
  *taken = 0;
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_desc(d));
  if (be->precision == GP_PREC_FP32 || !gp_env_get(GP_ENV_SDPA, 1) || unsupported(be, d))
    return GP_OK;
  sdpa_entry *e;
  GP_TRY(lookup(be, d, d->training, &e));
  if (e->why) {
    char buf[160];
    snprintf(buf, sizeof buf,
             "%s (first refused: batch %lld, heads %lld / %lld, tq %lld, tk %lld, dh %lld)", e->why,
             (long long)d->batch, (long long)d->heads, (long long)d->kv_heads, (long long)d->tq,
             (long long)d->tk, (long long)d->dh);
    say_once(WHY_ENGINE, "cuDNN builds no fused attention: %s", buf);
    return GP_OK;
  }
  staging g;
  GP_TRY(stage(be, d, e, 0, &g));
  if (e->s.padding) {
    int prefix = 0;
    GP_TRY(lengths(be, d, g.seq, 1, &prefix));
    if (!prefix) {
      say_once(WHY_MASK, "%s",
               "a key-padding mask that is not 1s then 0s (with a 1) in every sample");
      return GP_OK;
    }
  }
  const int64_t rq = d->batch * d->tq, rk = d->batch * d->tk, wq = d->heads * d->dh,
                wk = d->kv_heads * d->dh;
  GP_TRY(pack(be, rq, wq, q, d->ldq, g.q));
  GP_TRY(pack(be, rk, wk, k, d->ldkv, g.k));
  GP_TRY(pack(be, rk, wk, v, d->ldkv, g.v));
  float scale = d->scale, neg = neg_inf_value();
  void *ptrs[GP_SDPA_UIDS + 1] = {0};
  ptrs[GP_SDPA_Q] = g.q;
  ptrs[GP_SDPA_K] = g.k;
  ptrs[GP_SDPA_V] = g.v;
  ptrs[GP_SDPA_O] = g.o;
  ptrs[GP_SDPA_STATS] = lse;
  ptrs[GP_SDPA_SCALE] = &scale;
  ptrs[GP_SDPA_NEG_INF] = &neg;
  if (e->s.padding) {
    ptrs[GP_SDPA_SEQ_Q] = g.seq;
    ptrs[GP_SDPA_SEQ_KV] = g.seq + d->batch;
  }
  GP_TRY(gp_sdpa_graph_run(gp_cuda_of(be)->dnn, e->fwd, ptrs, g.ws));
  GP_TRY(unpack(be, rq, wq, g.o, o, wq));
  *taken = 1;
  return GP_OK;
}

gp_status sdpa_backward(gp_backend *be, const gp_sdpa_desc *d, const float *q, const float *k,
                        const float *v, const float *o, const float *lse, const float *dout,
                        float *dq, float *dk, float *dv) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(check_desc(d));
  sdpa_entry *e;
  GP_TRY(lookup(be, d, 1, &e));
  if (e->why || !e->bwd)
    return GP_ERR(GP_ERR_RUNTIME, "sdpa_backward: no fused backward for this shape (%s)",
                  e->why ? e->why : "its forward was not taken");
  staging g;
  GP_TRY(stage(be, d, e, 1, &g));
  const int lens = e->s.padding || bwd_needs_lengths(&e->s);
  if (lens) GP_TRY(lengths(be, d, g.seq, 0, NULL));
  if (e->s.padding) {
    // the engine may leave the rows of masked keys unwritten: their gradient is 0
    const size_t nk = (size_t)(d->batch * d->tk * d->kv_heads * d->dh) * 2;
    GP_CUDA_TRY(cudaMemsetAsync(g.dk, 0, nk, gp_cuda_of(be)->stream));
    GP_CUDA_TRY(cudaMemsetAsync(g.dv, 0, nk, gp_cuda_of(be)->stream));
  }
  const int64_t rq = d->batch * d->tq, rk = d->batch * d->tk, wq = d->heads * d->dh,
                wk = d->kv_heads * d->dh;
  GP_TRY(pack(be, rq, wq, q, d->ldq, g.q));
  GP_TRY(pack(be, rk, wk, k, d->ldkv, g.k));
  GP_TRY(pack(be, rk, wk, v, d->ldkv, g.v));
  GP_TRY(pack(be, rq, wq, o, wq, g.o)); // bf16 values already: exact
  GP_TRY(pack(be, rq, wq, dout, wq, g.dout));
  float scale = d->scale, neg = neg_inf_value(), one = 1.0f;
  void *ptrs[GP_SDPA_UIDS + 1] = {0};
  ptrs[GP_SDPA_Q] = g.q;
  ptrs[GP_SDPA_K] = g.k;
  ptrs[GP_SDPA_V] = g.v;
  ptrs[GP_SDPA_O] = g.o;
  ptrs[GP_SDPA_STATS] = (void *)lse;
  ptrs[GP_SDPA_SCALE] = &scale;
  ptrs[GP_SDPA_NEG_INF] = &neg;
  ptrs[GP_SDPA_ONE] = &one;
  ptrs[GP_SDPA_DO] = g.dout;
  ptrs[GP_SDPA_DQ] = g.dq;
  ptrs[GP_SDPA_DK] = g.dk;
  ptrs[GP_SDPA_DV] = g.dv;
  ptrs[GP_SDPA_SUM] = g.sum;
  if (g.dq_acc) { // cuDNN before 9.6 adds into it without clearing it first
    ptrs[GP_SDPA_DQ_ACCUM] = g.dq_acc;
    GP_CUDA_TRY(cudaMemsetAsync(g.dq_acc, 0, (size_t)(rq * wq) * 4, gp_cuda_of(be)->stream));
  }
  if (lens) {
    ptrs[GP_SDPA_SEQ_Q] = g.seq;
    ptrs[GP_SDPA_SEQ_KV] = g.seq + d->batch;
  }
  GP_TRY(gp_sdpa_graph_run(gp_cuda_of(be)->dnn, e->bwd, ptrs, g.ws));
  GP_TRY(unpack(be, rq, wq, g.dq, dq, d->ldq));
  GP_TRY(unpack(be, rk, wk, g.dk, dk, d->ldkv));
  GP_TRY(unpack(be, rk, wk, g.dv, dv, d->ldkv));
  return GP_OK;
}

} // namespace

void gp_dnn_install_sdpa(gp_backend *be) {
#if CUDNN_VERSION >= 90000 // the graphs follow cuDNN 9's patterns
  be->sdpa_forward = sdpa_forward;
  be->sdpa_backward = sdpa_backward;
#else
  (void)be;
#endif
}

void gp_dnn_sdpa_release(gp_backend *be) {
  gp_dnn_state *st = gp_dnn_of(be);
  if (!st || !st->sdpa) return;
  for (sdpa_entry *e = st->sdpa->head, *next; e; e = next) {
    next = e->next;
    gp_sdpa_graph_free(e->fwd);
    gp_sdpa_graph_free(e->bwd);
    free(e);
  }
  free(st->sdpa);
  st->sdpa = NULL;
}
