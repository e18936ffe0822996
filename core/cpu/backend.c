/* The CPU backend: host memory, the operation table and GEMM through OpenBLAS. It is the
 * reference every other backend is tested against, so correctness comes before speed. */
#include <cblas.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu/cpu.h"

#define ALIGN 64

/* Host memory, 64-byte aligned. Each block starts one alignment unit early with its size,
 * so free can keep the instance's count (gp_backend.mem_used) without a table. */
static gp_status host_block(size_t bytes, void **out) {
  /* aligned_alloc wants a multiple of the alignment; zero bytes still gets a valid pointer. */
  size_t n = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (n < bytes) return GP_ERR(GP_ERR_NOMEM, "allocation of %zu bytes is too large", bytes);
  if (n == 0) n = ALIGN;
  void *p = aligned_alloc(ALIGN, n);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
  *out = p;
  return GP_OK;
}

/* The count is updated atomically: workers of a parallel call (team.c) may grow their own
 * buffers at once. */
static gp_status cpu_alloc(gp_backend *be, size_t bytes, void **out) {
  if (bytes > SIZE_MAX - ALIGN)
    return GP_ERR(GP_ERR_NOMEM, "allocation of %zu bytes is too large", bytes);
  size_t used = __atomic_load_n(&be->mem_used, __ATOMIC_RELAXED);
  if (be->mem_limit && used + bytes > be->mem_limit)
    return GP_ERR(GP_ERR_FULL,
                  "allocating %zu bytes would pass the memory limit of %zu bytes (%zu in use)",
                  bytes, be->mem_limit, used);
  char *p = NULL;
  GP_TRY(host_block(bytes + ALIGN, (void **)&p));
  memcpy(p, &bytes, sizeof bytes);
  used = __atomic_add_fetch(&be->mem_used, bytes, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&be->mem_peak, __ATOMIC_RELAXED);
  while (used > peak && !__atomic_compare_exchange_n(&be->mem_peak, &peak, used, 1,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  *out = p + ALIGN;
  return GP_OK;
}

static void cpu_free(gp_backend *be, void *p) {
  if (!p) return;
  char *block = (char *)p - ALIGN;
  size_t bytes;
  memcpy(&bytes, block, sizeof bytes);
  __atomic_sub_fetch(&be->mem_used, bytes, __ATOMIC_RELAXED);
  free(block);
}

static gp_status cpu_host_alloc(gp_backend *be, size_t bytes, void **out) {
  (void)be;
  return host_block(bytes, out);
}

static void cpu_host_free(gp_backend *be, void *p) {
  (void)be;
  free(p);
}

static gp_status cpu_zero(gp_backend *be, void *dst, size_t bytes) {
  (void)be;
  if (bytes) memset(dst, 0, bytes);
  return GP_OK;
}

/* Large copies between separate buffers in pieces over the team: one thread's memcpy left the
 * other core idle (reshape's copy, where the executor cannot run it as a view, ran at 0.2x
 * PyTorch's clone). Overlapping ranges keep memmove. */
#define COPY_PIECE ((int64_t)64 << 10)

typedef struct copy_args {
  char *dst;
  const char *src;
  size_t bytes;
} copy_args;

static gp_status copy_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const copy_args *a = ctx;
  const size_t b0 = (size_t)lo * COPY_PIECE, b1 = (size_t)hi * COPY_PIECE;
  memcpy(a->dst + b0, a->src + b0, (b1 < a->bytes ? b1 : a->bytes) - b0);
  return GP_OK;
}

static gp_status cpu_copy(gp_backend *be, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return GP_OK;
  const char *d = dst, *s = src;
  if (bytes < (size_t)(16 * COPY_PIECE) || (d < s + bytes && s < d + bytes)) {
    memmove(dst, src, bytes);
    return GP_OK;
  }
  copy_args a = {dst, src, bytes};
  return gp_cpu_parallel_for(be, (int64_t)((bytes + COPY_PIECE - 1) / COPY_PIECE), 4, copy_part,
                             &a);
}

static gp_status cpu_sync(gp_backend *be) {
  (void)be;
  return GP_OK;
}

/* Ordering: every op has finished when it returns, so an event marks nothing and waiting on
 * one is immediate; copies between instances are plain copies in one address space. A timer
 * keeps the time of its last record, which is all it needs. */
struct gp_event {
  int timer;
  double t; /* a timer's last record, CLOCK_MONOTONIC seconds */
};

static gp_status cpu_event_create(gp_backend *be, gp_event **out) {
  (void)be;
  *out = calloc(1, sizeof **out);
  return *out ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of host memory for an event");
}

static gp_status cpu_timer_create(gp_backend *be, gp_event **out) {
  GP_TRY(cpu_event_create(be, out));
  (*out)->timer = 1;
  return GP_OK;
}

static void cpu_event_destroy(gp_backend *be, gp_event *ev) {
  (void)be;
  free(ev);
}

static gp_status cpu_event_record(gp_backend *be, gp_queue q, gp_event *ev) {
  (void)be, (void)q;
  if (!ev->timer) return GP_OK;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ev->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  return GP_OK;
}

static gp_status cpu_event_wait(gp_backend *be, gp_queue q, gp_event *ev) {
  (void)be, (void)q, (void)ev;
  return GP_OK;
}

static gp_status cpu_event_sync(gp_backend *be, gp_event *ev) {
  (void)be, (void)ev;
  return GP_OK;
}

static gp_status cpu_event_elapsed(gp_backend *be, gp_event *from, gp_event *to, double *seconds) {
  (void)be;
  *seconds = to->t - from->t;
  return GP_OK;
}

static gp_status cpu_event_query(gp_backend *be, gp_event *ev, int *passed) {
  (void)be, (void)ev;
  *passed = 1;
  return GP_OK;
}

static gp_status cpu_copy_on(gp_backend *be, gp_queue q, void *dst, const void *src, size_t bytes) {
  (void)q;
  return cpu_copy(be, dst, src, bytes);
}

static gp_status cpu_copy_peer(gp_backend *be, gp_queue q, void *dst, int dst_dev, const void *src,
                               int src_dev, size_t bytes) {
  (void)q, (void)dst_dev, (void)src_dev;
  return cpu_copy(be, dst, src, bytes);
}

gp_status gp_cpu_scratch(gp_backend *be, size_t bytes, void **out) {
  gp_cpu_impl *im = be->impl;
  if (gp_cpu_in_task())
    return GP_ERR(GP_ERR_RUNTIME, "internal: a CPU op that needs the scratch buffer was called "
                                  "from inside another op's parallel task");
  if (bytes > im->scratch_bytes || !im->scratch) {
    void *p = NULL;
    GP_TRY(cpu_alloc(be, bytes, &p));
    cpu_free(be, im->scratch);
    im->scratch = p;
    im->scratch_bytes = bytes;
  }
  *out = im->scratch;
  return GP_OK;
}

static void cpu_destroy(gp_backend *be) {
  gp_cpu_impl *im = be->impl;
  gp_cpu_team_release(be);
  gp_cpu_bf16_release(be);
  if (im) cpu_free(be, im->scratch);
  free(im);
  free(be);
}

static int fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

/* C = alpha op(A) op(B) + beta C on the calling thread, after the checks and the k = 0 case;
 * returns 0 when there is nothing left for BLAS to do. */
static int gemm_prelude(gp_status *st, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                        float beta, float *c, int64_t ldc) {
  *st = GP_OK;
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
      !fits_int(ldc)) {
    *st = GP_ERR(GP_ERR_RUNTIME, "gemm %lld x %lld x %lld exceeds the 32-bit BLAS interface",
                 (long long)m, (long long)n, (long long)k);
    return 0;
  }
  if (m == 0 || n == 0) return 0;
  if (k == 0) {
    /* BLAS would scale C by beta; do the same without calling it with k = 0. */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return 0;
  }
  return 1;
}

