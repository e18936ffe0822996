/* softmax_cross_entropy: the loss layer. Inputs: logits [..., K] (f32) and labels of the
 * leading shape [...] (i32): one class per sample ([K] and []) or per token ([T, K] and [T]).
 * Output: the loss per target (0 where the label is ignore_index). It adds the loss summed
 * over targets / loss_count, the correct predictions and the targets counted to the exec's
 * host accumulators; ignored targets add no loss, no gradient and no count. */
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

typedef struct xent_conf {
  double smoothing;
  int64_t ignore_index;
  int64_t axis; /* as written */
  int ax;       /* resolved by shape(); the class axis of the per-sample logits */
} xent_conf;

static const gp_setting xent_settings[] = {
    {.key = "label_smoothing",
     GP_SETTING_FLOAT_AT(xent_conf, smoothing),
     .fdflt = 0,
     .range = GP_RANGE_BELOW_ONE,
     .doc = "the target puts 1 - s on the label and s/K on every class (PyTorch's)"},
    /* Negative, so that the pipeline, which counts a mini-batch's targets from the host labels
     * before any stage runs, counts exactly the labels this layer does not ignore. */
    {.key = "ignore_index",
     GP_SETTING_INT_AT(xent_conf, ignore_index),
     .idflt = -100,
     .min = INT32_MIN,
     .max = -1,
     .doc = "a label with this value adds no loss, no gradient and no count"},
    {.key = "axis",
     GP_SETTING_INT_AT(xent_conf, axis),
     .idflt = -1,
     .min = -GP_MAX_DIMS,
     .max = GP_MAX_DIMS - 1,
     .doc = "the class axis of the per-sample logits (0: [C, H, W] logits against [H, W] labels, "
            "per pixel); negative counts from the end"},
};

static gp_status xent_shape(gp_layer *l) {
  char b1[GP_LAYER_SHAPE_STR], b2[GP_LAYER_SHAPE_STR];
  xent_conf *k = l->conf;
  const gp_shape *z = &l->in_shape[0], *y = &l->in_shape[1];
  l->n_params = 0;
  if (l->n_in != 2)
    return GP_ERR(GP_ERR_SPEC, "softmax_cross_entropy takes 2 inputs (logits, labels), got %d",
                  l->n_in);
  const int64_t ax = k->axis < 0 ? k->axis + z->ndim : k->axis;
  if (ax < 0 || ax >= z->ndim)
    return GP_ERR(GP_ERR_SPEC, "softmax_cross_entropy: axis %lld is outside the logits' shape %s",
                  (long long)k->axis, gp_layers_shape_str(z, b1));
  k->ax = (int)ax;
  int lead_ok = z->ndim >= 1 && y->ndim == z->ndim - 1;
  for (int i = 0; lead_ok && i < y->ndim; i++)
    lead_ok = y->d[i] == z->d[i + (i >= k->ax)];
  if (k->ax != z->ndim - 1 && !lead_ok)
    return GP_ERR(GP_ERR_SPEC,
                  "softmax_cross_entropy along axis %d expects labels of the logits' shape "
                  "without that axis, got logits %s and labels %s",
                  k->ax, gp_layers_shape_str(z, b1), gp_layers_shape_str(y, b2));
  if (!lead_ok)
    return GP_ERR(GP_ERR_SPEC,
                  "softmax_cross_entropy expects logits [..., K] and labels of their leading "
                  "shape [...] (e.g. [K] and [], or [T, K] and [T]), got %s and %s",
                  gp_layers_shape_str(z, b1), gp_layers_shape_str(y, b2));
  if (l->in_dtype[0] != GP_F32 || l->in_dtype[1] != GP_I32)
    return GP_ERR(GP_ERR_SPEC,
                  "softmax_cross_entropy expects f32 logits and i32 labels, got %s "
                  "and %s",
                  gp_dtype_spec_name(l->in_dtype[0]), gp_dtype_spec_name(l->in_dtype[1]));
  l->out_shape = *y;
  l->out_dtype = GP_F32;
  return GP_OK;
}

static void xent_cost(const gp_layer *l, gp_cost *c) {
  const xent_conf *kc = l->conf;
  double k = (double)l->in_shape[0].d[kc->ax];
  double rows = (double)gp_shape_numel(&l->in_shape[1]);
  c->fwd_flops = 6.0 * k * rows;
  c->bwd_flops = 2.0 * k * rows;
  c->params = 0;
  c->saved_bytes = (int64_t)(k * rows) * 4 + (int64_t)rows * 4; /* probabilities, labels */
  if (kc->ax != l->in_shape[0].ndim - 1) { /* the logits moved, kept till backward */
    c->fwd_flops += k * rows;
    c->saved_bytes += (int64_t)(k * rows) * 4;
  } else { /* the probabilities over the logits where allowed */
    c->over_input_bytes = (int64_t)(k * rows) * 4;
  }
  c->out_bytes = (int64_t)rows * 4;
}

