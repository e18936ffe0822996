/* The CPU backend's threads (core/cpu/team.c): every op that splits its work over an
 * instance's threads, on shapes large enough to split, gives with 2, 3 and 5 threads what it
 * gives with one: the same bytes for the element-wise loops and per-channel sums (our own
 * loops, split without changing any sum), and within rounding for the GEMMs and convolutions
 * (sample-parallel and split-GEMM convolutions, the row split of backward-filter, GEMMs split
 * by rows and by columns; OpenBLAS rounds a product differently depending on where it falls
 * in its tiles). Every op gives the same bytes when called again. Two instances run side by
 * side from two threads, as pipeline stages do (the suite runs under ThreadSanitizer). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/cpu.h"
#include "tests/support/check.h"

static int failures, passes;
static int exact_cases; /* convolutions checked for the same bytes */

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static float *rnd(int64_t n, uint64_t seed) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)((double)(mix(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  return p;
}

/* One op on one instance: fills out[0..n_out) (which starts as the same random values for
 * every instance, for the ops that accumulate). */
typedef struct op_case {
  const char *name;
  int rounding; /* BLAS inside: equal within rounding, not to the bit */
  int64_t n_out;
  gp_status (*run)(gp_backend *be, const struct op_case *c, float *out);
  gp_conv2d_desc conv;
  int64_t m, n, k;
  int ta, tb;
  const float *a, *b, *x, *y;
} op_case;

static gp_status run_gemm(gp_backend *be, const op_case *c, float *out) {
  int64_t lda = c->ta ? c->m : c->k, ldb = c->tb ? c->k : c->n;
  return be->gemm(be, c->ta, c->tb, c->m, c->n, c->k, 0.75f, c->a, lda, c->b, ldb, 0.5f, out, c->n);
}

static int64_t conv_x(const gp_conv2d_desc *d) {
  return d->n * d->c * d->h * d->w;
}
static int64_t conv_y(const gp_conv2d_desc *d) {
  return d->n * d->k * d->oh * d->ow;
}
static int64_t conv_w(const gp_conv2d_desc *d) {
  return d->k * (d->c / d->groups) * d->kh * d->kw;
}

static gp_status run_conv_fwd(gp_backend *be, const op_case *c, float *out) {
  return be->conv2d_forward(be, &c->conv, c->x, c->a, c->b, out);
}
static gp_status run_conv_data(gp_backend *be, const op_case *c, float *out) {
  return be->conv2d_backward_data(be, &c->conv, c->y, c->a, out);
}
/* dw (accumulated) then dbias (accumulated) in one output */
static gp_status run_conv_filter(gp_backend *be, const op_case *c, float *out) {
  return be->conv2d_backward_filter(be, &c->conv, c->x, c->y, out, out + conv_w(&c->conv));
}

/* [n, c, inner] = m, n, k of the case */
static gp_status run_bn_train(gp_backend *be, const op_case *c, float *out) {
  int64_t total = c->m * c->n * c->k;
  const float *gamma = c->b, *beta = c->b + c->n;
  return be->batchnorm_forward_train(be, c->m, c->n, c->k, 1e-5f, c->x, gamma, beta, out,
                                     out + total, out + total + c->n);
}
static gp_status run_bn_back(gp_backend *be, const op_case *c, float *out) {
  int64_t total = c->m * c->n * c->k;
  const float *gamma = c->b, *mean = c->b + c->n;
  float invstd[64];
  for (int64_t j = 0; j < c->n; j++)
    invstd[j] = 1.0f + 0.01f * (float)j;
  return be->batchnorm_backward(be, c->m, c->n, c->k, c->x, c->y, gamma, mean, invstd, out,
                                out + total, out + total + c->n);
}
static gp_status run_bias(gp_backend *be, const op_case *c, float *out) {
  int64_t total = c->m * c->n * c->k;
  GP_TRY(be->bias_add(be, c->m, c->n, c->k, c->b, out));
  return be->bias_grad(be, c->m, c->n, c->k, c->x, out + total);
}
static gp_status run_act(gp_backend *be, const op_case *c, float *out) {
  int64_t n = c->m;
  GP_TRY(be->act_forward(be, GP_ACTIVATION_GELU, n, c->x, out));
  GP_TRY(be->act_backward(be, GP_ACTIVATION_RELU, n, c->x, NULL, c->y, out + n));
  GP_TRY(be->act_backward(be, GP_ACTIVATION_TANH, n, NULL, c->x, c->y, out + 2 * n));
  GP_TRY(be->dropout_forward(be, n, 0.25f, 7, 1000, c->x, out + 3 * n));
  GP_TRY(be->dropout_backward(be, n, 0.25f, 7, 1000, c->y, out + 4 * n));
  return be->axpby(be, n, 0.5f, c->x, 0.25f, out + 5 * n);
}
/* w, then the optimizer state, for each of the three rules */
static gp_status run_optim(gp_backend *be, const op_case *c, float *out) {
  int64_t n = c->m;
  gp_sgd_hp sgd = {0.1f, 0.9f, 1e-4f, 1};
  gp_adamw_hp adam = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3};
  gp_rmsprop_hp rms = {1e-2f, 0.99f, 1e-8f, 0.9f, 1e-4f};
  GP_TRY(be->sgd_update(be, n, &sgd, out, c->x, out + n));
  GP_TRY(be->adamw_update(be, n, &adam, out + 2 * n, c->x, out + 3 * n, out + 4 * n));
  for (int64_t i = 0; i < n; i++) /* v and sq must not be negative */
    out[4 * n + i] = out[4 * n + i] * out[4 * n + i];
  return be->rmsprop_update(be, n, &rms, out + 5 * n, c->x, out + 6 * n, out + 7 * n);
}
/* [n, c, h, w] = m, n, k, k; 2x2 max (with argmax, stored as floats after y), then 3x3
 * stride-2 average with padding, both directions */
static gp_status run_pool(gp_backend *be, const op_case *c, float *out) {
  int64_t planes = c->m * c->n, s = c->k, hw = s * s;
  gp_pool2d_desc mx = {c->m, c->n, s, s, s / 2, s / 2, 2, 2, 2, 2, 0, 0, 0};
  gp_pool2d_desc av = {c->m, c->n, s, s, (s + 2 - 3) / 2 + 1, (s + 2 - 3) / 2 + 1, 3, 3, 2,
                       2,    1,    1, 0};
  int64_t mo = planes * (s / 2) * (s / 2), ao = planes * av.oh * av.ow;
  int32_t *arg = malloc((size_t)mo * sizeof *arg);
  float *o = out;
  gp_status st = be->pool2d_forward(be, GP_POOL_MAX, &mx, c->x, o, arg);
  o += mo;
  for (int64_t i = 0; st == GP_OK && i < mo; i++)
    o[i] = (float)arg[i];
  o += mo;
  if (st == GP_OK) st = be->pool2d_backward(be, GP_POOL_MAX, &mx, c->y, arg, o);
  o += planes * hw;
  if (st == GP_OK) st = be->pool2d_forward(be, GP_POOL_AVG, &av, c->x, o, NULL);
  o += ao;
  if (st == GP_OK) st = be->pool2d_backward(be, GP_POOL_AVG, &av, c->y, NULL, o);
  free(arg);
  return st;
}

static gp_conv2d_desc conv(int64_t n, int64_t c, int64_t h, int64_t k, int64_t ks, int64_t s,
                           int64_t p, int64_t dil, int64_t g) {
  gp_conv2d_desc d = {n, c, h, h, k, 0, 0, ks, ks, s, s, p, p, dil, dil, g};
  d.oh = d.ow = (h + 2 * p - dil * (ks - 1) - 1) / s + 1;
  return d;
}

/* Runs c on a fresh instance of `threads` threads in `prec`; NULL on failure. */
static float *run_on(const op_case *c, int threads, gp_precision prec, size_t *mem_after) {
  gp_backend *be = NULL;
  if (gp_cpu_backend_create(threads, &be) != GP_OK) return NULL;
  be->precision = prec;
  float *out = rnd(c->n_out, 99);
  gp_status st = c->run(be, c, out);
  CHECK(st == GP_OK, "%s with %d threads", c->name, threads);
  /* twice: the second call reuses the instance's buffers and threads */
  float *again = rnd(c->n_out, 99);
  if (st == GP_OK) {
    st = c->run(be, c, again);
    CHECK(st == GP_OK && memcmp(out, again, (size_t)c->n_out * sizeof *out) == 0,
          "%s with %d threads: a second call gives the same bytes", c->name, threads);
  }
  free(again);
  *mem_after = be->mem_used;
  gp_backend_destroy(be);
  if (st != GP_OK) {
    free(out);
    return NULL;
  }
  return out;
}

/* Within rounding: the products and sums of the test's inputs (uniform in [-1, 1], at most
 * 1024 terms) are off by far less than 1e-5 of (1 + |ref|) in fp32; in bf16 a result rounded
 * to bf16 may also land one bf16 step the other way: 2^-7 of the power of two below |ref|
 * (8 significant bits), so at most 2^-7 of |ref| (2^-8 was half a step: 1.881 against
 * 1.873, one step apart, failed it). An offset or a missing part gives errors of order one. */
static int close_enough(float got, float ref, gp_precision prec) {
  double tol = 1e-5 * (1.0 + fabs((double)ref));
  if (prec == GP_PREC_BF16) tol += 0x1p-7 * fabs((double)ref);
  return fabs((double)got - (double)ref) <= tol;
}

static void check_case(const op_case *c, gp_precision prec) {
  static const int threads[] = {2, 3, 5};
  size_t mem1 = 0, memt = 0;
  float *ref = run_on(c, 1, prec, &mem1);
  if (!ref) return;
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    float *got = run_on(c, threads[t], prec, &memt);
    if (!got) continue;
    int64_t first = -1;
    for (int64_t i = 0; i < c->n_out && first < 0; i++)
      if (c->rounding ? !close_enough(got[i], ref[i], prec)
                      : memcmp(&got[i], &ref[i], sizeof *got) != 0)
        first = i;
    CHECK(first < 0, "%s (%s), %d threads: element %lld is %.9g, with one thread %.9g", c->name,
          prec == GP_PREC_BF16 ? "bf16" : "fp32", threads[t], (long long)first,
          first >= 0 ? (double)got[first] : 0.0, first >= 0 ? (double)ref[first] : 0.0);
    free(got);
  }
  free(ref);
}