static void sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
              (int)ldb, beta, c, (int)ldc);
}

gp_status gp_cpu_gemm_serial(gp_backend *be, int worker, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                             const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (be->precision != GP_PREC_FP32) /* then on copies of a and b rounded to bf16 (bf16.c) */
    GP_TRY(gp_cpu_bf16_operands(be, worker, trans_a, trans_b, m, n, k, &a, &lda, &b, &ldb));
  gp_status st;
  if (gemm_prelude(&st, m, n, k, lda, ldb, beta, c, ldc))
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return st;
}

/* Below this many multiply-adds per worker a GEMM stays on one thread. */
#define SPLIT_MACS ((int64_t)1 << 19)
/* Split points fall on multiples of this many rows or columns (the BLAS kernels' blocks). */
#define SPLIT_UNIT 16

typedef struct gemm_split {
  int trans_a, trans_b, by_rows;
  int64_t m, n, k, lda, ldb, ldc, units, parts;
  float alpha, beta;
  const float *a, *b;
  float *c;
} gemm_split;

/* Part p of `parts`: the rows (or columns) of units [units * p / parts, units * (p+1) / parts). */
static gp_status gemm_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const gemm_split *g = ctx;
  int64_t dim = g->by_rows ? g->m : g->n;
  int64_t r0 = g->units * lo / g->parts * SPLIT_UNIT, r1 = g->units * hi / g->parts * SPLIT_UNIT;
  if (r1 > dim) r1 = dim;
  if (r1 <= r0) return GP_OK;
  if (g->by_rows)
    sgemm(g->trans_a, g->trans_b, r1 - r0, g->n, g->k, g->alpha,
          g->a + (g->trans_a ? r0 : r0 * g->lda), g->lda, g->b, g->ldb, g->beta, g->c + r0 * g->ldc,
          g->ldc);
  else
    sgemm(g->trans_a, g->trans_b, g->m, r1 - r0, g->k, g->alpha, g->a, g->lda,
          g->b + (g->trans_b ? r0 * g->ldb : r0), g->ldb, g->beta, g->c + r0, g->ldc);
  return GP_OK;
}

