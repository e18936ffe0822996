/* The attention layer's use of a backend's fused attention (sdpa_forward / sdpa_backward), on
 * the CPU: a test op computes the fused semantics exactly (in double, no bf16) from the
 * layer's strided Q, K, V, so the layer with it must agree with the plain path (bf16 GEMM
 * operands) within bf16 rounding, for self-attention with rope and grouped-query heads,
 * causal or with a key-padding mask, and cross-attention; the B and W halves must give the
 * combined backward's bits; the op must not be called with dropout while training or with
 * packed segments, nor under fp32; an op that declines must leave the plain path's bits. This
 * checks the wiring (strides, head mapping, rope's inverse, the halves), not cuDNN, which
 * tests/cuda/test_cuda_sdpa.c compares on a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"
#include "tests/layers/harness.h"

/* max |fused - plain| / max |plain| per tensor. The plain path rounds Q, K, V, P and dO to
 * bf16 (8 significant bits, 2^-9 relative per rounding); the test op rounds nothing, so the
 * two differ by a few such roundings summed over the keys: ~1e-2 at most where the softmax
 * backward cancels. A wiring fault (a wrong stride, head or sign) moves values by O(1). */
#define TOL_BF16 3e-2

static int passed, failed;
static int calls_fwd, calls_bwd, decline;

/* The fused semantics in double: per (sample, head, query) the masked softmax of scale q.k
 * over the keys, its log-sum-exp kept. */
static gp_status fake_forward(gp_backend *be, const gp_sdpa_desc *d, const float *q, const float *k,
                              const float *v, float *o, float *lse, int *taken) {
  (void)be;
  calls_fwd++;
  *taken = 0;
  if (decline) return GP_OK;
  const int64_t grp = d->heads / d->kv_heads, w = d->heads * d->dh;
  double *s = malloc((size_t)d->tk * sizeof *s);
  if (!s) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  for (int64_t b = 0; b < d->batch; b++)
    for (int64_t h = 0; h < d->heads; h++)
      for (int64_t i = 0; i < d->tq; i++) {
        const float *qi = q + (b * d->tq + i) * d->ldq + h * d->dh;
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < d->tk; j++) {
          const float *kj = k + (b * d->tk + j) * d->ldkv + h / grp * d->dh;
          const int keep = (!d->causal || j <= i) &&
                           (!d->keep_f32 || d->keep_f32[b * d->tk + j] != 0) &&
                           (!d->keep_i32 || d->keep_i32[b * d->tk + j] != 0);
          double dot = 0;
          for (int64_t c = 0; c < d->dh; c++)
            dot += (double)qi[c] * kj[c];
          s[j] = keep ? d->scale * dot : -INFINITY;
          if (s[j] > m) m = s[j];
        }
        for (int64_t j = 0; j < d->tk; j++)
          l += exp(s[j] - m);
        lse[(b * d->heads + h) * d->tq + i] = (float)(m + log(l));
        for (int64_t c = 0; c < d->dh; c++) {
          double acc = 0;
          for (int64_t j = 0; j < d->tk; j++)
            acc += exp(s[j] - m) / l * v[(b * d->tk + j) * d->ldkv + h / grp * d->dh + c];
          o[(b * d->tq + i) * w + h * d->dh + c] = (float)acc;
        }
      }
  free(s);
  *taken = 1;
  return GP_OK;
}

static gp_status fake_backward(gp_backend *be, const gp_sdpa_desc *d, const float *q,
                               const float *k, const float *v, const float *o, const float *lse,
                               const float *dout, float *dq, float *dk, float *dv) {
  (void)be;
  (void)o;
  calls_bwd++;
  const int64_t grp = d->heads / d->kv_heads, w = d->heads * d->dh;
  for (int64_t r = 0; r < d->batch * d->tk; r++)
    for (int64_t c = 0; c < d->kv_heads * d->dh; c++)
      dk[r * d->ldkv + c] = dv[r * d->ldkv + c] = 0;
  double *p = malloc((size_t)d->tk * 2 * sizeof *p);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory");
  double *dp = p + d->tk;
  for (int64_t b = 0; b < d->batch; b++)
    for (int64_t h = 0; h < d->heads; h++)
      for (int64_t i = 0; i < d->tq; i++) {
        const float *qi = q + (b * d->tq + i) * d->ldq + h * d->dh;
        const float *doi = dout + (b * d->tq + i) * w + h * d->dh;
        double dsum = 0;
        for (int64_t j = 0; j < d->tk; j++) {
          const int64_t kv = (b * d->tk + j) * d->ldkv + h / grp * d->dh;
          const int keep = (!d->causal || j <= i) &&
                           (!d->keep_f32 || d->keep_f32[b * d->tk + j] != 0) &&
                           (!d->keep_i32 || d->keep_i32[b * d->tk + j] != 0);
          double dot = 0, dd = 0;
          for (int64_t c = 0; c < d->dh; c++) {
            dot += (double)qi[c] * k[kv + c];
            dd += (double)doi[c] * v[kv + c];
          }
          p[j] = keep ? exp(d->scale * dot - lse[(b * d->heads + h) * d->tq + i]) : 0;
          dp[j] = dd;
          dsum += p[j] * dd;
        }
        for (int64_t j = 0; j < d->tk; j++) {
          const int64_t kv = (b * d->tk + j) * d->ldkv + h / grp * d->dh;
          const double ds = p[j] * (dp[j] - dsum) * d->scale;
          for (int64_t c = 0; c < d->dh; c++) {
            dk[kv + c] += (float)(ds * qi[c]);
            dv[kv + c] += (float)(p[j] * doi[c]);
          }
        }
        float *dqi = dq + (b * d->tq + i) * d->ldq + h * d->dh;
        for (int64_t c = 0; c < d->dh; c++) {
          double acc = 0;
          for (int64_t j = 0; j < d->tk; j++) {
            const int64_t kv = (b * d->tk + j) * d->ldkv + h / grp * d->dh;
            acc += p[j] * (dp[j] - dsum) * d->scale * k[kv + c];
          }
          dqi[c] = (float)acc;
        }
      }
  free(p);
  return GP_OK;
}