/* The targets the loss is averaged over: the whole mini-batch's (set by the pipeline); a
 * pass that did not set it (a plain evaluation) averages over its own targets. */
static int64_t loss_count(const gp_exec *e, int64_t n) {
  return e->loss_count > 0 ? e->loss_count : (n > 0 ? n : 1);
}

/* The rows whose label is not ignored, as runs [start, end) over the micro-batch's rows, and
 * the labels with each ignored one replaced by class 0. Reads the labels to the host: which
 * rows count decides which rows are zeroed. Returns the number of kept rows in r->kept. */
typedef struct rows {
  int32_t *y;   /* all labels (host); then class 0 where ignored */
  int64_t *run; /* 2 per run */
  int64_t n_run, kept;
} rows;

static void rows_free(rows *r) {
  free(r->y);
  free(r->run);
}

static gp_status rows_find(const gp_exec *e, const gp_tensor *labels, int64_t n, int32_t ignore,
                           rows *r) {
  r->y = malloc((size_t)n * sizeof *r->y + 1);
  r->run = malloc((size_t)(n + 1) * 2 * sizeof *r->run);
  r->n_run = r->kept = 0;
  if (!r->y || !r->run) return GP_ERR(GP_ERR_NOMEM, "out of host memory for labels");
  const void *host = gp_exec_host_copy(e, labels->data);
  if (host)
    memcpy(r->y, host, (size_t)n * sizeof *r->y);
  else
    GP_TRY(e->be->to_host(e->be, r->y, labels->data, (size_t)n * sizeof *r->y));
  for (int64_t i = 0; i < n; i++) {
    if (r->y[i] == ignore) {
      r->y[i] = 0;
      continue;
    }
    if (r->n_run && r->run[2 * r->n_run - 1] == i)
      r->run[2 * r->n_run - 1] = i + 1;
    else {
      r->run[2 * r->n_run] = i;
      r->run[2 * r->n_run + 1] = i + 1;
      r->n_run++;
    }
    r->kept++;
  }
  return GP_OK;
}

/* Zeroes the ignored rows (w floats each) of x: the gaps between the runs. */
static gp_status zero_ignored(gp_backend *be, const rows *r, int64_t n, int64_t w, float *x) {
  int64_t done = 0;
  for (int64_t i = 0; i <= r->n_run; i++) {
    const int64_t a = i < r->n_run ? r->run[2 * i] : n;
    if (a > done) GP_TRY(be->zero(be, x + done * w, (size_t)((a - done) * w) * sizeof(float)));
    done = i < r->n_run ? r->run[2 * i + 1] : n;
  }
  return GP_OK;
}

/* A class axis other than the last: the logits' runtime shape and the order that moves the
 * axis last (inverse: back), for the backend's permute. */
static void class_last(const xent_conf *k, const gp_shape *z, int inverse, gp_shape *dims,
                       int *perm) {
  const int nd = z->ndim, a = 1 + k->ax; /* the batch is axis 0 */
  int fwd[GP_MAX_DIMS + 1], j = 0;
  for (int i = 0; i < nd; i++)
    if (i != a) fwd[j++] = i;
  fwd[j] = a;
  *dims = *z;
  if (!inverse) {
    for (int i = 0; i < nd; i++)
      perm[i] = fwd[i];
    return;
  }
  for (int i = 0; i < nd; i++) { /* dims of the moved tensor; perm its inverse */
    dims->d[i] = z->d[fwd[i]];
    perm[fwd[i]] = i;
  }
}

static int moved(const gp_layer *l) {
  const xent_conf *k = l->conf;
  return k->ax != l->in_shape[0].ndim - 1;
}

/* The axis ops' labels: a host copy with -1 where ignored (r->y), and the kept count; no runs
 * (nothing is zeroed afterwards), in a loop the compiler vectorizes. */
static gp_status labels_kept(const gp_exec *e, const gp_tensor *labels, int64_t n, int32_t ignore,
                             rows *r) {
  r->y = malloc((size_t)n * sizeof *r->y + 1);
  r->run = NULL;
  r->n_run = r->kept = 0;
  if (!r->y) return GP_ERR(GP_ERR_NOMEM, "out of host memory for labels");
  const void *host = gp_exec_host_copy(e, labels->data);
  if (host)
    memcpy(r->y, host, (size_t)n * sizeof *r->y);
  else
    GP_TRY(e->be->to_host(e->be, r->y, labels->data, (size_t)n * sizeof *r->y));
  int64_t kept = 0;
  int32_t *restrict y = r->y;
  for (int64_t i = 0; i < n; i++) {
    kept += y[i] != ignore;
    y[i] = y[i] == ignore ? -1 : y[i];
  }
  r->kept = kept;
  return GP_OK;
}