gp_status gp_cpu_gemm(gp_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc) {
  if (be->precision != GP_PREC_FP32)
    GP_TRY(gp_cpu_bf16_operands(be, gp_cpu_worker_index(), trans_a, trans_b, m, n, k, &a, &lda, &b,
                                &ldb));
  gp_status st;
  if (!gemm_prelude(&st, m, n, k, lda, ldb, beta, c, ldc)) return st;
  /* Split the longer of m and n over as many workers as get SPLIT_MACS each; a split along k
   * would make the sums depend on the thread count. */
  gemm_split g = {.trans_a = trans_a,
                  .trans_b = trans_b,
                  .by_rows = m >= n,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = lda,
                  .ldb = ldb,
                  .ldc = ldc,
                  .alpha = alpha,
                  .beta = beta,
                  .a = a,
                  .b = b,
                  .c = c};
  g.units = ((g.by_rows ? m : n) + SPLIT_UNIT - 1) / SPLIT_UNIT;
  double macs = (double)m * (double)n * (double)k;
  int64_t by_work =
      macs / SPLIT_MACS < (double)INT32_MAX ? (int64_t)(macs / SPLIT_MACS) : INT32_MAX;
  g.parts = g.units < by_work ? g.units : by_work;
  if (gp_cpu_workers(be, g.parts) < 2) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return GP_OK;
  }
  if (g.parts > gp_cpu_max_parts(be)) g.parts = gp_cpu_max_parts(be);
  return gp_cpu_parallel(be, g.parts, gemm_task, &g);
}

int gp_cpu_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