static void conv_cases(gp_conv2d_desc d, const char *what, gp_precision prec) {
  float *x = rnd(conv_x(&d), 1), *w = rnd(conv_w(&d), 2), *bias = rnd(d.k, 3),
        *dy = rnd(conv_y(&d), 4);
  char name[3][128];
  snprintf(name[0], sizeof name[0], "conv forward, %s", what);
  snprintf(name[1], sizeof name[1], "conv backward data, %s", what);
  snprintf(name[2], sizeof name[2], "conv backward filter, %s", what);
  op_case f = {.name = name[0],
               .rounding = 1,
               .n_out = conv_y(&d),
               .run = run_conv_fwd,
               .conv = d,
               .a = w,
               .b = bias,
               .x = x};
  op_case bd = {.name = name[1],
                .rounding = 1,
                .n_out = conv_x(&d),
                .run = run_conv_data,
                .conv = d,
                .a = w,
                .y = dy};
  op_case bf = {.name = name[2],
                .rounding = 1,
                .n_out = conv_w(&d) + d.k,
                .run = run_conv_filter,
                .conv = d,
                .x = x,
                .y = dy};
  /* direct_conv.c sums each output in one order whatever the thread count: the same bytes */
  gp_backend probe = {.precision = prec};
  gp_conv2d_desc t = {d.n,
                      d.k,
                      d.oh,
                      d.ow,
                      d.c,
                      d.h,
                      d.w,
                      d.kh,
                      d.kw,
                      1,
                      1,
                      d.dh * (d.kh - 1) - d.ph,
                      d.dw * (d.kw - 1) - d.pw,
                      d.dh,
                      d.dw,
                      d.groups};
  f.rounding = !gp_cpu_direct_conv_ok(&probe, &d, 0);
  bd.rounding =
      !(d.sh == 1 && d.sw == 1 && t.ph >= 0 && t.pw >= 0 && gp_cpu_direct_conv_ok(&probe, &t, 0));
  bf.rounding = !gp_cpu_direct_conv_ok(&probe, &d, 1);
  exact_cases += !f.rounding + !bd.rounding + !bf.rounding;
  check_case(&f, prec);
  check_case(&bd, prec);
  check_case(&bf, prec);
  free(x), free(w), free(bias), free(dy);
}

