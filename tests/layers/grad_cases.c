/* The finite-difference cases of every layer type and what fills and measures them. */
#include "tests/layers/grad_cases.h"

#include <stdio.h>
#include <string.h>

/* One case per line reads better than one field per line. */
/* clang-format off */
const grad_case lt_grad_cases[] = {
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
    /* Llama's: rope (positions 'p', restarting as in packed rows) and grouped-query heads */
    {"attention gqa h4 kv2", "{type: attention, heads: 4, kv_heads: 2}", 1, {S2(5, 8)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"attention mqa causal cross", "{type: attention, heads: 3, kv_heads: 1, causal: true}", 2,
     {S2(4, 6), S2(5, 6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"attention rope h2", "{type: attention, heads: 2, rope: {theta: 10000}}", 2,
     {S2(5, 8), S1(5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fp"},
    {"attention rope gqa causal no bias",
     "{type: attention, heads: 4, kv_heads: 2, bias: false, causal: true, rope: {theta: 500}}", 2,
     {S2(6, 8), S1(6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fp"},
    {"attention rope bias segments", "{type: attention, heads: 2, kv_heads: 1, rope: {theta: 100}, mask: segments}",
     3, {S2(5, 8), S1(5), S1(5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fsp"},
    {"attention named inputs", "{type: attention, heads: 4, kv_heads: 2, causal: true, rope: {theta: 10000}, inputs: [query, pos, segments]}",
     3, {S2(5, 8), S1(5), S1(5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fps"},
    {"attention named cross mask", "{type: attention, heads: 2, kv_heads: 1, inputs: [query, mask, memory]}",
     3, {S2(4, 6), S1(5), S2(5, 6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "fmf"},
    {"positional sinusoidal positions", "{type: positional, max_len: 7}", 2, {S2(5, 6), S1(5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "fi", 7},
    /* T = 5 > max_len: allowed with positions; rows of the weight sum several tokens */
    {"positional learned positions", "{type: positional, kind: learned, max_len: 4}", 2,
     {S2(5, 3), S1(5)}, 3, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "fi", 4},
    /* Llama's layers: 19 features leave a tail after the 8-float vector loops */
    {"rmsnorm", "{type: rmsnorm}", 1, {S2(3, 6)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_NORM},
    {"rmsnorm eps 3d tail", "{type: rmsnorm, eps: 0.01}", 1, {S3(2, 2, 19)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_NORM},
    {"silu", "{type: silu}", 1, {S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    /* 15 floats: 8 on the AVX2 loop where the CPU has it, 7 on the 4-lane one */
    {"silu tail", "{type: silu}", 1, {S2(3, 5)}, 1, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH},
    {"mul", "{type: mul}", 2, {S2(3, 5), S2(3, 5)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"linear init normal", "{type: linear, out_features: 3, init: normal, std: 0.5}", 1, {S1(4)},
     2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    /* U-Net and Llama shapes: reshape, permute, group norm; the losses of f32 targets ('t':
     * clear of l1's kink) */
    /* per-pixel segmentation: [C, H, W] logits against [H, W] labels */
    {"softmax_cross_entropy axis 0", "{type: softmax_cross_entropy, axis: 0}", 2,
     {S3(4, 3, 2), S2(3, 2)}, 2, FILL_UNIFORM, 4, 0, LT_TOL_FD_SMOOTH},
    {"reshape -1", "{type: reshape, shape: [3, -1]}", 1, {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"permute chw to hwc", "{type: permute, axes: [1, 2, 0]}", 1, {S3(3, 4, 5)}, 2, FILL_UNIFORM,
     0, 0, LT_TOL_FD_LINEAR},
    {"permute heads", "{type: permute, axes: [1, 0, -1]}", 1, {S3(3, 2, 4)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_LINEAR},
    {"groupnorm", "{type: groupnorm, groups: 2}", 1, {S3(4, 3, 3)}, 2, FILL_UNIFORM, 0, 0,
     LT_TOL_FD_NORM},
    {"groupnorm 1 group eps 2d", "{type: groupnorm, groups: 1, eps: 0.01}", 1, {S2(3, 5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_NORM},
    {"mse", "{type: mse}", 2, {S2(3, 4), S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_SMOOTH, "ft"},
    {"l1", "{type: l1}", 2, {S2(3, 4), S2(3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR, "ft"},
    {"bce_with_logits", "{type: bce_with_logits}", 2, {S3(2, 3, 2), S3(2, 3, 2)}, 2, FILL_UNIFORM,
     0, 0, LT_TOL_FD_SMOOTH, "ft"},
    /* U-Net decoders' upsampling: conv_transpose2d is conv2d's data gradient */
    {"conv_transpose2d k2 s2", "{type: conv_transpose2d, out_channels: 3, kernel: 2, stride: 2}", 1,
     {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv_transpose2d s2 p1 op1", "{type: conv_transpose2d, out_channels: 2, kernel: 3, stride: 2, padding: 1, output_padding: 1}",
     1, {S3(2, 4, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv_transpose2d groups 2 no bias", "{type: conv_transpose2d, out_channels: 4, kernel: 3, groups: 2, bias: false}",
     1, {S3(4, 3, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv_transpose2d dilation 2 rect", "{type: conv_transpose2d, out_channels: 2, kernel: [2, 3], stride: [1, 2], dilation: 2, padding: [1, 0], output_padding: [0, 1]}",
     1, {S3(3, 4, 3)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv1d k3", "{type: conv1d, out_channels: 3, kernel: 3}", 1, {S2(2, 7)}, 2, FILL_UNIFORM, 0,
     0, LT_TOL_FD_LINEAR},
    {"conv1d stride 2 pad 2 dilation 2 groups 2", "{type: conv1d, out_channels: 4, kernel: 3, stride: 2, padding: 2, dilation: 2, groups: 2}",
     1, {S2(4, 9)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"conv1d no bias", "{type: conv1d, out_channels: 2, kernel: 1, bias: false}", 1, {S2(3, 5)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"upsample nearest default x2", "{type: upsample}", 1, {S3(2, 3, 4)}, 2, FILL_UNIFORM,
     0, 0, LT_TOL_FD_LINEAR},
    {"upsample nearest size 5x7", "{type: upsample, size: [5, 7]}", 1, {S3(2, 3, 4)}, 2,
     FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"upsample bilinear x2", "{type: upsample, mode: bilinear, scale_factor: 2}", 1, {S3(2, 3, 4)},
     2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"upsample bilinear size 7x5", "{type: upsample, mode: bilinear, size: [7, 5]}", 1,
     {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"upsample bilinear align_corners 1.5", "{type: upsample, mode: bilinear, scale_factor: 1.5, align_corners: true}",
     1, {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
    {"upsample bilinear align_corners size", "{type: upsample, mode: bilinear, size: [8, 3], align_corners: true}",
     1, {S3(2, 3, 4)}, 2, FILL_UNIFORM, 0, 0, LT_TOL_FD_LINEAR},
};
/* clang-format on */

const int lt_n_grad_cases = (int)(sizeof lt_grad_cases / sizeof lt_grad_cases[0]);

/* Every type the layers helper owes; a type with no case here is a defect of this test. */
/* clang-format off */
const char *const lt_grad_types[] = {
    "conv2d", "linear", "batchnorm", "layernorm", "relu", "gelu", "tanh", "sigmoid", "maxpool",
    "avgpool", "global_avgpool", "flatten", "dropout", "add", "concat", "identity", "pad",
    "softmax_cross_entropy", "embedding", "positional", "attention", "rmsnorm", "silu", "mul",
    "reshape", "permute", "groupnorm", "mse", "l1", "bce_with_logits", "conv_transpose2d", "upsample",
    "conv1d", NULL,
};
/* clang-format on */

const char *lt_type_of(const char *yaml) {
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

int lt_grad_uncovered(void) {
  int missing = 0;
  for (int i = 0; lt_grad_types[i]; i++) {
    int covered = 0;
    for (int k = 0; k < lt_n_grad_cases; k++)
      covered |= strcmp(lt_type_of(lt_grad_cases[k].yaml), lt_grad_types[i]) == 0;
    if (!covered) printf("FAIL: no gradient case for layer type %s\n", lt_grad_types[i]);
    missing += !covered;
  }
  return missing;
}

double lt_objective(const lt_layer *t, int is_loss) {
  if (is_loss) return t->e.loss_sum;
  const float *y = GP_F32P(&t->out), *r = GP_F32P(&t->dout);
  int64_t n = gp_shape_numel(&t->out.shape);
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += (double)y[i] * (double)r[i];
  return s;
}

/* Central difference of the objective with respect to *x. */
gp_status lt_fd_at(lt_layer *t, float *x, int is_loss, double *out) {
  float x0 = *x;
  *x = x0 + FD_H;
  double xp = *x;
  GP_TRY(lt_forward(t));
  double lp = lt_objective(t, is_loss);
  *x = x0 - FD_H;
  double xm = *x;
  GP_TRY(lt_forward(t));
  double lm = lt_objective(t, is_loss);
  *x = x0;
  *out = (lp - lm) / (xp - xm); /* the rounded steps, not 2h: exact denominator */
  return GP_OK;
}

char lt_kind_of(const grad_case *c, int i) {
  return c->kinds ? c->kinds[i] : 'f';
}

/* Key-padding masks over tk keys: sample b pads its last b % 3 keys and, when b % 3 == 2,
 * key 1 too; key 0 is a token unless `all_pad_first` (sample 0 then pads every key). */
static int mask_keep(int64_t b, int64_t j, int64_t tk, int all_pad_first) {
  if (all_pad_first && b == 0) return 0;
  return j == 0 || (j < tk - b % 3 && !(b % 3 == 2 && j == 1));
}

void lt_fill_case(lt_layer *t, const grad_case *c, uint64_t seed) {
  for (int i = 0; i < t->l.n_in; i++) {
    int64_t n = gp_shape_numel(&t->in[i].shape), per = n / t->batch;
    char kind = lt_kind_of(c, i);
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
    if (kind == 'p') { /* positions of 's': restarting at each sentence, from 7 b in sample b */
      for (int64_t j = 0; j < n; j++) {
        int64_t b = j / per, k = j % per, half = (per + 1) / 2;
        GP_I32P(&t->in[i])[j] = (int32_t)(7 * b + (k < half ? k : k - half));
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
    if (kind == 't') { /* input 0 moved 0.1 to 1 away, up or down */
      lt_fill_away_from_zero(seed + (uint64_t)i, x, n, 0.1f, 1.0f);
      for (int64_t j = 0; j < n; j++)
        x[j] += GP_F32P(&t->in[0])[j];
      continue;
    }
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
