/* bfloat16 on the CPU backend (be->precision != GP_PREC_FP32): the rounding, and the GEMM and
 * convolution wrappers that make the f32 code compute what the CUDA backend computes on tensor
 * cores (operands rounded to bf16, f32 accumulation; convolution results rounded to bf16). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu.h"

/* Operand copies of one GEMM (A, B) and the f32 result of one filter-gradient convolution
 * (whose GEMMs use A and B meanwhile). */
enum { SLOT_A, SLOT_B, SLOT_CONV, SLOT_COUNT };

/* An instance's buffers (gp_cpu_impl.bf16), SLOT_COUNT per worker, allocated with its alloc
 * (counted in mem_used, grown only), freed by gp_cpu_bf16_release from its destroy. Not
 * be->scratch: layers pass GEMM operands that live there. */
struct gp_cpu_bf16 {
  int n; /* slots: SLOT_COUNT * be->threads */
  float **buf;
  size_t *bytes;
};

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The bits of f rounded to bf16 (low half zero). Round to nearest, ties to even: add just
 * under half a bf16 ulp, plus one when the kept part is odd; overflow carries into the
 * exponent and gives Inf, as it should. A NaN stays a NaN (quieted, sign kept), which the
 * addition could carry into Inf. Branch-free, so the array loop vectorizes. */
static inline uint32_t round_bits(uint32_t u) {
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t q = (u | 0x00400000u) & 0xffff0000u;
  /* (as signed: SSE2 compares only those) */
  return (int32_t)(u & 0x7fffffffu) > (int32_t)0x7f800000 ? q : r;
}

uint16_t gp_bf16_from_f32(float f) {
  return (uint16_t)(round_bits(f32_bits(f)) >> 16);
}

float gp_bf16_to_f32(uint16_t h) {
  return bits_f32((uint32_t)h << 16);
}

float gp_bf16_round(float f) {
  return bits_f32(round_bits(f32_bits(f)));
}

void gp_bf16_round_array(int64_t n, const float *x, float *y) {
  for (int64_t i = 0; i < n; i++)
    y[i] = bits_f32(round_bits(f32_bits(x[i])));
}

static gp_status round_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  float *x = ctx;
  gp_bf16_round_array(hi - lo, x + lo, x + lo);
  return GP_OK;
}

gp_status gp_cpu_round_bf16(gp_backend *be, int64_t n, float *x) {
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, round_part, x);
}

/* BF16_MIXED's stored activations: the high half of each value's bits, and back. Truncation,
 * not rounding: the values are on the bf16 grid (round_bf16 left the low half zero), so it is
 * exact, NaN payloads included, as the CUDA kernels' same truncation. */
typedef struct pack_ctx {
  const void *x;
  void *y;
} pack_ctx;

static gp_status pack_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const pack_ctx *c = ctx;
  const float *x = c->x;
  uint16_t *y = c->y;
  for (int64_t i = lo; i < hi; i++)
    y[i] = (uint16_t)(f32_bits(x[i]) >> 16);
  return GP_OK;
}

static gp_status unpack_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const pack_ctx *c = ctx;
  const uint16_t *x = c->x;
  float *y = c->y;
  for (int64_t i = lo; i < hi; i++)
    y[i] = bits_f32((uint32_t)x[i] << 16);
  return GP_OK;
}

gp_status gp_cpu_pack_bf16(gp_backend *be, int64_t n, const float *x, uint16_t *y) {
  pack_ctx c = {x, y};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, pack_part, &c);
}

gp_status gp_cpu_unpack_bf16(gp_backend *be, int64_t n, const uint16_t *x, float *y) {
  pack_ctx c = {x, y};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, unpack_part, &c);
}

/* The buffers of be, made on first use. */
void gp_cpu_bf16_release(gp_backend *be) {
  gp_cpu_impl *im = be->impl;
  if (!im || !im->bf16) return;
  for (int i = 0; i < im->bf16->n; i++)
    be->free(be, im->bf16->buf[i]);
  free(im->bf16->buf);
  free(im->bf16->bytes);
  free(im->bf16);
  im->bf16 = NULL;
}

/* The buffers of be, made on first use outside a parallel call (gp_cpu_bf16_prepare). */
static gp_status bufs_of(gp_backend *be, gp_cpu_bf16 **out) {
  gp_cpu_impl *im = be->impl;
  if (!im->bf16) {
    gp_cpu_bf16 *e = calloc(1, sizeof *e);
    int n = SLOT_COUNT * be->threads;
    if (e) {
      e->n = n;
      e->buf = calloc((size_t)n, sizeof *e->buf);
      e->bytes = calloc((size_t)n, sizeof *e->bytes);
    }
    if (!e || !e->buf || !e->bytes) {
      if (e) free(e->buf), free(e->bytes);
      free(e);
      return GP_ERR(GP_ERR_NOMEM, "out of host memory for the bf16 operand buffers");
    }
    im->bf16 = e;
  }
  *out = im->bf16;
  return GP_OK;
}

