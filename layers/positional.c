/* positional: y = x + P[:T] over [T, dim] inputs, P [max_len, dim] broadcast over the batch;
 * with a second input pos, I32 [T] (packed rows: each token's position in its own sentence),
 * y[t] = x[t] + P[pos[t]], and a position outside [0, max_len) is a data error from forward.
 * kind: sinusoidal (default) is Vaswani et al.'s fixed table, interleaved: even features
 * sin(pos / 10000^(2i/dim)), odd features cos of the same angle (as the PyTorch tutorial's
 * PositionalEncoding), kept as the buffer "pe" so weights files carry it like PyTorch's
 * register_buffer; kind: learned is a trainable "weight" (N(0, 1), nn.Embedding's init). */
#include <string.h>

#include "layers/layers.h"

typedef struct positional_conf {
  int64_t max_len;
  int learned;
} positional_conf;

static const gp_setting positional_settings[] = {
    {.key = "max_len",
     GP_SETTING_INT_AT(positional_conf, max_len),
     .required = 1,
     .min = 1,
     .max = GP_LAYER_MAX_DIM,
     .doc = "rows of the position table (the longest sequence)"},
    {.key = "kind",
     GP_SETTING_CHOICE_AT(positional_conf, learned),
     .choices = (const char *const[]){"sinusoidal", "learned", NULL},
     .idflt = 0,
     .doc = "`sinusoidal`: Vaswani et al.'s fixed table; `learned`: a trained weight"},
};

static gp_status positional_shape(gp_layer *l) {
  const positional_conf *k = l->conf;
  const gp_shape *x = &l->in_shape[0];
  char buf[GP_LAYER_SHAPE_STR];
  l->n_params = 0;
  if (x->ndim != 2 || l->in_dtype[0] != GP_F32)
    return GP_ERR(GP_ERR_SPEC, "positional expects f32 input [T, dim], got %s %s",
                  gp_dtype_spec_name(l->in_dtype[0]), gp_layers_shape_str(x, buf));
  const gp_shape *p = &l->in_shape[1];
  if (l->n_in == 2 && (p->ndim != 1 || p->d[0] != x->d[0] || l->in_dtype[1] != GP_I32)) {
    char b2[GP_LAYER_SHAPE_STR];
    return GP_ERR(GP_ERR_SPEC,
                  "positional: input 2 must be the positions i32 [%lld], one per token of the "
                  "input %s, got %s %s",
                  (long long)x->d[0], gp_layers_shape_str(x, buf),
                  gp_dtype_spec_name(l->in_dtype[1]), gp_layers_shape_str(p, b2));
  }
  /* With explicit positions a packed row may be longer than max_len: its positions are
   * checked when it runs. */
  if (l->n_in == 1 && x->d[0] > k->max_len)
    return GP_ERR(GP_ERR_SPEC,
                  "positional: the input %s has T = %lld positions, more than max_len %lld",
                  gp_layers_shape_str(x, buf), (long long)x->d[0], (long long)k->max_len);
  GP_TRY(gp_layers_set_out(l, x));
  int64_t pd[2] = {k->max_len, x->d[1]};
  gp_shape ps = gp_shape_of(2, pd);
  if (k->learned) return gp_layers_add_param(l, "weight", &ps, GP_INIT_NORMAL, 0, 1);
  return gp_layers_add_param(l, "pe", &ps, GP_INIT_SINUSOIDAL, 0, 0);
}

static void positional_cost(const gp_layer *l, gp_cost *c) {
  const positional_conf *k = l->conf;
  double n = (double)gp_layers_numel(&l->out_shape);
  c->fwd_flops = n;
  c->bwd_flops = k->learned ? n : 0.0;
  c->params = k->learned ? k->max_len * l->in_shape[0].d[1] : 0;
  c->saved_bytes = 0;
  c->out_bytes = (int64_t)n * 4;
}

