/* Finite-difference gradient checks for every layer type, plus the gradient conventions of
 * core/layer.h: parameter gradients +=, input gradients =, a NULL din skips that input,
 * a recompute forward reproduces the output and leaves running statistics alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/layers/harness.h"
#include "tests/layers/selftest_layer.h"

#define FD_H 1e-2f
#define SENTINEL 777.0f

typedef enum fill_kind { FILL_UNIFORM, FILL_AWAY, FILL_DISTINCT } fill_kind;

typedef struct grad_case {
  const char *name;
  const char *yaml;
  int n_in;
  gp_shape in[4]; /* per sample */
  int64_t batch;
  fill_kind fill;
  int labels_k; /* > 0: the last input is int32 labels in [0, labels_k), objective = loss */
  int eval;     /* 1: evaluation mode (training = 0) */
  lt_tol_id tol;
  /* Per input (NULL: all 'f'): 'f' f32 data; 'i' I32 ids in [0, ids_k); 'm' I32 key-padding
   * mask (1 token, 0 pad; key 0 always a token); 'z' the same with sample 0 all padding;
   * 'g' an F32 0/1 mask, which gets no finite differences: its gradient must be exactly 0;
   * 's' I32 segment ids of a packed row (two sentences, odd samples end with a pad). */
  const char *kinds;
  int ids_k;
} grad_case;