static void axis_dims(const gp_layer *l, const gp_shape *z, int64_t *outer, int64_t *inner) {
  const xent_conf *k = l->conf;
  *outer = *inner = 1;
  for (int i = 0; i < z->ndim; i++)
    if (i < 1 + k->ax)
      *outer *= z->d[i];
    else if (i > 1 + k->ax)
      *inner *= z->d[i];
}

/* A middle class axis on a backend with the axis ops: the logits read where they are. Saved:
 * [e^(z - max), [outer, k, inner] | 1 / sum per row | the labels, -1 where ignored]. */
static gp_status axis_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                              void **saved) {
  const xent_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n = gp_shape_numel(&in[1].shape), nk = in[0].shape.d[1 + k->ax], outer, inner;
  axis_dims(l, &in[0].shape, &outer, &inner);
  rows r = {0};
  float *probs = NULL;
  int64_t correct = 0;
  gp_status s = labels_kept(e, &in[1], n, (int32_t)k->ignore_index, &r);
  const int64_t kept = r.kept;
  if (s == GP_OK)
    s = gp_arena_alloc(e->arena, (size_t)(n * nk + 2 * n) * sizeof(float) + 4, (void **)&probs);
  int32_t *ysaved = probs ? (int32_t *)(probs + n * nk + n) : NULL;
  if (s == GP_OK) s = be->from_host(be, ysaved, r.y, (size_t)n * sizeof *r.y);
  if (s == GP_OK)
    s = be->softmax_xent_axis_forward(be, outer, nk, inner, (float)k->smoothing, GP_F32P(&in[0]),
                                      ysaved, GP_I32P(&in[1]), probs, probs + n * nk, GP_F32P(out),
                                      &correct);
  rows_free(&r);
  GP_TRY(s);
  *saved = probs;
  if (e->recompute || kept == 0) return GP_OK;
  double sum;
  GP_TRY(be->sum(be, n, GP_F32P(out), &sum));
  e->loss_sum += sum / (double)loss_count(e, kept);
  e->correct += correct;
  e->counted += kept;
  return GP_OK;
}

/* The labels for the backend's ops, class 0 where ignored: the labels as given where none is
 * ignored, else a copy of r->y in `ar`. */
static gp_status labels_dev(gp_backend *be, gp_arena *ar, const gp_tensor *labels, const rows *r,
                            int64_t n, const int32_t **y) {
  *y = GP_I32P(labels);
  if (r->kept == n) return GP_OK;
  int32_t *c;
  GP_TRY(gp_arena_alloc(ar, (size_t)n * sizeof *c + 4, (void **)&c));
  *y = c;
  return be->from_host(be, c, r->y, (size_t)n * sizeof *c);
}

/* Saved for backward: [probabilities of every row | the labels, class 0 where ignored], in the
 * arena; or, where the executor allows (e->over_input, the classes last), the probabilities over
 * the logits and nothing else (*saved = the logits' memory; backward reads the labels again and
 * writes the gradient there). One softmax over all rows, the logits read where they are (an
 * ignored row's loss and gradient are then zeroed): the backend's calls stay one per pass,
 * whatever the padding. count_correct reads the logits before the softmax may write over them,
 * and the labels as given (an ignored label is negative: never the argmax). */
static gp_status xent_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                              void **saved) {
  const xent_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n = gp_shape_numel(&in[1].shape), nk = in[0].shape.d[1 + k->ax];
  float *z = GP_F32P(&in[0]);
  if (moved(l) && be->softmax_xent_axis_forward) return axis_forward(l, e, in, out, saved);
  if (moved(l)) { /* the classes last, in a temporary of this pass */
    gp_shape dims;
    int perm[GP_MAX_DIMS + 1];
    class_last(k, &in[0].shape, 0, &dims, perm);
    GP_TRY(gp_arena_alloc(e->arena, (size_t)(n * nk) * sizeof(float), (void **)&z));
    GP_TRY(be->permute(be, dims.ndim, dims.d, perm, GP_F32P(&in[0]), z));
  }
  const int over = e->over_input && !moved(l);
  rows r = {0};
  gp_status s = rows_find(e, &in[1], n, (int32_t)k->ignore_index, &r);
  int64_t kept = r.kept, correct = 0;
  float *probs = over ? z : NULL, *loss = GP_F32P(out);
  const int32_t *y = GP_I32P(&in[1]), *ydev = NULL;
  /* A re-materializing forward must not count the micro-batch twice. */
  const int counts = !e->recompute && kept > 0;
  if (s == GP_OK && counts) s = be->count_correct(be, n, nk, z, y, &correct);
  if (s == GP_OK && over && kept)
    s = labels_dev(be, e->arena, &in[1], &r, n, &ydev);
  else if (s == GP_OK && !over) {
    s = gp_arena_alloc(e->arena, (size_t)(n * nk + n) * sizeof(float) + 4, (void **)&probs);
    int32_t *ysaved = probs ? (int32_t *)(probs + n * nk) : NULL;
    ydev = ysaved;
    if (s == GP_OK && kept == n && n)
      s = be->copy(be, ysaved, y, (size_t)n * sizeof *y);
    else if (s == GP_OK && kept)
      s = be->from_host(be, ysaved, r.y, (size_t)n * sizeof *y);
  }
  if (s == GP_OK && kept)
    s = be->softmax_xent_forward(be, n, nk, (float)k->smoothing, z, ydev, probs, loss);
  if (s == GP_OK && kept < n) s = zero_ignored(be, &r, n, 1, loss);
  rows_free(&r);
  GP_TRY(s);
  *saved = probs;
  if (!counts) return GP_OK;
  double sum;
  GP_TRY(be->sum(be, n, loss, &sum));
  e->loss_sum += sum / (double)loss_count(e, kept);
  e->correct += correct;
  e->counted += kept;
  return GP_OK;
}