static void gemm_case(int64_t m, int64_t n, int64_t k, int ta, int tb, gp_precision prec) {
  float *a = rnd(m * k, 5), *b = rnd(k * n, 6);
  char name[96];
  snprintf(name, sizeof name, "gemm %lldx%lldx%lld%s%s", (long long)m, (long long)n, (long long)k,
           ta ? " A^T" : "", tb ? " B^T" : "");
  op_case c = {.name = name,
               .rounding = 1,
               .n_out = m * n,
               .run = run_gemm,
               .m = m,
               .n = n,
               .k = k,
               .ta = ta,
               .tb = tb,
               .a = a,
               .b = b};
  check_case(&c, prec);
  free(a), free(b);
}

static void elementwise_cases(void) {
  int64_t n = 200003; /* above the split grain, and not a multiple of the thread counts */
  float *x = rnd(n, 7), *y = rnd(n, 8);
  op_case act = {.name = "activations, dropout, axpby",
                 .n_out = 6 * n,
                 .run = run_act,
                 .m = n,
                 .x = x,
                 .y = y};
  op_case opt = {.name = "sgd, adamw, rmsprop", .n_out = 8 * n, .run = run_optim, .m = n, .x = x};
  check_case(&act, GP_PREC_FP32);
  check_case(&opt, GP_PREC_FP32);
  free(x), free(y);
  /* [n, c, inner] */
  int64_t bn = 6, bc = 24, in = 1000, total = bn * bc * in;
  float *bx = rnd(total, 9), *bdy = rnd(total, 10), *par = rnd(2 * bc, 11);
  op_case train = {.name = "batch norm forward",
                   .n_out = total + 2 * bc,
                   .run = run_bn_train,
                   .m = bn,
                   .n = bc,
                   .k = in,
                   .x = bx,
                   .b = par};
  op_case back = {.name = "batch norm backward",
                  .n_out = total + 2 * bc,
                  .run = run_bn_back,
                  .m = bn,
                  .n = bc,
                  .k = in,
                  .x = bx,
                  .y = bdy,
                  .b = par};
  op_case bias = {.name = "bias add and gradient",
                  .n_out = total + bc,
                  .run = run_bias,
                  .m = bn,
                  .n = bc,
                  .k = in,
                  .x = bdy,
                  .b = par};
  check_case(&train, GP_PREC_FP32);
  check_case(&back, GP_PREC_FP32);
  check_case(&bias, GP_PREC_FP32);
  free(bx), free(bdy);
  float *rdy = rnd(70000 * 3, 14);
  op_case rows = {.name = "bias over rows",
                  .n_out = 70000 * 3 + 3,
                  .run = run_bias,
                  .m = 70000,
                  .n = 3,
                  .k = 1,
                  .x = rdy,
                  .b = par};
  check_case(&rows, GP_PREC_FP32);
  free(rdy), free(par);
  /* pooling over [4, 20, 30, 30] */
  int64_t pn = 4, pc = 20, ps = 30, planes = pn * pc,
          pout = 2 * planes * 15 * 15 + planes * ps * ps + planes * 15 * 15 + planes * ps * ps;
  float *px = rnd(planes * ps * ps, 12), *pdy = rnd(planes * ps * ps, 13);
  op_case pool = {.name = "max and average pooling",
                  .n_out = pout,
                  .run = run_pool,
                  .m = pn,
                  .n = pc,
                  .k = ps,
                  .x = px,
                  .y = pdy};
  check_case(&pool, GP_PREC_FP32);
  free(px), free(pdy);
}