/* One case per line reads better than one field per line. */
/* clang-format off */
#define S0 {0, {0}}
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
static const grad_case cases[] = {
    {"identity", "{type: identity}", 1, {S3(2, 3, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"relu", "{type: relu}", 1, {S3(2, 3, 3)}, 2, FILL_AWAY, 0, 0, LT_TOL_FD_LINEAR},
    {"gelu", "{type: gelu}", 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"gelu tanh", "{type: gelu, approximate: tanh}", 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_SMOOTH},
    {"tanh", "{type: tanh}", 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"sigmoid", "{type: sigmoid}", 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"flatten", "{type: flatten}", 1, {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"linear", "{type: linear, out_features: 4}", 1, {S1(5)}, 3, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"linear 3d, no bias", "{type: linear, out_features: 3, bias: false}", 1, {S2(3, 5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d 3x3", "{type: conv2d, out_channels: 3, kernel: 3}", 1, {S3(2, 5, 5)}, 2, FILL_UNIFORM,
     0, 0, LT_TOL_FD_LINEAR},
    {"conv2d stride 2 pad 1", "{type: conv2d, out_channels: 3, kernel: 3, stride: 2, padding: 1}",
     1, {S3(2, 7, 7)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d dilation 2", "{type: conv2d, out_channels: 2, kernel: 3, dilation: 2, padding: 2}", 1,
     {S3(2, 7, 6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d groups 2", "{type: conv2d, out_channels: 6, kernel: 3, groups: 2, padding: 1}", 1,
     {S3(4, 5, 5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d depthwise", "{type: conv2d, out_channels: 3, kernel: 3, groups: 3, padding: 1}", 1,
     {S3(3, 5, 5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d 1x7", "{type: conv2d, out_channels: 2, kernel: [1, 7], padding: [0, 3]}", 1,
     {S3(2, 4, 9)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d 7x1", "{type: conv2d, out_channels: 2, kernel: [7, 1], padding: [3, 0]}", 1,
     {S3(2, 9, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d no bias 1x1", "{type: conv2d, out_channels: 3, kernel: 1, bias: false}", 1,
     {S3(4, 3, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv2d rect stride",
     "{type: conv2d, out_channels: 2, kernel: [3, 2], stride: [2, 1], padding: [1, 0]}", 1,
     {S3(2, 7, 5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"batchnorm train", "{type: batchnorm}", 1, {S3(3, 3, 3)}, 3, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_NORM},
    {"layernorm", "{type: layernorm}", 1, {S2(3, 6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_NORM},
    {"maxpool 2", "{type: maxpool, kernel: 2, stride: 2}", 1, {S3(2, 6, 6)}, 2, FILL_DISTINCT, 0, 0,
     LT_TOL_FD_LINEAR},
    {"maxpool 3 s2 p1", "{type: maxpool, kernel: 3, stride: 2, padding: 1}", 1, {S3(2, 7, 7)}, 2,
     FILL_DISTINCT, 0, 0, LT_TOL_FD_LINEAR},
    {"avgpool 2", "{type: avgpool, kernel: 2, stride: 2}", 1, {S3(2, 6, 6)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"avgpool 3 s2 p1", "{type: avgpool, kernel: 3, stride: 2, padding: 1}", 1, {S3(2, 7, 7)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"avgpool 3 s2 p1 count_pad",
     "{type: avgpool, kernel: 3, stride: 2, padding: 1, count_pad: true}", 1, {S3(2, 7, 7)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"global_avgpool", "{type: global_avgpool}", 1, {S3(3, 4, 5)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"dropout", "{type: dropout, p: 0.4}", 1, {S2(4, 5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"dropout eval", "{type: dropout, p: 0.4}", 1, {S2(4, 5)}, 2, FILL_UNIFORM, 0, 1,
     LT_TOL_FD_LINEAR},
    {"add 3", "{type: add}", 3, {S3(2, 3, 3), S3(2, 3, 3), S3(2, 3, 3)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"concat", "{type: concat}", 3, {S3(2, 3, 3), S3(3, 3, 3), S3(1, 3, 3)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"concat axis 0", "{type: concat, axis: 0}", 2, {S3(1, 2, 3), S3(2, 2, 3)}, 2, FILL_UNIFORM, 0,
     0, LT_TOL_FD_LINEAR},
    {"pad", "{type: pad, channels: [1, 2]}", 1, {S3(2, 3, 3)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"softmax_cross_entropy", "{type: softmax_cross_entropy}", 2, {S1(5), S0}, 4, FILL_UNIFORM, 5,
     0, LT_TOL_FD_SMOOTH},
    {"softmax_cross_entropy smoothing", "{type: softmax_cross_entropy, label_smoothing: 0.1}", 2,
     {S1(5), S0}, 4, FILL_UNIFORM, 5, 0, LT_TOL_FD_SMOOTH},
    /* Transformer layers */
    {"embedding", "{type: embedding, num_embeddings: 7, dim: 4}", 1, {S1(5)}, 2, FILL_UNIFORM, 0,
     0, LT_TOL_FD_LINEAR, "i", 7},
    /* ids never hit the padding row 6 here: a lookup of it would change the output while its
     * gradient is 0 by definition (test_transformer.c checks that row) */
    {"embedding pad scale 2d", "{type: embedding, num_embeddings: 7, dim: 3, padding_idx: 6, scale: true}",
     1, {S2(2, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "i", 6},
    {"positional sinusoidal", "{type: positional, max_len: 7}", 1, {S2(5, 6)}, 2, FILL_UNIFORM, 0,
     0, LT_TOL_FD_LINEAR},
    {"positional learned", "{type: positional, kind: learned, max_len: 6}", 1, {S2(5, 3)}, 3,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"attention self h3", "{type: attention, heads: 3}", 1, {S2(5, 12)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_SMOOTH},
    {"attention self no bias h2", "{type: attention, heads: 2, bias: false}", 1, {S2(4, 6)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"attention causal h1", "{type: attention, heads: 1, causal: true}", 1, {S2(5, 4)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"attention i32 mask h2", "{type: attention, heads: 2}", 2, {S2(5, 6), S1(5)}, 3,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fm"},
    {"attention causal f32 mask h3", "{type: attention, heads: 3, causal: true}", 2,
     {S2(5, 6), S1(5)}, 3, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fg"},
    {"attention fully masked sample", "{type: attention, heads: 2}", 2, {S2(4, 6), S1(4)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fz"},
    {"attention cross h3", "{type: attention, heads: 3}", 2, {S2(4, 6), S2(5, 6)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"attention cross mask no bias", "{type: attention, heads: 2, bias: false, causal: true}", 3,
     {S2(4, 6), S2(5, 6), S1(5)}, 3, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "ffm"},
    {"attention dropout", "{type: attention, heads: 2, dropout: 0.3}", 2, {S2(5, 4), S1(5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fm"},
    {"attention dropout eval", "{type: attention, heads: 2, dropout: 0.3}", 1, {S2(5, 4)}, 2,
     FILL_UNIFORM, 0, 1, LT_TOL_FD_SMOOTH},
    /* packed rows (tests/layers/test_packed.c checks them against one sentence per row) */
    {"attention segments h2", "{type: attention, heads: 2, mask: segments}", 2, {S2(5, 6), S1(5)},
     2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fs"},
    {"attention segments causal h3", "{type: attention, heads: 3, causal: true, mask: segments}", 2,
     {S2(5, 6), S1(5)}, 3, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fs"},
    {"attention cross segments h2", "{type: attention, heads: 2, mask: segments}", 4,
     {S2(4, 6), S2(5, 6), S1(4), S1(5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "ffss"},
    {"positional sinusoidal positions", "{type: positional, max_len: 7}", 2, {S2(5, 6), S1(5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "fi", 7},
    /* T = 5 > max_len: allowed with positions; rows of the weight sum several tokens */
    {"positional learned positions", "{type: positional, kind: learned, max_len: 4}", 2,
     {S2(5, 3), S1(5)}, 3, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "fi", 4},
};
/* clang-format on */

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Every type the layers helper owes; a type with no case here is a defect of this test. */
/* clang-format off */
static const char *const all_types[] = {
    "conv2d", "linear", "batchnorm", "layernorm", "relu", "gelu", "tanh", "sigmoid", "maxpool",
    "avgpool", "global_avgpool", "flatten", "dropout", "add", "concat", "identity", "pad",
    "softmax_cross_entropy", "embedding", "positional", "attention", NULL,
};
/* clang-format on */

static char missing[512];
static int quiet; /* the self-tests expect failures and do not print them */
#define SAY(...) (quiet ? (void)0 : (void)printf(__VA_ARGS__))
static double case_fd_err; /* worst finite-difference error of the current case */

static void note_missing(const char *type) {
  char key[64];
  snprintf(key, sizeof key, " %s,", type);
  if (strstr(missing, key)) return;
  strncat(missing, key, sizeof missing - strlen(missing) - 1);
}

static const char *type_of(const char *yaml) {
  static char buf[64];
  const char *p = strstr(yaml, "type:");
  buf[0] = 0;
  if (!p) return buf;
  p += 5;
  while (*p == ' ')
    p++;
  size_t n = strcspn(p, ",} ");
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, p, n);
  buf[n] = 0;
  return buf;
}

static double objective(const lt_layer *t, int is_loss) {
  if (is_loss) return t->e.loss_sum;
  const float *y = GP_F32P(&t->out), *r = GP_F32P(&t->dout);
  int64_t n = gp_shape_numel(&t->out.shape);
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += (double)y[i] * (double)r[i];
  return s;
}

/* Central difference of the objective with respect to *x. */
static gp_status fd_at(lt_layer *t, float *x, int is_loss, double *out) {
  float x0 = *x;
  *x = x0 + FD_H;
  double xp = *x;
  GP_TRY(lt_forward(t));
  double lp = objective(t, is_loss);
  *x = x0 - FD_H;
  double xm = *x;
  GP_TRY(lt_forward(t));
  double lm = objective(t, is_loss);
  *x = x0;
  *out = (lp - lm) / (xp - xm); /* the rounded steps, not 2h: exact denominator */
  return GP_OK;
}

static float *dup_floats(const float *p, int64_t n) {
  float *d = calloc((size_t)(n ? n : 1), sizeof *d);
  if (d && n) memcpy(d, p, (size_t)n * sizeof *d);
  return d;
}

static char kind_of(const grad_case *c, int i) {
  return c->kinds ? c->kinds[i] : 'f';
}

/* Key-padding masks over tk keys: sample b pads its last b % 3 keys and, when b % 3 == 2,
 * key 1 too; key 0 is a token unless `all_pad_first` (sample 0 then pads every key). */
static int mask_keep(int64_t b, int64_t j, int64_t tk, int all_pad_first) {
  if (all_pad_first && b == 0) return 0;
  return j == 0 || (j < tk - b % 3 && !(b % 3 == 2 && j == 1));
}

static void fill_inputs(lt_layer *t, const grad_case *c, uint64_t seed) {
  for (int i = 0; i < t->l.n_in; i++) {
    int64_t n = gp_shape_numel(&t->in[i].shape), per = n / t->batch;
    char kind = kind_of(c, i);
    if (kind == 'i') {
      for (int64_t j = 0; j < n; j++)
        GP_I32P(&t->in[i])[j] = (int32_t)((j * 5 + 3) % c->ids_k); /* repeats ids */
      continue;
    }
    if (kind == 's') { /* sentence 1 on the first half, 2 on the rest, odd samples pad last */
      for (int64_t j = 0; j < n; j++) {
        int64_t b = j / per, k = j % per;
        GP_I32P(&t->in[i])[j] = k >= per - b % 2 ? 0 : k < (per + 1) / 2 ? 1 : 2;
      }
      continue;
    }
    if (kind == 'm' || kind == 'z' || kind == 'g') {
      for (int64_t j = 0; j < n; j++) {
        int keep = mask_keep(j / per, j % per, per, kind == 'z');
        if (kind == 'g')
          GP_F32P(&t->in[i])[j] = (float)keep;
        else
          GP_I32P(&t->in[i])[j] = keep;
      }
      continue;
    }
    if (t->in[i].dtype == GP_I32) {
      int32_t *lab = GP_I32P(&t->in[i]);
      for (int64_t j = 0; j < n; j++)
        lab[j] = (int32_t)((j * 3 + 1) % c->labels_k);
      continue;
    }
    float *x = GP_F32P(&t->in[i]);
    if (c->fill == FILL_AWAY)
      lt_fill_away_from_zero(seed + (uint64_t)i, x, n, 0.1f, 1.0f);
    else if (c->fill == FILL_DISTINCT)
      lt_fill_distinct(seed + (uint64_t)i, x, n, 0.05f);
    else
      lt_fill_uniform(seed + (uint64_t)i, x, n, -1.5f, 1.5f);
  }
  for (int i = 0; i < t->l.n_params; i++) {
    const gp_param_desc *p = &t->l.pdesc[i];
    int64_t n = lt_param_numel(t, i);
    if (p->trainable)
      lt_fill_uniform(seed + 100 + (uint64_t)i, t->b.param[i], n, -1.0f, 1.0f);
    else if (strstr(p->name, "var"))
      lt_fill_uniform(seed + 100 + (uint64_t)i, t->b.param[i], n, 0.5f, 1.5f);
    else
      lt_fill_uniform(seed + 100 + (uint64_t)i, t->b.param[i], n, -0.5f, 0.5f);
  }
}

static int check_cost(const lt_layer *t, const char *name) {
  if (!t->l.type->cost) {
    SAY("  FAIL %s: no cost function\n", name);
    return 0;
  }
  gp_cost c;
  memset(&c, 0, sizeof c);
  t->l.type->cost(&t->l, &c);
  int64_t params = 0;
  for (int i = 0; i < t->l.n_params; i++)
    if (t->l.pdesc[i].trainable) params += lt_param_numel(t, i);
  int64_t ob = gp_shape_numel(&t->l.out_shape) * (int64_t)gp_dtype_size(t->l.out_dtype);
  int ok = 1;
  if (c.params != params) {
    SAY("  FAIL %s: cost says %lld parameters, the descriptions hold %lld\n", name,
        (long long)c.params, (long long)params);
    ok = 0;
  }
  if (c.out_bytes != ob) {
    SAY("  FAIL %s: cost says %lld output bytes per sample, the shape gives %lld\n", name,
        (long long)c.out_bytes, (long long)ob);
    ok = 0;
  }
  if (!(c.fwd_flops >= 0) || !(c.bwd_flops >= 0) || c.saved_bytes < 0) {
    SAY("  FAIL %s: negative or NaN cost\n", name);
    ok = 0;
  }
  return ok;
}

/* Initial values follow PyTorch's defaults: conv and linear U(-b, b) with b = 1/sqrt(fan_in)
 * where fan_in = weight elements / output channels; norms weight 1, bias 0; running mean 0
 * and variance 1. */
static int check_init(const lt_layer *t, const char *name) {
  const char *ty = t->l.type->name;
  int w = lt_param_index(t, "weight"), ok = 1;
  int is_norm = strcmp(ty, "batchnorm") == 0 || strcmp(ty, "layernorm") == 0;
  int is_fan = strcmp(ty, "conv2d") == 0 || strcmp(ty, "linear") == 0;
  for (int i = 0; i < t->l.n_params; i++) {
    const gp_param_desc *p = &t->l.pdesc[i];
    const float *v = t->b.param[i];
    int64_t n = lt_param_numel(t, i);
    double want = -1, lo = 0, hi = 0, vmax = 0;
    if (strcmp(p->name, "running_var") == 0 || (is_norm && strcmp(p->name, "weight") == 0))
      want = 1;
    else if (strcmp(p->name, "running_mean") == 0 || (is_norm && strcmp(p->name, "bias") == 0))
      want = 0;
    for (int64_t j = 0; j < n; j++) {
      if (want >= 0 && v[j] != want) {
        SAY("  FAIL %s: initial %s[%lld] = %g, PyTorch's default is %g\n", name, p->name,
            (long long)j, v[j], want);
        ok = 0;
        break;
      }
      vmax = fmax(vmax, fabs(v[j]));
    }
    if (!is_fan || w < 0) continue;
    int64_t fan = lt_param_numel(t, w) / t->l.pdesc[w].shape.d[0];
    double b = 1.0 / sqrt((double)fan);
    lo = 0.5 * b; /* the largest of >= 4 uniform draws is below b/2 with chance <= 1/16 */
    hi = b * (1 + lt_tol_get(LT_TOL_INIT_BOUND)->rtol);
    if (p->fan_in != fan || vmax > hi || (n >= 4 && vmax < lo)) {
      SAY("  FAIL %s: %s has fan_in %lld (want %lld) and max |value| %g (want <= %g)\n", name,
          p->name, (long long)p->fan_in, (long long)fan, vmax, b);
      ok = 0;
    }
  }
  return ok;
}

/* A loss layer counts the batch and its correct predictions in a normal forward, and
 * nothing (no loss either) in a recompute one, which sees the same micro-batch again. */
static int check_loss_counts(const lt_layer *t, const grad_case *c, int recompute) {
  if (!c->labels_k) return 1;
  int64_t n = t->batch, k = gp_shape_numel(&t->in[0].shape) / n, correct = 0;
  const float *z = GP_F32P(&t->in[0]);
  for (int64_t i = 0; i < n; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++)
      if (z[i * k + j] > z[i * k + best]) best = j;
    correct += best == GP_I32P(&t->in[1])[i];
  }
  int64_t want_counted = recompute ? 0 : n, want_correct = recompute ? 0 : correct;
  if (t->e.counted != want_counted || t->e.correct != want_correct ||
      (recompute && t->e.loss_sum != 0.0)) {
    SAY("  FAIL %s: %s forward counted %lld, correct %lld, loss_sum %g; want %lld, %lld%s\n",
        c->name, recompute ? "a recompute" : "a normal", (long long)t->e.counted,
        (long long)t->e.correct, t->e.loss_sum, (long long)want_counted, (long long)want_correct,
        recompute ? ", 0" : "");
    return 0;
  }
  return 1;
}

/* Runs one case; returns the number of failed checks (0 = pass), -1 when the type is not
 * registered. */
static int run_case(gp_backend *be, const grad_case *c, const gp_layer_type *type, uint64_t seed) {
  lt_layer t;
  gp_dtype dt[4] = {GP_F32, GP_F32, GP_F32, GP_F32};
  if (c->labels_k) dt[c->n_in - 1] = GP_I32;
  for (int i = 0; i < c->n_in; i++)
    if (strchr("imzs", kind_of(c, i))) dt[i] = GP_I32;
  int is_loss = c->labels_k > 0;
  gp_status s = lt_layer_build_as(&t, type, be, c->yaml, c->n_in, c->in, dt, c->batch);
  if (s == GP_ERR_UNSUPPORTED) {
    lt_layer_free(&t);
    return -1;
  }
  int fails = 0;
  char what[160];
  float *y0 = NULL, *st0 = NULL, *din1[4] = {0}, *g1[GP_MAX_PARAMS] = {0};
  if (s != GP_OK) {
    SAY("  FAIL %s: build: %s\n", c->name, gp_error_message());
    fails++;
    goto done;
  }
  fails += !check_cost(&t, c->name);
  fails += !check_init(&t, c->name);
  fill_inputs(&t, c, seed);
  int64_t ny = gp_shape_numel(&t.out.shape);
  if (is_loss)
    for (int64_t i = 0; i < ny; i++)
      GP_F32P(&t.dout)[i] = 1.0f;
  else
    lt_fill_uniform(seed + 50, GP_F32P(&t.dout), ny, -1.0f, 1.0f);
  t.e.training = !c->eval;
  int64_t nst = t.b.stats ? t.l.type->stats_floats(&t.l) : 0;

  /* A normal forward, then a recompute one: same output, statistics untouched. */
  t.e.recompute = 0;
  if (lt_forward(&t) != GP_OK) goto fail_status;
  y0 = dup_floats(GP_F32P(&t.out), ny);
  st0 = dup_floats(t.b.stats, nst);
  fails += !check_loss_counts(&t, c, 0);
  t.e.recompute = 1;
  if (lt_forward(&t) != GP_OK) goto fail_status;
  fails += !check_loss_counts(&t, c, 1);
  snprintf(what, sizeof what, "%s: recompute forward output", c->name);
  fails += !lt_compare_f(what, GP_F32P(&t.out), y0, ny, LT_TOL_EXACT, NULL);
  if (nst) {
    snprintf(what, sizeof what, "%s: statistics after a recompute forward", c->name);
    fails += !lt_compare_f(what, t.b.stats, st0, nst, LT_TOL_EXACT, NULL);
  }

  /* Backward twice: input grads are written (a sentinel must vanish, the second pass gives
   * the same values), parameter grads add up to exactly twice. */
  for (int i = 0; i < t.l.n_in; i++)
    if (t.din[i].data)
      for (int64_t j = 0; j < gp_shape_numel(&t.din[i].shape); j++)
        GP_F32P(&t.din[i])[j] = SENTINEL;
  if (lt_backward(&t) != GP_OK) goto fail_status;
  for (int i = 0; i < t.l.n_in; i++)
    if (t.din[i].data) din1[i] = dup_floats(GP_F32P(&t.din[i]), gp_shape_numel(&t.din[i].shape));
  for (int i = 0; i < t.l.n_params; i++)
    if (t.b.grad[i]) g1[i] = dup_floats(t.b.grad[i], lt_param_numel(&t, i));
  if (lt_backward(&t) != GP_OK) goto fail_status;
  for (int i = 0; i < t.l.n_in; i++) {
    if (!din1[i]) continue;
    snprintf(what, sizeof what, "%s: dx%d of a second backward (must be =, not +=)", c->name, i);
    fails += !lt_compare_f(what, GP_F32P(&t.din[i]), din1[i], gp_shape_numel(&t.din[i].shape),
                           LT_TOL_EXACT, NULL);
  }
  for (int i = 0; i < t.l.n_params; i++) {
    if (!g1[i]) continue;
    int64_t n = lt_param_numel(&t, i);
    double *two = malloc((size_t)n * sizeof *two);
    for (int64_t j = 0; j < n; j++)
      two[j] = 2.0 * g1[i][j];
    snprintf(what, sizeof what, "%s: grad.%s after two backwards (must be +=)", c->name,
             t.l.pdesc[i].name);
    fails += !lt_compare(what, t.b.grad[i], two, n, LT_TOL_ACCUM, NULL);
    free(two);
  }

  /* A NULL din[0]: that buffer is left alone, the other inputs still get theirs. */
  if (t.din[0].data) {
    float *keep = t.din[0].data;
    int64_t n0 = gp_shape_numel(&t.din[0].shape);
    for (int64_t j = 0; j < n0; j++)
      keep[j] = SENTINEL;
    t.din[0].data = NULL;
    s = lt_backward(&t);
    t.din[0].data = keep;
    if (s != GP_OK) goto fail_status;
    int untouched = 1;
    for (int64_t j = 0; j < n0; j++)
      untouched &= keep[j] == SENTINEL;
    if (!untouched) {
      SAY("  FAIL %s: backward wrote dx0 although din[0].data was NULL\n", c->name);
      fails++;
    }
    for (int i = 1; i < t.l.n_in; i++) {
      if (!din1[i]) continue;
      snprintf(what, sizeof what, "%s: dx%d with din[0] skipped", c->name, i);
      fails += !lt_compare_f(what, GP_F32P(&t.din[i]), din1[i], gp_shape_numel(&t.din[i].shape),
                             LT_TOL_EXACT, NULL);
    }
  }

  /* Finite differences of every f32 input and every trainable parameter. Normal forwards:
   * a recompute one adds no loss (the loss objective), and statistics do not change a
   * training-mode output. */
  t.e.recompute = 0;
  for (int i = 0; i < t.l.n_in; i++) {
    if (!din1[i]) continue;
    int64_t n = gp_shape_numel(&t.in[i].shape);
    if (kind_of(c, i) == 'g') { /* a mask: constant almost everywhere */
      double *zero = calloc((size_t)n, sizeof *zero);
      snprintf(what, sizeof what, "%s: dx%d of a mask (must be 0)", c->name, i);
      fails += !lt_compare(what, din1[i], zero, n, LT_TOL_EXACT, NULL);
      free(zero);
      continue;
    }
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t j = 0; j < n && s == GP_OK; j++)
      s = fd_at(&t, &GP_F32P(&t.in[i])[j], is_loss, &fd[j]);
    if (s == GP_OK) {
      snprintf(what, sizeof what, "%s: dx%d vs finite differences", c->name, i);
      double e;
      fails += !lt_compare(what, din1[i], fd, n, c->tol, &e);
      case_fd_err = fmax(case_fd_err, e);
    }
    free(fd);
    if (s != GP_OK) goto fail_status;
  }
  for (int i = 0; i < t.l.n_params; i++) {
    if (!g1[i]) continue;
    int64_t n = lt_param_numel(&t, i);
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t j = 0; j < n && s == GP_OK; j++)
      s = fd_at(&t, &t.b.param[i][j], is_loss, &fd[j]);
    if (s == GP_OK) {
      snprintf(what, sizeof what, "%s: grad.%s vs finite differences", c->name, t.l.pdesc[i].name);
      double e;
      fails += !lt_compare(what, g1[i], fd, n, c->tol, &e);
      case_fd_err = fmax(case_fd_err, e);
    }
    free(fd);
    if (s != GP_OK) goto fail_status;
  }
  goto done;

fail_status:
  SAY("  FAIL %s: %s (%s)\n", c->name, gp_error_message(), gp_error_origin());
  fails++;
done:
  free(y0);
  free(st0);
  for (int i = 0; i < 4; i++)
    free(din1[i]);
  for (int i = 0; i < GP_MAX_PARAMS; i++)
    free(g1[i]);
  lt_layer_free(&t);
  return fails;
}

/* GPipe's batch norm: running statistics move once per mini-batch by the statistics of the
 * whole mini-batch, pooled from its micro-batches (unbiased variance, as PyTorch): the spread
 * between the two micro-batches' means counts. A recompute forward or an evaluation forward
 * adds nothing, and a step with nothing accumulated changes nothing. */
static int check_batchnorm_micro(gp_backend *be) {
  enum { N = 3, C = 2, INNER = 4 };
  const double momentum = 0.1;
  gp_shape shp = {3, {C, 2, 2}};
  lt_layer t;
  int fails = 0;
  gp_status s = lt_layer_build(&t, be, "{type: batchnorm, momentum: 0.1}", 1, &shp, NULL, N);
  if (s != GP_OK) {
    printf("FAIL batchnorm micro-batches: build: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  int im = lt_param_index(&t, "running_mean"), iv = lt_param_index(&t, "running_var");
  if (im < 0 || iv < 0 || !t.l.type->step_end) {
    printf("FAIL batchnorm micro-batches: no running_mean/running_var or no step_end\n");
    lt_layer_free(&t);
    return 1;
  }
  float *rm = t.b.param[im], *rv = t.b.param[iv], *x = GP_F32P(&t.in[0]);
  float xs[2][N * C * INNER];
  double want_m[C], want_v[C], rm0[C], rv0[C];
  for (int c = 0; c < C; c++) {
    rm[c] = 0.2f * (float)c - 0.1f;
    rv[c] = 0.8f + 0.3f * (float)c;
    rm0[c] = rm[c];
    rv0[c] = rv[c];
    want_m[c] = want_v[c] = 0;
  }
  for (int m = 0; m < 2; m++)
    lt_fill_uniform(300 + (uint64_t)m, xs[m], N * C * INNER, -1.0f + (float)m, 2.0f);
  for (int c = 0; c < C; c++) {
    double sum = 0, sq = 0;
    for (int m = 0; m < 2; m++)
      for (int i = 0; i < N; i++)
        for (int j = 0; j < INNER; j++)
          sum += xs[m][(i * C + c) * INNER + j];
    double mean = sum / (2 * N * INNER);
    for (int m = 0; m < 2; m++)
      for (int i = 0; i < N; i++)
        for (int j = 0; j < INNER; j++) {
          double d = xs[m][(i * C + c) * INNER + j] - mean;
          sq += d * d;
        }
    want_m[c] = mean;
    want_v[c] = sq / (2 * N * INNER - 1);
  }
  for (int c = 0; c < C; c++) {
    want_m[c] = (1 - momentum) * rm0[c] + momentum * want_m[c];
    want_v[c] = (1 - momentum) * rv0[c] + momentum * want_v[c];
  }
  /* micro-batch 0, micro-batch 1, a recompute of 0, an evaluation forward of 1 */
  const int order[4][3] = {{0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 0, 0}}; /* x, train, recompute */
  for (int k = 0; k < 4 && s == GP_OK; k++) {
    memcpy(x, xs[order[k][0]], sizeof xs[0]);
    t.e.training = order[k][1];
    t.e.recompute = order[k][2];
    t.e.micro = order[k][0];
    s = lt_forward(&t);
  }
  if (s == GP_OK) s = t.l.type->step_end(&t.l, &t.b, be);
  if (s != GP_OK) {
    printf("FAIL batchnorm micro-batches: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  fails += !lt_compare("batchnorm running_mean after 2 micro-batches", rm, want_m, C,
                       LT_TOL_TORCH_STAT, NULL);
  fails += !lt_compare("batchnorm running_var after 2 micro-batches", rv, want_v, C,
                       LT_TOL_TORCH_STAT, NULL);
  /* nothing accumulated: the next step leaves the statistics alone */
  float keep[2 * C];
  memcpy(keep, rm, C * sizeof *rm);
  memcpy(keep + C, rv, C * sizeof *rv);
  if (t.l.type->step_end(&t.l, &t.b, be) != GP_OK) fails++;
  fails +=
      !lt_compare_f("batchnorm running_mean after an empty step", rm, keep, C, LT_TOL_EXACT, NULL);
  fails += !lt_compare_f("batchnorm running_var after an empty step", rv, keep + C, C, LT_TOL_EXACT,
                         NULL);
  printf("%s batchnorm micro-batches (the mini-batch's statistics, once per step)\n",
         fails ? "FAIL" : "ok  ");
  lt_layer_free(&t);
  return fails > 0;
}

/* One value per channel (a micro-batch of one sample of 1x1 planes) normalizes to the bias
 * alone, with no gradient for the input: refused in training, as PyTorch does; evaluation,
 * which uses the running statistics, runs. */
static int check_batchnorm_one_value(gp_backend *be) {
  gp_shape shp = {3, {2, 1, 1}};
  lt_layer t;
  if (lt_layer_build(&t, be, "{type: batchnorm}", 1, &shp, NULL, 1) != GP_OK) {
    printf("FAIL batchnorm one value: build: %s\n", gp_error_message());
    lt_layer_free(&t);
    return 1;
  }
  t.e.training = 1;
  gp_status s = lt_forward(&t);
  int ok = s == GP_ERR_USAGE && strstr(gp_error_message(), "one value per channel");
  t.e.training = 0;
  ok = ok && lt_forward(&t) == GP_OK;
  printf("%s batchnorm: one value per channel refused in training (%s)\n", ok ? "ok  " : "FAIL",
         s == GP_OK ? "ran" : gp_error_message());
  lt_layer_free(&t);
  return !ok;
}

/* The checks above on a layer with one deliberate bug at a time: bug none must pass, every
 * other bug must be caught. */
static int self_test(gp_backend *be, int *passed) {
  int failed = 0;
  for (int b = 0; lt_selftest_bugs[b]; b++) {
    char yaml[80];
    snprintf(yaml, sizeof yaml, "{type: selftest_scale, bug: %s}", lt_selftest_bugs[b]);
    grad_case c = {"self-test", yaml, 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR};
    quiet = 1;
    lt_set_quiet(1);
    int f = run_case(be, &c, &lt_selftest_scale, 77);
    quiet = 0;
    lt_set_quiet(0);
    int ok = b == 0 ? f == 0 : f > 0;
    printf("%s self-test: bug '%s' %s (%d checks failed)\n", ok ? "ok  " : "FAIL",
           lt_selftest_bugs[b], b == 0 ? "passes" : "is caught", f);
    failed += !ok;
    *passed += ok;
  }
  return failed;
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  int failed = 0, passed = 0;
  for (int i = 0; all_types[i]; i++) {
    int covered = 0;
    for (int k = 0; k < N_CASES; k++)
      covered |= strcmp(type_of(cases[k].yaml), all_types[i]) == 0;
    if (!covered) {
      printf("FAIL: no gradient case for layer type %s\n", all_types[i]);
      failed++;
    }
  }
  for (int k = 0; k < N_CASES; k++) {
    case_fd_err = 0;
    int f = run_case(be, &cases[k], NULL, 1000 + (uint64_t)k * 17);
    if (f < 0) {
      printf("MISSING %s (layer type %s is not registered)\n", cases[k].name,
             type_of(cases[k].yaml));
      note_missing(type_of(cases[k].yaml));
      continue;
    }
    printf("%s %s (max finite-difference error %.2g)\n", f ? "FAIL" : "ok  ", cases[k].name,
           case_fd_err);
    failed += f > 0;
    passed += f == 0;
  }
  if (gp_layer_type_find("batchnorm")) {
    int r = check_batchnorm_micro(be);
    failed += r;
    passed += !r;
    r = check_batchnorm_one_value(be);
    failed += r;
    passed += !r;
  }
  failed += self_test(be, &passed);
  gp_backend_destroy(be);
  if (missing[0]) {
    printf("FAIL: layer types not registered:%s\n", missing);
    failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