static gp_status xent_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                               const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                               void *saved) {
  (void)out;
  (void)dout; /* the loss is the end of the graph: its gradient is 1 / loss_count */
  const xent_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t n = gp_shape_numel(&in[1].shape), nk = in[0].shape.d[1 + k->ax];
  if (!din[0].data) return GP_OK;
  if (!saved)
    return GP_ERR(GP_ERR_RUNTIME, "softmax_cross_entropy %s: backward without its forward",
                  l->path);
  const int axis_op = moved(l) && be->softmax_xent_axis_backward;
  rows r = {0};
  gp_status s = axis_op ? labels_kept(e, &in[1], n, (int32_t)k->ignore_index, &r)
                        : rows_find(e, &in[1], n, (int32_t)k->ignore_index, &r);
  if (axis_op) { /* the labels saved with -1 where ignored: nothing to zero afterwards */
    int64_t outer, inner;
    axis_dims(l, &in[0].shape, &outer, &inner);
    const float *probs = saved;
    const float scale = (float)(1.0 / (double)loss_count(e, r.kept));
    if (s == GP_OK)
      s = be->softmax_xent_axis_backward(be, outer, nk, inner, (float)k->smoothing, scale, probs,
                                         probs + n * nk, (const int32_t *)(probs + n * nk + n),
                                         GP_F32P(&din[0]));
    rows_free(&r);
    return s;
  }
  const int64_t kept = r.kept;
  const float *probs = saved;
  const int32_t *y = (const int32_t *)(probs + n * nk);
  const float scale = (float)(1.0 / (double)loss_count(e, kept));
  float *dz = GP_F32P(&din[0]);
  gp_arena *tmp = e->temp ? e->temp : e->arena;
  /* over the logits: din[0] is that memory (the executor hands it), written in place */
  if (s == GP_OK && saved == in[0].data && kept) s = labels_dev(be, tmp, &in[1], &r, n, &y);
  if (s == GP_OK && saved == in[0].data && dz != saved)
    s = GP_ERR(GP_ERR_RUNTIME,
               "softmax_cross_entropy %s: its state is over the logits, but the "
               "input gradient is elsewhere",
               l->path);
  if (s == GP_OK && moved(l))
    s = gp_arena_alloc(tmp, (size_t)(n * nk) * sizeof(float), (void **)&dz);
  if (s == GP_OK && kept)
    s = be->softmax_xent_backward(be, n, nk, (float)k->smoothing, scale, probs, y, dz);
  if (s == GP_OK && kept < n) s = zero_ignored(be, &r, n, nk, dz);
  if (s == GP_OK && moved(l)) { /* the classes back where the logits have them */
    gp_shape dims;
    int perm[GP_MAX_DIMS + 1];
    class_last(k, &in[0].shape, 1, &dims, perm);
    s = be->permute(be, dims.ndim, dims.d, perm, dz, GP_F32P(&din[0]));
  }
  rows_free(&r);
  return s;
}

const gp_layer_type gp_layer_softmax_cross_entropy = {
    .name = "softmax_cross_entropy",
    .doc = "the loss: softmax of logits `[..., K]` against i32 labels `[...]`, averaged over the "
           "targets",
    .is_loss = 1,
    .min_inputs = 2,
    .max_inputs = 2,
    .conf_size = sizeof(xent_conf),
    GP_LAYER_SETTINGS(xent_settings),
    .configure = gp_layers_configure,
    .shape = xent_shape,
    .saves_over_input = 1,
    .cost = xent_cost,
    .forward = xent_forward,
    .backward = xent_backward,
};