static double rel_diff(const float *a, const float *ref, int64_t n) {
  double dmax = 0, rmax = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
    if (fabs((double)a[i] - ref[i]) > dmax) dmax = fabs((double)a[i] - ref[i]);
  }
  return rmax > 0 ? dmax / rmax : dmax;
}

typedef struct route_case {
  const char *yaml;
  int n_in;
  gp_shape shape[4];
  gp_dtype dtype[4];
  int want; /* 0: the op is not called; 1: called and taken; 2: called, declines */
  int training;
} route_case;

/* Inputs: f32 normal-ish values; i32 positions 0.. per sample, or a key mask of 1s then 0s
 * (an i32 input of a layer with `mask` or cross-attention's last input), or segments 1 then 2. */
static void fill_inputs(lt_layer *t, const route_case *c) {
  for (int i = 0; i < c->n_in; i++) {
    const int64_t n = gp_shape_numel(&t->in[i].shape), row = gp_shape_numel(&c->shape[i]);
    if (t->in[i].dtype == GP_F32 && c->shape[i].ndim > 1) {
      lt_fill_uniform(100 + (uint64_t)i, GP_F32P(&t->in[i]), n, -1.0f, 1.0f);
      continue;
    }
    int32_t *x = t->in[i].data;
    const int pos = strstr(c->yaml, "rope") && i == c->n_in - 1,
              seg = strstr(c->yaml, "segments") != NULL;
    for (int64_t j = 0; j < n; j++) {
      const int64_t b = j / row, at = j % row;
      const int32_t v = pos ? (int32_t)at : seg ? (at < row / 2 ? 1 : 2) : at < row - 2 * b - 1;
      if (t->in[i].dtype == GP_F32)
        GP_F32P(&t->in[i])[j] = (float)v;
      else
        x[j] = v;
    }
  }
}

static int run_once(gp_backend *be, const route_case *c, int fused, int halves, lt_layer *t) {
  be->sdpa_forward = fused ? fake_forward : NULL;
  be->sdpa_backward = fused ? fake_backward : NULL;
  if (!lt_build_or_report(t, be, c->yaml, c->n_in, c->shape, c->dtype, 3)) return 0;
  t->e.training = c->training;
  fill_inputs(t, c);
  lt_fill_uniform(7, GP_F32P(&t->dout), gp_shape_numel(&t->dout.shape), -1.0f, 1.0f);
  gp_status s = lt_forward(t);
  if (s == GP_OK && c->training && !halves) s = lt_backward(t);
  if (s == GP_OK && c->training && halves) s = lt_backward_part(t, GP_GRAD_INPUT);
  if (s == GP_OK && c->training && halves) s = lt_backward_part(t, GP_GRAD_WEIGHT);
  if (s != GP_OK) {
    printf("FAIL %s: %s\n", c->yaml, gp_error_message());
    lt_layer_free(t);
    return 0;
  }
  return 1;
}

/* Every output, f32 input gradient and parameter gradient of a against b: within tol, or
 * bit for bit (tol < 0). */
