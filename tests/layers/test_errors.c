/* Bad layer configurations get clear errors: unknown keys are located and name the nearest
 * known key, bad values carry file:line:col, and shape mismatches name both shapes. The
 * checks are on the message text, since the message is what a user sees. */
#include <stdio.h>
#include <string.h>

#include "tests/layers/harness.h"

typedef struct err_case {
  const char *name;
  const char *yaml;
  int n_in;
  int labels_f32; /* loss: pass labels as F32 (wrong) */
  gp_shape in[GP_MAX_INPUTS];
  const char *needles[5]; /* all must appear in the message */
  const char *forbid;     /* must not appear (NULL: nothing) */
  const char *i32;        /* per input, 'i': that input is I32 (NULL: all f32) */
} err_case;

/* One case per line reads better than one field per line. */
/* clang-format off */
#define S0 {0, {0}}
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
static const err_case cases[] = {
    /* ---- unknown keys ---- */
    {"misspelt required key", "type: conv2d\nout_channels: 4\nkernal: 3\n", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:3:", "unknown key 'kernal'", "did you mean 'kernel'?"}, NULL},
    {"misspelt optional key", "{type: conv2d, out_channels: 4, kernel: 3, stide: 2}", 1, 0,
     {S3(3, 8, 8)}, {"test.yaml:1:", "unknown key 'stide'", "did you mean 'stride'?"}, NULL},
    {"misspelt pool key", "{type: maxpool, kernel: 2, paddin: 1}", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:1:", "unknown key 'paddin'", "did you mean 'padding'?"}, NULL},
    {"unknown key, nothing near", "{type: relu, zzzzzz: 1}", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:1:", "unknown key 'zzzzzz'"}, "did you mean"},
    {"linear key typo", "{type: linear, out_feature: 4}", 1, 0, {S1(8)},
     {"test.yaml:1:", "unknown key 'out_feature'", "did you mean 'out_features'?"}, NULL},
    /* ---- bad values, located at the value ---- */
    {"not an integer", "type: conv2d\nout_channels: four\nkernel: 3\n", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:2:15:", "out_channels", "'four'"}, NULL},
    {"bad list item", "type: conv2d\nout_channels: 4\nkernel: [3, x]\n", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:3:13:", "kernel", "'x'"}, NULL},
    {"zero channels", "type: conv2d\nout_channels: 0\nkernel: 3\n", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:2:15:", "out_channels"}, NULL},
    {"kernel list too long", "type: conv2d\nout_channels: 2\nkernel: [3, 3, 3]\n", 1, 0,
     {S3(3, 8, 8)}, {"test.yaml:3:", "kernel"}, NULL},
    {"bad bool", "type: linear\nout_features: 4\nbias: maybe\n", 1, 0, {S1(8)},
     {"test.yaml:3:7:", "bias", "'maybe'"}, NULL},
    {"gelu choice", "type: gelu\napproximate: tahn\n", 1, 0, {S1(8)},
     {"test.yaml:2:14:", "'tahn'", "did you mean 'tanh'?"}, NULL},
    {"dropout p out of range", "type: dropout\np: 1.5\n", 1, 0, {S1(8)}, {"test.yaml:2:4:", "p"},
     NULL},
    {"negative padding", "type: maxpool\nkernel: 2\npadding: -1\n", 1, 0, {S3(3, 8, 8)},
     {"test.yaml:3:10:", "padding"}, NULL},
    {"groups do not divide out_channels", "type: conv2d\nout_channels: 6\nkernel: 3\ngroups: 4\n",
     1, 0, {S3(8, 8, 8)}, {"test.yaml:", "groups", "6", "4"}, NULL},
    {"negative pad", "type: pad\nchannels: [1, -2]\n", 1, 0, {S3(2, 3, 3)},
     {"test.yaml:2:15:", "channels", "-2"}, NULL},
    {"pad needs two values", "type: pad\nchannels: [1]\n", 1, 0, {S3(2, 3, 3)},
     {"test.yaml:2:", "channels"}, NULL},
    {"smoothing out of range", "type: softmax_cross_entropy\nlabel_smoothing: 2\n", 2, 0,
     {S1(5), {0, {0}}}, {"test.yaml:2:18:", "label_smoothing"}, NULL},
    /* ---- shapes: the message names both sides ---- */
    {"add of two shapes", "{type: add}", 2, 0, {S3(4, 5, 5), S3(4, 6, 6)},
     {"[4, 5, 5]", "[4, 6, 6]"}, NULL},
    {"concat of two shapes", "{type: concat}", 2, 0, {S3(2, 4, 4), S3(3, 5, 5)},
     {"[2, 4, 4]", "[3, 5, 5]"}, NULL},
    {"conv kernel larger than input", "{type: conv2d, out_channels: 2, kernel: 7}", 1, 0,
     {S3(3, 5, 5)}, {"[3, 5, 5]", "7"}, NULL},
    {"conv groups do not divide channels", "{type: conv2d, out_channels: 8, kernel: 3, groups: 4}",
     1, 0, {S3(6, 8, 8)}, {"[6, 8, 8]", "groups", "4"}, NULL},
    {"conv on a vector", "{type: conv2d, out_channels: 2, kernel: 3}", 1, 0, {S1(10)}, {"[10]"},
     NULL},
    {"maxpool kernel larger than input", "{type: maxpool, kernel: 5}", 1, 0, {S3(2, 3, 3)},
     {"[2, 3, 3]", "5"}, NULL},
    {"avgpool kernel larger than input", "{type: avgpool, kernel: [1, 4]}", 1, 0, {S3(2, 3, 3)},
     {"[2, 3, 3]", "4"}, NULL},
    {"global_avgpool on a vector", "{type: global_avgpool}", 1, 0, {S1(5)}, {"[5]"}, NULL},
    {"batchnorm on a scalar", "{type: batchnorm}", 1, 0, {{0, {0}}}, {"[]"}, NULL},
    {"pad on a scalar", "{type: pad, channels: [1, 1]}", 1, 0, {{0, {0}}}, {"[]"}, NULL},
    {"loss labels must be I32", "{type: softmax_cross_entropy}", 2, 1, {S1(5), {0, {0}}},
     {"i32", "f32"}, NULL},
    {"loss labels shape", "{type: softmax_cross_entropy}", 2, 0, {S1(5), S1(5)}, {"[5]"}, NULL},
    /* ---- Transformer layers ---- */
    {"attention dim not divisible by heads", "type: attention\nheads: 5\ndim: 12\n", 1, 0,
     {S2(4, 12)}, {"test.yaml:2:8:", "heads", "dim 12", "5 heads"}, NULL},
    {"attention input dim not divisible by heads", "{type: attention, heads: 5}", 1, 0,
     {S2(4, 12)}, {"[4, 12]", "5 heads"}, NULL},
    {"attention dim does not match the input", "{type: attention, heads: 2, dim: 8}", 1, 0,
     {S2(4, 12)}, {"dim 8", "[4, 12]"}, NULL},
    {"attention on [C, H, W]", "{type: attention, heads: 2}", 1, 0, {S3(2, 4, 4)},
     {"[T, dim]", "[2, 4, 4]"}, NULL},
    {"attention mask of the wrong length", "{type: attention, heads: 2}", 2, 0,
     {S2(4, 12), S1(5)}, {"mask", "[4]", "[5]"}, NULL},
    {"attention keys of another width", "{type: attention, heads: 2}", 2, 0,
     {S2(4, 12), S2(6, 8)}, {"keys/values", "[6, 8]", "[4, 12]"}, NULL},
    {"attention 3 inputs without keys", "{type: attention, heads: 2}", 3, 0,
     {S2(4, 12), S1(4), S1(4)}, {"3 inputs", "[4]"}, NULL},
    {"attention dropout 1", "type: attention\nheads: 2\ndropout: 1\n", 1, 0, {S2(4, 12)},
     {"test.yaml:3:10:", "dropout"}, NULL},
    {"attention key typo", "{type: attention, heads: 2, casual: true}", 1, 0, {S2(4, 12)},
     {"test.yaml:1:", "unknown key 'casual'", "did you mean 'causal'?"}, NULL},
    {"attention without heads", "{type: attention, dim: 12}", 1, 0, {S2(4, 12)},
     {"test.yaml:1:", "heads"}, NULL},
    {"attention heads not a multiple of kv_heads", "type: attention\nheads: 4\nkv_heads: 3\n", 1,
     0, {S2(4, 12)}, {"test.yaml:3:11:", "kv_heads", "4 heads", "3 kv_heads"}, NULL},
    {"attention kv_heads 0", "type: attention\nheads: 4\nkv_heads: 0\n", 1, 0, {S2(4, 12)},
     {"test.yaml:3:11:", "kv_heads"}, NULL},
    {"attention rope theta 0", "type: attention\nheads: 2\nrope: {theta: 0}\n", 2, 0,
     {S2(4, 12), S1(4)}, {"test.yaml:3:15:", "rope.theta", "> 0"}, NULL, "fi"},
    {"attention rope key typo", "type: attention\nheads: 2\nrope: {thta: 10}\n", 2, 0,
     {S2(4, 12), S1(4)}, {"test.yaml:3:", "rope.thta", "did you mean 'rope.theta'?"}, NULL, "fi"},
    {"attention rope without positions", "{type: attention, heads: 2, rope: {theta: 10000}}", 1, 0,
     {S2(4, 12)}, {"rope", "positions", "i32 [4]"}, NULL},
    {"attention rope positions f32", "{type: attention, heads: 2, rope: {theta: 10000}}", 2, 0,
     {S2(4, 12), S1(4)}, {"positions", "i32 [4]", "got f32 [4]"}, NULL},
    {"attention rope odd head size", "{type: attention, heads: 4, rope: {theta: 10000}}", 2, 0,
     {S2(4, 12), S1(4)}, {"rope", "head size 3", "odd"}, NULL, "fi"},
    {"attention rope on cross-attention", "{type: attention, heads: 2, rope: {theta: 10000}}", 3, 0,
     {S2(4, 12), S2(5, 12), S1(4)}, {"rope", "self-attention"}, NULL, "ffi"},
    {"attention inputs typo", "type: attention\nheads: 2\ninputs: [query, poss]\n", 2, 0,
     {S2(4, 12), S1(4)}, {"test.yaml:3:17:", "'poss'", "did you mean 'pos'?"}, NULL, "fi"},
    {"attention inputs query not first", "type: attention\nheads: 2\ninputs: [mask, query]\n", 2,
     0, {S2(4, 12), S1(4)}, {"test.yaml:3:10:", "query"}, NULL, "fi"},
    {"attention inputs named twice", "type: attention\nheads: 2\ninputs: [query, mask, mask]\n", 3,
     0, {S2(4, 12), S1(4), S1(4)}, {"test.yaml:3:23:", "'mask' is named twice"}, NULL, "fii"},
    {"attention inputs count", "{type: attention, heads: 2, inputs: [query, mask]}", 3, 0,
     {S2(4, 12), S1(4), S1(4)}, {"inputs: names 2 inputs", "from: gives 3"}, NULL, "fii"},
    {"attention inputs pos without rope", "{type: attention, heads: 2, inputs: [query, pos]}", 2, 0,
     {S2(4, 12), S1(4)}, {"pos", "rope"}, NULL, "fi"},
    {"attention inputs rope without pos", "{type: attention, heads: 2, rope: {theta: 9}, inputs: [query]}",
     1, 0, {S2(4, 12)}, {"rope", "pos"}, NULL},
    {"attention inputs mask and segments", "{type: attention, heads: 2, inputs: [query, mask, segments]}",
     3, 0, {S2(4, 12), S1(4), S1(4)}, {"mask", "segment"}, NULL, "fii"},
    {"attention inputs cross segments without key_segments",
     "{type: attention, heads: 2, inputs: [query, memory, segments]}", 3, 0,
     {S2(4, 12), S2(5, 12), S1(4)}, {"key_segments"}, NULL, "ffi"},
    {"attention inputs segments of the wrong length",
     "{type: attention, heads: 2, inputs: [query, segments]}", 2, 0, {S2(4, 12), S1(5)},
     {"input 2 (segments)", "i32 [4]", "[5]"}, NULL, "fi"},
    {"attention inputs mask f32 of the wrong length",
     "{type: attention, heads: 2, inputs: [query, memory, mask]}", 3, 0,
     {S2(4, 12), S2(6, 12), S1(4)}, {"input 3 (mask)", "[6]", "got f32 [4]"}, NULL},
    {"attention inputs without the segments mask: says", "type: attention\nheads: 2\nmask: segments\ninputs: [query]\n",
     1, 0, {S2(4, 12)}, {"test.yaml:3:7:", "mask: segments", "names no segments"}, NULL},
    {"positional T > max_len", "{type: positional, max_len: 4}", 1, 0, {S2(5, 8)},
     {"[5, 8]", "T = 5", "max_len 4"}, NULL},
    {"positional on a vector", "{type: positional, max_len: 4}", 1, 0, {S1(8)},
     {"[T, dim]", "[8]"}, NULL},
    {"positional kind typo", "type: positional\nmax_len: 8\nkind: learnd\n", 1, 0, {S2(5, 8)},
     {"test.yaml:3:7:", "'learnd'", "did you mean 'learned'?"}, NULL},
    {"positional without max_len", "{type: positional}", 1, 0, {S2(5, 8)},
     {"test.yaml:1:", "max_len"}, NULL},
    {"embedding of F32 values", "{type: embedding, num_embeddings: 10, dim: 4}", 1, 0, {S1(5)},
     {"i32", "f32"}, NULL},
    {"embedding padding_idx out of range",
     "type: embedding\nnum_embeddings: 10\ndim: 4\npadding_idx: 10\n", 1, 0, {S1(5)},
     {"test.yaml:4:14:", "padding_idx", "10"}, NULL},
    {"embedding without dim", "{type: embedding, num_embeddings: 10}", 1, 0, {S1(5)},
     {"test.yaml:1:", "dim"}, NULL},
    /* ---- Llama's layers and init: normal ---- */
    {"rmsnorm eps 0", "type: rmsnorm\neps: 0\n", 1, 0, {S2(4, 8)}, {"test.yaml:2:6:", "eps"},
     NULL},
    {"rmsnorm key typo", "{type: rmsnorm, epsilon: 1.0e-5}", 1, 0, {S2(4, 8)},
     {"test.yaml:1:", "unknown key 'epsilon'"}, NULL},
    {"rmsnorm on a scalar", "{type: rmsnorm}", 1, 0, {S0}, {"rmsnorm", "[]"}, NULL},
    {"silu takes no settings", "{type: silu, beta: 2}", 1, 0, {S1(8)},
     {"test.yaml:1:", "unknown key 'beta'"}, NULL},
    {"mul of two shapes", "{type: mul}", 2, 0, {S2(4, 688), S2(4, 256)},
     {"mul", "[4, 688]", "[4, 256]"}, NULL},
    {"mul of one input", "{type: mul}", 1, 0, {S2(4, 8)}, {"mul", "2"}, NULL},
    {"mul of three inputs", "{type: mul}", 3, 0, {S1(8), S1(8), S1(8)}, {"mul", "3"}, NULL},
    /* ---- reshape, permute, groupnorm, the losses of f32 targets ---- */
    {"softmax_cross_entropy axis 0, labels of another shape",
     "{type: softmax_cross_entropy, axis: 0}", 2, 0, {S3(5, 4, 4), S2(4, 5)},
     {"axis 0", "[5, 4, 4]", "[4, 5]"}, NULL},
    {"softmax_cross_entropy axis outside", "{type: softmax_cross_entropy, axis: 3}", 2, 0,
     {S3(5, 4, 4), S2(4, 4)}, {"axis 3", "[5, 4, 4]"}, NULL},
    {"reshape to another size", "{type: reshape, shape: [5, -1]}", 1, 0, {S3(3, 4, 4)},
     {"reshape", "[3, 4, 4]", "48", "[5, -1]"}, NULL},
    {"reshape without -1, wrong size", "{type: reshape, shape: [4, 4]}", 1, 0, {S2(3, 4)},
     {"reshape", "[3, 4]", "[4, 4]"}, NULL},
    {"reshape two -1", "type: reshape\nshape: [-1, 2, -1]\n", 1, 0, {S2(3, 4)},
     {"test.yaml:2:16:", "second -1"}, NULL},
    {"reshape a 0", "type: reshape\nshape: [0, 2]\n", 1, 0, {S2(3, 4)},
     {"test.yaml:2:9:", "0"}, NULL},
    {"reshape -2", "type: reshape\nshape: [-2, 6]\n", 1, 0, {S2(3, 4)},
     {"test.yaml:2:9:", "shape", "-2"}, NULL},
    {"reshape 1.5", "type: reshape\nshape: [1.5, 8]\n", 1, 0, {S2(3, 4)},
     {"test.yaml:2:9:", "shape", "not an integer"}, NULL},
    {"reshape without shape", "{type: reshape}", 1, 0, {S2(3, 4)}, {"test.yaml:1:", "shape"},
     NULL},
    {"permute an axis twice", "{type: permute, axes: [0, 0, 1]}", 1, 0, {S3(2, 3, 4)},
     {"permute", "[2, 3, 4]", "axis 0 comes twice"}, NULL},
    {"permute an axis outside", "{type: permute, axes: [0, 3, 1]}", 1, 0, {S3(2, 3, 4)},
     {"permute", "[2, 3, 4]", "axis 3 is outside"}, NULL},
    {"permute too few axes", "{type: permute, axes: [1, 0]}", 1, 0, {S3(2, 3, 4)},
     {"permute", "2 axes", "[2, 3, 4]"}, NULL},
    {"groupnorm groups do not divide", "{type: groupnorm, groups: 3}", 1, 0, {S3(8, 4, 4)},
     {"groupnorm", "8 channels", "[8, 4, 4]", "3 groups"}, NULL},
    {"groupnorm groups 0", "type: groupnorm\ngroups: 0\n", 1, 0, {S3(8, 4, 4)},
     {"test.yaml:2:9:", "groups"}, NULL},
    {"groupnorm without groups", "{type: groupnorm}", 1, 0, {S3(8, 4, 4)},
     {"test.yaml:1:", "groups"}, NULL},
    {"mse target of another shape", "{type: mse}", 2, 0, {S2(4, 8), S2(4, 7)},
     {"mse", "target", "[4, 7]", "[4, 8]"}, NULL},
    {"l1 of one input", "{type: l1}", 1, 0, {S2(4, 8)}, {"l1", "2 inputs", "1"}, NULL},
    {"bce_with_logits of i32 labels", "{type: bce_with_logits}", 2, 0, {S1(8), S1(8)},
     {"bce_with_logits", "f32 target", "i32"}, NULL, "fi"},
    {"linear std without init: normal", "type: linear\nout_features: 4\nstd: 0.02\n", 1, 0,
     {S1(8)}, {"test.yaml:3:6:", "std", "init: normal"}, NULL},
    {"linear std 0", "type: linear\nout_features: 4\ninit: normal\nstd: 0\n", 1, 0, {S1(8)},
     {"test.yaml:4:6:", "std"}, NULL},
    {"linear init typo", "type: linear\nout_features: 4\ninit: normla\n", 1, 0, {S1(8)},
     {"test.yaml:3:7:", "'normla'", "did you mean 'normal'?"}, NULL},
    {"embedding std without init: normal",
     "type: embedding\nnum_embeddings: 10\ndim: 4\nstd: 0.02\n", 1, 0, {S1(5)},
     {"test.yaml:4:6:", "std", "init: normal"}, NULL},
    {"embedding zero vocabulary", "type: embedding\nnum_embeddings: 0\ndim: 4\n", 1, 0, {S1(5)},
     {"test.yaml:2:17:", "num_embeddings"}, NULL},
    /* ---- conv_transpose2d and upsample (U-Net decoders) ---- */
    {"conv_transpose2d output_padding >= stride", "type: conv_transpose2d\nout_channels: 4\nkernel: 2\nstride: 2\noutput_padding: 2\n",
     1, 0, {S3(3, 4, 4)}, {"test.yaml:5:17:", "output_padding 2", "smaller than stride 2"}, NULL},
    {"conv_transpose2d groups do not divide out_channels", "type: conv_transpose2d\nout_channels: 6\nkernel: 2\ngroups: 4\n",
     1, 0, {S3(8, 4, 4)}, {"test.yaml:4:9:", "out_channels 6", "groups 4"}, NULL},
    {"conv_transpose2d groups do not divide channels", "{type: conv_transpose2d, out_channels: 8, kernel: 3, groups: 4}",
     1, 0, {S3(6, 4, 4)}, {"[6, 4, 4]", "groups 4"}, NULL},
    {"conv_transpose2d padding leaves nothing", "{type: conv_transpose2d, out_channels: 2, kernel: 1, padding: 1}",
     1, 0, {S3(2, 2, 2)}, {"[2, 2, 2]", "padding [1, 1]", "no output"}, NULL},
    {"conv_transpose2d on a vector", "{type: conv_transpose2d, out_channels: 2, kernel: 2}", 1, 0,
     {S1(10)}, {"[10]", "[C, H, W]"}, NULL},
    {"upsample size and scale_factor", "type: upsample\nscale_factor: 2\nsize: [4, 4]\n", 1, 0,
     {S3(2, 2, 2)}, {"test.yaml:3:7:", "size or scale_factor, not both"}, NULL},
    {"upsample align_corners with nearest", "type: upsample\nscale_factor: 2\nalign_corners: true\n",
     1, 0, {S3(2, 2, 2)}, {"test.yaml:3:16:", "bilinear only"}, NULL},
    {"upsample bad mode", "type: upsample\nmode: bilinaer\nscale_factor: 2\n", 1, 0, {S3(2, 2, 2)},
     {"test.yaml:2:7:", "'bilinaer'", "did you mean 'bilinear'?"}, NULL},
    {"upsample scale_factor 0", "type: upsample\nscale_factor: 0\n", 1, 0, {S3(2, 2, 2)},
     {"test.yaml:2:15:", "scale_factor"}, NULL},
    {"upsample scale to nothing", "{type: upsample, scale_factor: 0.25}", 1, 0, {S3(2, 2, 3)},
     {"[2, 2, 3]", "scale_factor 0.25", "height"}, NULL},
    {"conv1d groups do not divide out_channels", "type: conv1d\nout_channels: 6\nkernel: 3\ngroups: 4\n",
     1, 0, {S2(8, 8)}, {"test.yaml:4:9:", "out_channels 6", "groups 4"}, NULL},
    {"conv1d kernel longer than input", "{type: conv1d, out_channels: 2, kernel: 7}", 1, 0,
     {S2(3, 5)}, {"[3, 5]", "kernel 7"}, NULL},
    {"conv1d on an image", "{type: conv1d, out_channels: 2, kernel: 3}", 1, 0, {S3(3, 5, 5)},
     {"[3, 5, 5]", "[C, L]"}, NULL},
    {"upsample on a vector", "{type: upsample, scale_factor: 2}", 1, 0, {S1(10)}, {"[10]"}, NULL},
};
/* clang-format on */

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static char missing[512];
static int missing_now; /* the last case's type is not registered */

static void note_missing(const char *yaml) {
  const char *p = strstr(yaml, "type:");
  char key[72];
  p = p ? p + 5 : yaml;
  while (*p == ' ')
    p++;
  snprintf(key, sizeof key, " %.*s,", (int)strcspn(p, ",}\n "), p);
  if (!strstr(missing, key)) strncat(missing, key, sizeof missing - strlen(missing) - 1);
}

static int run_case(const err_case *c) {
  lt_layer t;
  gp_dtype dt[GP_MAX_INPUTS];
  for (int i = 0; i < GP_MAX_INPUTS; i++)
    dt[i] = GP_F32;
  /* a loss case: labels are I32 unless the case is about that */
  if (strstr(c->yaml, "softmax_cross_entropy") && !c->labels_f32) dt[1] = GP_I32;
  for (int i = 0; c->i32 && c->i32[i]; i++)
    if (c->i32[i] == 'i') dt[i] = GP_I32;
  gp_error_clear();
  gp_status s = lt_layer_configure(&t, c->yaml, c->n_in, c->in, dt);
  const char *msg = gp_error_message();
  int fails = 0;
  missing_now = s == GP_ERR_UNSUPPORTED;
  if (s == GP_ERR_UNSUPPORTED) {
    printf("MISSING %s (%s)\n", c->name, msg);
    note_missing(c->yaml);
    lt_layer_free(&t);
    return 0;
  }
  if (s != GP_ERR_SPEC) {
    printf("  FAIL %s: expected a spec error, got %s: '%s'\n", c->name, gp_status_name(s), msg);
    fails++;
  } else {
    for (int i = 0; i < 5 && c->needles[i]; i++)
      if (!strstr(msg, c->needles[i])) {
        /* the message is on the case's last line: printed here too, GCC's -O3 with the
         * sanitizers took it for a possible NULL and failed the build (-Werror=format-overflow) */
        printf("  FAIL %s: the message lacks \"%s\"\n", c->name, c->needles[i]);
        fails++;
      }
    if (c->forbid && strstr(msg, c->forbid)) {
      printf("  FAIL %s: the message should not say \"%s\": '%s'\n", c->name, c->forbid, msg);
      fails++;
    }
  }
  printf("%s %s: %s\n", fails ? "FAIL" : "ok  ", c->name, msg);
  lt_layer_free(&t);
  return fails;
}

/* The registry: every listed name finds its table, whose name matches; add takes 2..8. */
static int check_registry(void) {
  int fails = 0, n = 0;
  const char *const *names = gp_layer_type_names();
  for (; names[n]; n++) {
    const gp_layer_type *ty = gp_layer_type_find(names[n]);
    if (!ty || strcmp(ty->name, names[n]) != 0) {
      printf("  FAIL registry: '%s' is listed but not found under that name\n", names[n]);
      fails++;
      continue;
    }
    if (!ty->configure || !ty->shape || !ty->cost || !ty->forward || !ty->backward ||
        ty->min_inputs < 1 || ty->max_inputs < ty->min_inputs || ty->max_inputs > GP_MAX_INPUTS) {
      printf("  FAIL registry: '%s' has a missing function or bad input counts\n", names[n]);
      fails++;
    }
  }
  if (gp_layer_type_find("conv") || gp_layer_type_find("") || gp_layer_type_find(NULL)) {
    printf("  FAIL registry: found a type that does not exist\n");
    fails++;
  }
  const char *near = gp_nearest("conv2", names, n);
  if (gp_layer_type_find("conv2d") && (!near || strcmp(near, "conv2d") != 0)) {
    printf("  FAIL registry: nearest name to 'conv2' is %s, not conv2d\n", near ? near : "none");
    fails++;
  }
  const gp_layer_type *add = gp_layer_type_find("add");
  if (add && (add->min_inputs != 2 || add->max_inputs != 8)) {
    printf("  FAIL registry: add takes %d..%d inputs, not 2..8\n", add->min_inputs,
           add->max_inputs);
    fails++;
  }
  const gp_layer_type *cat = gp_layer_type_find("concat");
  if (cat && cat->min_inputs > 2) {
    printf("  FAIL registry: concat needs %d inputs\n", cat->min_inputs);
    fails++;
  }
  printf("%s registry (%d types)\n", fails ? "FAIL" : "ok  ", n);
  return fails;
}

int main(void) {
  int failed = 0, passed = 0;
  for (int k = 0; k < N_CASES; k++) {
    int f = run_case(&cases[k]);
    failed += f > 0;
    passed += f == 0 && !missing_now;
  }
  int r = check_registry();
  failed += r > 0;
  passed += r == 0;
  if (missing[0]) {
    printf("FAIL: layer types not registered:%s\n", missing);
    failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