/* Two instances of 2 threads each, driven from two threads at once. */
typedef struct side {
  int seed;
  float *out;
  gp_status st;
} side;

static void *drive(void *arg) {
  side *s = arg;
  gp_conv2d_desc d = conv(8, 16, 16, 32, 3, 1, 1, 1, 1);
  gp_backend *be = NULL;
  float *x = rnd(conv_x(&d), (uint64_t)s->seed), *w = rnd(conv_w(&d), 2);
  s->out = calloc((size_t)conv_y(&d), sizeof *s->out);
  s->st = gp_cpu_backend_create(2, &be);
  for (int i = 0; s->st == GP_OK && i < 3; i++)
    s->st = be->conv2d_forward(be, &d, x, w, NULL, s->out);
  if (s->st == GP_OK) s->st = be->act_forward(be, GP_ACTIVATION_RELU, conv_y(&d), s->out, s->out);
  gp_backend_destroy(be);
  free(x), free(w);
  return NULL;
}

static void test_side_by_side(void) {
  side a = {21, NULL, GP_OK}, b = {22, NULL, GP_OK}, a1 = {21, NULL, GP_OK};
  pthread_t ta, tb;
  int ok_a = pthread_create(&ta, NULL, drive, &a) == 0;
  int ok_b = pthread_create(&tb, NULL, drive, &b) == 0;
  CHECK(ok_a && ok_b, "threads");
  if (ok_a) pthread_join(ta, NULL); /* join only a thread that was started */
  if (ok_b) pthread_join(tb, NULL);
  drive(&a1);
  gp_conv2d_desc d = conv(8, 16, 16, 32, 3, 1, 1, 1, 1);
  CHECK(a.st == GP_OK && b.st == GP_OK && a1.st == GP_OK, "side-by-side instances run");
  CHECK(a.out && a1.out && memcmp(a.out, a1.out, (size_t)conv_y(&d) * sizeof *a.out) == 0,
        "an instance beside another computes what it computes alone");
  CHECK(a.out && b.out && memcmp(a.out, b.out, (size_t)conv_y(&d) * sizeof *a.out) != 0,
        "the two instances had different inputs");
  free(a.out), free(b.out), free(a1.out);
}