gp_status gp_cpu_bf16_prepare(gp_backend *be) {
  gp_cpu_bf16 *e;
  return bufs_of(be, &e);
}

/* Slot i of worker w in be's buffers e with room for n floats (grown only). */
static gp_status slot(gp_backend *be, gp_cpu_bf16 *e, int w, int i, int64_t n, float **out) {
  i += SLOT_COUNT * w;
  size_t bytes = (size_t)n * sizeof(float);
  if (!e->buf[i] || bytes > e->bytes[i]) {
    void *p = NULL;
    GP_TRY(be->alloc(be, bytes, &p));
    be->free(be, e->buf[i]);
    e->buf[i] = p;
    e->bytes[i] = bytes;
  }
  *out = e->buf[i];
  return GP_OK;
}

/* rows x cols of src (row stride ld) rounded into dst, packed (row stride cols). */
static void round_2d(int64_t rows, int64_t cols, const float *src, int64_t ld, float *dst) {
  if (ld == cols) {
    gp_bf16_round_array(rows * cols, src, dst);
    return;
  }
  for (int64_t r = 0; r < rows; r++)
    gp_bf16_round_array(cols, src + r * ld, dst + r * cols);
}

static int fits_int(int64_t v) {
  return v >= 0 && v <= INT32_MAX;
}

gp_status gp_cpu_bf16_operands(gp_backend *be, int worker, int trans_a, int trans_b, int64_t m,
                               int64_t n, int64_t k, const float **a, int64_t *lda, const float **b,
                               int64_t *ldb) {
  /* Nothing is read, or the GEMM refuses (sizes) or BLAS reports (leading dimensions): leave
   * the operands as they are for it. */
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  if (m <= 0 || n <= 0 || k <= 0 || !fits_int(m) || !fits_int(n) || !fits_int(k) ||
      !fits_int(*lda) || !fits_int(*ldb) || *lda < a_cols || *ldb < b_cols)
    return GP_OK;
  gp_cpu_bf16 *e = NULL;
  float *ra, *rb;
  GP_TRY(bufs_of(be, &e));
  GP_TRY(slot(be, e, worker, SLOT_A, a_rows * a_cols, &ra));
  GP_TRY(slot(be, e, worker, SLOT_B, b_rows * b_cols, &rb));
  round_2d(a_rows, a_cols, *a, *lda, ra);
  round_2d(b_rows, b_cols, *b, *ldb, rb);
  *a = ra;
  *lda = a_cols;
  *b = rb;
  *ldb = b_cols;
  return GP_OK;
}

/* The convolutions: the f32 code (whose GEMMs round the operands, as be->precision says),
 * then the result rounded to bf16, as cuDNN writes it, and only then the bias or the
 * accumulation, in f32. */

gp_status gp_cpu_bf16_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                     const float *w, const float *bias, float *y) {
  GP_TRY(gp_cpu_conv2d_forward_unrounded(be, d, x, w, NULL, y));
  const int64_t ohw = d->oh * d->ow;
  gp_bf16_round_array(d->n * d->k * ohw, y, y);
  if (bias && d->n > 0) GP_TRY(gp_cpu_bias_add(be, d->n, d->k, ohw, bias, y));
  return GP_OK;
}

gp_status gp_cpu_bf16_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                           const float *w, float *dx) {
  GP_TRY(gp_cpu_conv2d_backward_data_unrounded(be, d, dy, w, dx));
  gp_bf16_round_array(d->n * d->c * d->h * d->w, dx, dx);
  return GP_OK;
}

gp_status gp_cpu_bf16_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d,
                                             const float *x, const float *dy, float *dw,
                                             float *dbias) {
  GP_TRY(gp_conv2d_desc_check(d));
  if (d->n == 0) return GP_OK;
  const int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  gp_cpu_bf16 *e = NULL;
  float *part;
  GP_TRY(bufs_of(be, &e));
  GP_TRY(slot(be, e, 0, SLOT_CONV, nw, &part));
  memset(part, 0, (size_t)nw * sizeof(float));
  GP_TRY(gp_cpu_conv2d_backward_filter_unrounded(be, d, x, dy, part, NULL));
  for (int64_t i = 0; i < nw; i++)
    dw[i] += gp_bf16_round(part[i]);
  if (dbias) GP_TRY(gp_cpu_bias_grad(be, d->n, d->k, d->oh * d->ow, dy, dbias));
  return GP_OK;
}