gp_status gp_cpu_backend_create(int threads, gp_backend **out) {
  if (threads < 1)
    return GP_ERR(GP_ERR_USAGE, "a CPU backend needs at least 1 thread, got %d", threads);
  gp_backend *be = calloc(1, sizeof *be);
  gp_cpu_impl *im = calloc(1, sizeof *im);
  if (!be || !im) {
    free(be);
    free(im);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory creating a CPU backend");
  }
  be->name = "cpu";
  be->device = -1;
  be->threads = threads;
  be->impl = im;

  be->alloc = cpu_alloc;
  be->free = cpu_free;
  be->zero = cpu_zero;
  be->copy = cpu_copy;
  be->to_host = cpu_copy;
  be->from_host = cpu_copy;
  be->sync = cpu_sync;
  be->scratch = gp_cpu_scratch;
  be->destroy = cpu_destroy;
  be->event_create = cpu_event_create;
  be->event_destroy = cpu_event_destroy;
  be->event_record = cpu_event_record;
  be->event_wait = cpu_event_wait;
  be->event_sync = cpu_event_sync;
  be->timer_create = cpu_timer_create;
  be->event_elapsed = cpu_event_elapsed;
  be->copy_peer = cpu_copy_peer;
  be->host_alloc = cpu_host_alloc;
  be->host_free = cpu_host_free;
  be->from_host_async = cpu_copy;
  be->to_host_on = cpu_copy_on;
  be->from_host_on = cpu_copy_on;
  be->event_query = cpu_event_query;

  be->gemm = gp_cpu_gemm;
  be->gemm_strided_batched = gp_cpu_gemm_strided_batched;
  be->conv2d_forward = gp_cpu_conv2d_forward;
  be->conv2d_backward_data = gp_cpu_conv2d_backward_data;
  be->conv2d_backward_filter = gp_cpu_conv2d_backward_filter;
  be->pool2d_forward = gp_cpu_pool2d_forward;
  be->pool2d_backward = gp_cpu_pool2d_backward;
  be->bias_add = gp_cpu_bias_add;
  be->bias_grad = gp_cpu_bias_grad;
  be->batchnorm_forward_train = gp_cpu_batchnorm_forward_train;
  be->batchnorm_forward_eval = gp_cpu_batchnorm_forward_eval;
  be->batchnorm_backward = gp_cpu_batchnorm_backward;
  be->batchnorm_stats_accumulate = gp_cpu_batchnorm_stats_accumulate;
  be->batchnorm_stats_apply = gp_cpu_batchnorm_stats_apply;
  be->layernorm_forward = gp_cpu_layernorm_forward;
  be->layernorm_backward = gp_cpu_layernorm_backward;
  be->rmsnorm_forward = gp_cpu_rmsnorm_forward;
  be->rmsnorm_backward = gp_cpu_rmsnorm_backward;
  be->act_forward = gp_cpu_act_forward;
  be->act_backward = gp_cpu_act_backward;
  be->dropout_forward = gp_cpu_dropout_forward;
  be->dropout_backward = gp_cpu_dropout_backward;
  be->axpby = gp_cpu_axpby;
  be->mul = gp_cpu_mul;
  be->round_bf16 = gp_cpu_round_bf16;
  be->pack_bf16 = gp_cpu_pack_bf16;
  be->unpack_bf16 = gp_cpu_unpack_bf16;
  be->resize2d_forward = gp_cpu_resize2d_forward;
  be->resize2d_backward = gp_cpu_resize2d_backward;
  be->copy2d = gp_cpu_copy2d;
  be->gather_rows = gp_cpu_gather_rows;
  be->embedding_forward = gp_cpu_embedding_forward;
  be->embedding_backward = gp_cpu_embedding_backward;
  be->attn_softmax_forward = gp_cpu_attn_softmax_forward;
  be->softmax_backward = gp_cpu_softmax_backward;
  be->rope = gp_cpu_rope;
  be->softmax_xent_forward = gp_cpu_softmax_xent_forward;
  be->softmax_xent_backward = gp_cpu_softmax_xent_backward;
  be->softmax_xent_axis_forward = gp_cpu_softmax_xent_axis_forward;
  be->softmax_xent_axis_backward = gp_cpu_softmax_xent_axis_backward;
  be->sum = gp_cpu_sum;
  be->count_correct = gp_cpu_count_correct;
  be->sumsq = gp_cpu_sumsq;
  gp_cpu_install_shapes(be);

  be->sgd_update = gp_cpu_sgd_update;
  be->adamw_update = gp_cpu_adamw_update;
  be->rmsprop_update = gp_cpu_rmsprop_update;

  /* OpenBLAS's own threads are process-global and queue the calls of concurrent instances
   * behind one another; each instance splits its work over its own threads instead (team.c). */
  openblas_set_num_threads(1);
  *out = be;
  return GP_OK;
}

void gp_backend_destroy(gp_backend *be) {
  if (be && be->destroy) be->destroy(be);
}