int main(void) {
  for (int p = 0; p < 2; p++) {
    gp_precision prec = p ? GP_PREC_BF16 : GP_PREC_FP32;
    /* 12 samples of a 16x16 plane: one per chunk, chunks spread over the workers */
    conv_cases(conv(12, 16, 16, 32, 3, 1, 1, 1, 1), "12 samples 3x3 same", prec);
    /* 1 sample: too few chunks, so the GEMMs split instead */
    conv_cases(conv(1, 16, 32, 64, 3, 1, 1, 1, 1), "1 sample 32x32", prec);
    /* small planes: several samples per chunk, scattered; stride 2, groups, dilation */
    conv_cases(conv(20, 8, 8, 16, 3, 2, 1, 1, 2), "20 samples stride 2, 2 groups", prec);
    conv_cases(conv(7, 12, 12, 24, 3, 1, 2, 2, 1), "7 samples dilation 2", prec);
    conv_cases(conv(9, 32, 10, 48, 1, 1, 0, 1, 1), "9 samples 1x1", prec);
    gemm_case(300, 90, 200, 0, 0, prec); /* split by rows */
    gemm_case(70, 500, 130, 1, 0, prec); /* by columns, A transposed */
    gemm_case(257, 260, 64, 0, 1, prec);
    gemm_case(40, 700, 96, 1, 1, prec);
  }
  elementwise_cases();
  test_side_by_side();
  /* on a CPU with AVX2 and FMA, the fp32 3x3 stride-1 cases above run direct_conv.c */
  if (gp_cpu_direct_conv_set(GP_CPU_DIRECT_AVX512))
    CHECK(exact_cases >= 7, "only %d convolutions checked for the same bytes", exact_cases);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