/* Every position in [0, max_len), read to the host in pieces (no allocation in the step):
 * the error names the value and where it is, before anything is written. */
static gp_status check_positions(const gp_layer *l, const gp_exec *e, const gp_tensor *pos) {
  const positional_conf *k = l->conf;
  const int64_t n = gp_shape_numel(&pos->shape), t = pos->shape.d[1];
  const int32_t *host = gp_exec_host_copy(e, pos->data);
  int32_t buf[512];
  for (int64_t at = 0; at < n; at += 512) {
    int64_t m = n - at < 512 ? n - at : 512;
    if (host)
      memcpy(buf, host + at, (size_t)m * sizeof *buf);
    else
      GP_TRY(e->be->to_host(e->be, buf, GP_I32P(pos) + at, (size_t)m * sizeof *buf));
    for (int64_t i = 0; i < m; i++)
      if (buf[i] < 0 || buf[i] >= k->max_len)
        return GP_ERR(GP_ERR_DATA,
                      "position %d at index %lld (sample %lld, token %lld) is outside [0, %lld) "
                      "(max_len)",
                      (int)buf[i], (long long)(at + i), (long long)((at + i) / t),
                      (long long)((at + i) % t), (long long)k->max_len);
  }
  return GP_OK;
}

static gp_status positional_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                    gp_tensor *out, void **saved) {
  (void)saved;
  const positional_conf *k = l->conf;
  gp_backend *be = e->be;
  int64_t per = gp_shape_numel(&l->in_shape[0]); /* T * dim: the first T rows of P */
  if (l->n_in == 2) {
    /* out = P[pos] (a lookup), then out += x: the same sum x + P[p] as without positions */
    int64_t n = gp_shape_numel(&in[1].shape), dim = l->in_shape[0].d[1];
    GP_TRY(check_positions(l, e, &in[1]));
    GP_TRY(be->embedding_forward(be, n, dim, k->max_len, GP_I32P(&in[1]), e->bind->param[0], 1.0f,
                                 GP_F32P(out)));
    return be->axpby(be, n * dim, 1.0f, GP_F32P(&in[0]), 1.0f, GP_F32P(out));
  }
  GP_TRY(gp_layers_copy(be, &in[0], out));
  return be->bias_add(be, in[0].shape.d[0], per, 1, e->bind->param[0], GP_F32P(out));
}

static gp_status positional_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                     const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                     void *saved) {
  (void)out;
  (void)saved;
  const positional_conf *k = l->conf;
  gp_backend *be = e->be;
  int w = gp_exec_weight_grads(e) && e->bind->grad[0]; /* W reads dy (and the positions) */
  if (w && l->n_in == 2) /* row p sums its tokens in their order: deterministic */
    GP_TRY(be->embedding_backward(be, gp_shape_numel(&in[1].shape), l->in_shape[0].d[1], k->max_len,
                                  GP_I32P(&in[1]), GP_F32P(dout), 1.0f, -1, e->bind->grad[0]));
  else if (w)
    GP_TRY(be->bias_grad(be, in[0].shape.d[0], gp_shape_numel(&l->in_shape[0]), 1, GP_F32P(dout),
                         e->bind->grad[0]));
  if (din[0].data) GP_TRY(gp_layers_copy(be, dout, &din[0]));
  if (l->n_in == 2 && din[1].data) /* positions take no gradient */
    GP_TRY(be->zero(be, din[1].data, gp_tensor_bytes(&din[1])));
  return GP_OK;
}

const gp_layer_type gp_layer_positional = {
    .name = "positional",
    .doc = "adds position vectors: `[T, dim]` to `[T, dim]`, optionally at given positions",
    .min_inputs = 1,
    .max_inputs = 2,
    .conf_size = sizeof(positional_conf),
    GP_LAYER_SETTINGS(positional_settings),
    .configure = gp_layers_configure,
    .shape = positional_shape,
    .cost = positional_cost,
    .forward = positional_forward,
    .backward = positional_backward,
};