static int same_results(const lt_layer *a, const lt_layer *b, double tol, const char *what) {
  int ok = 1;
  char name[160];
  const float *x[2 + 2 * GP_MAX_INPUTS + 2 * GP_MAX_PARAMS][2];
  int64_t n[2 + 2 * GP_MAX_INPUTS + 2 * GP_MAX_PARAMS];
  const char *label[2 + 2 * GP_MAX_INPUTS + 2 * GP_MAX_PARAMS];
  int m = 0;
  x[m][0] = GP_F32P(&a->out), x[m][1] = GP_F32P(&b->out), n[m] = gp_shape_numel(&a->out.shape);
  label[m++] = "output";
  for (int i = 0; a->e.training && i < a->l.n_in; i++)
    if (a->din[i].data) {
      x[m][0] = GP_F32P(&a->din[i]), x[m][1] = GP_F32P(&b->din[i]);
      n[m] = gp_shape_numel(&a->din[i].shape);
      label[m++] = i == 0 ? "din 0" : "din 1+";
    }
  for (int i = 0; a->e.training && i < a->l.n_params; i++) {
    x[m][0] = a->b.grad[i], x[m][1] = b->b.grad[i], n[m] = lt_param_numel(a, i);
    label[m++] = a->l.pdesc[i].name;
  }
  for (int j = 0; j < m; j++) {
    const double dif = tol < 0 ? (memcmp(x[j][0], x[j][1], (size_t)n[j] * 4) ? 1 : 0)
                               : rel_diff(x[j][0], x[j][1], n[j]);
    if (dif > (tol < 0 ? 0 : tol)) {
      snprintf(name, sizeof name, "%s: %s %s differs by %.3g (tolerance %.3g)", what, a->l.path,
               label[j], dif, tol);
      printf("FAIL %s\n", name);
      ok = 0;
    }
  }
  return ok;
}

static void run_case(gp_backend *be, const route_case *c) {
  char what[200];
  lt_layer plain, fused, split;
  calls_fwd = calls_bwd = 0;
  if (!run_once(be, c, 0, 0, &plain)) {
    failed++;
    return;
  }
  if (!run_once(be, c, 1, 0, &fused)) {
    failed++;
    lt_layer_free(&plain);
    return;
  }
  const int f = calls_fwd, bw = calls_bwd;
  snprintf(what, sizeof what, "%s (%s)", c->yaml, c->training ? "training" : "evaluation");
  const int want_f = c->want ? 1 : 0, want_b = c->want == 1 && c->training;
  int ok = f == want_f && bw == want_b;
  if (!ok)
    printf("FAIL %s: the fused op was called %d / %d times (forward / backward), want %d / %d\n",
           what, f, bw, want_f, want_b);
  ok = ok && same_results(&fused, &plain, c->want == 1 ? TOL_BF16 : -1, what);
  if (ok && c->want == 1 && c->training && run_once(be, c, 1, 1, &split)) {
    ok = same_results(&split, &fused, -1, "B then W against the combined backward");
    lt_layer_free(&split);
  }
  lt_tally(ok, what, &passed, &failed);
  lt_layer_free(&plain);
  lt_layer_free(&fused);
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL creating the CPU backend: %s\n", gp_error_message());
    return 1;
  }
  be->precision = GP_PREC_BF16;
  enum { T = 9, TK = 7, D = 16 };
  const route_case cases[] = {
      {"{type: attention, heads: 4, kv_heads: 2, causal: true, rope: {theta: 10000}}",
       2,
       {{2, {T, D}}, {1, {T}}},
       {GP_F32, GP_I32},
       1,
       1},
      {"{type: attention, heads: 2}", 2, {{2, {T, D}}, {1, {T}}}, {GP_F32, GP_I32}, 1, 1},
      {"{type: attention, heads: 2, causal: true}",
       2,
       {{2, {T, D}}, {1, {T}}},
       {GP_F32, GP_F32},
       1,
       1},
      {"{type: attention, heads: 4, kv_heads: 1, bias: false}",
       3,
       {{2, {T, D}}, {2, {TK, D}}, {1, {TK}}},
       {GP_F32, GP_F32, GP_I32},
       1,
       1},
      {"{type: attention, heads: 2, causal: true}", 1, {{2, {T, D}}}, {GP_F32}, 1, 0},
      /* plain only: dropout while training, packed segments */
      {"{type: attention, heads: 2, dropout: 0.1}", 1, {{2, {T, D}}}, {GP_F32}, 0, 1},
      {"{type: attention, heads: 2, causal: true, mask: segments}",
       2,
       {{2, {T, D}}, {1, {T}}},
       {GP_F32, GP_I32},
       0,
       1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(be, &cases[i]);

  /* an op that declines leaves the plain path's bits; fp32 never asks */
  decline = 1;
  run_case(be, &(route_case){
                   "{type: attention, heads: 2, causal: true}", 1, {{2, {T, D}}}, {GP_F32}, 2, 1});
  decline = 0;
  be->precision = GP_PREC_FP32;
  run_case(be, &(route_case){
                   "{type: attention, heads: 2, causal: true}", 1, {{2, {T, D}}}, {GP_F32}, 0, 1});
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
