/* The fused node's layer types: a producer and its one reader as one node (core/fused.h).
 * The parts run their own forwards and backwards, in the order and with the bf16-mixed
 * rounding the unfused pass (core/exec/pass.c) gives them, so a fused model computes the
 * unfused one's bits wherever no fused backend op is taken. */
#include "core/fused.h"

#include <stdlib.h>
#include <string.h>

typedef struct fused_conf {
  gp_fuse_kind kind;
  gp_activation act; /* GP_FUSE_LINEAR_ACT's */
  int a_trains;      /* the producer's output takes a gradient (and bf16-mixed rounds it) */
  /* the reader writes its output over the producer's (ReLU after linear: the unfused pass
   * runs it in place too, gp_node_in_place), so nothing more is kept */
  int in_place;
  gp_layer part[2];
} fused_conf;

/* What forward keeps: the producer's output (the reader's input) and the parts' saved
 * states; B of a split backward adds the gradient of mid, which the producer's W reads. */
typedef struct fused_saved {
  gp_tensor mid, dmid;
  void *saved[2];
} fused_saved;

static const fused_conf *conf_of(const gp_layer *l) {
  return l->conf;
}

/* bf16-mixed rounds the producer's output and its gradient, as the unfused pass rounds every
 * activation between layers that depends on a trained parameter. */
static gp_status round_mid(const fused_conf *f, gp_exec *e, gp_tensor *t) {
  if (e->be->precision != GP_PREC_BF16_MIXED || !f->a_trains || !t->data) return GP_OK;
  int64_t n = gp_shape_numel(&t->shape);
  return n > 0 ? e->be->round_bf16(e->be, n, GP_F32P(t)) : GP_OK;
}

/* The output's shape is the input's but for its last dimension (kvdec infers it again for
 * one position); the parameters stay the producer's or the reader's. */
static gp_status fused_shape(gp_layer *l) {
  int64_t last = l->out_shape.d[l->out_shape.ndim - 1];
  l->out_shape = l->in_shape[0];
  l->out_shape.d[l->out_shape.ndim - 1] = last;
  return GP_OK;
}

/* The parts' costs added up: the producer's output is no longer a node's output but what the
 * node keeps for its backward (unless the reader overwrites it), and its gradient is the
 * node's own. */
static void fused_cost(const gp_layer *l, gp_cost *c) {
  const fused_conf *f = conf_of(l);
  const gp_layer *a = &f->part[0], *b = &f->part[1];
  gp_cost ca, cb;
  memset(&ca, 0, sizeof ca);
  memset(&cb, 0, sizeof cb);
  a->type->cost(a, &ca);
  b->type->cost(b, &cb);
  int64_t mid = f->in_place ? 0 : ca.out_bytes;
  c->fwd_flops = ca.fwd_flops + cb.fwd_flops;
  c->bwd_flops = ca.bwd_flops + cb.bwd_flops;
  /* without input gradients: the producer's data part goes (all of it without parameters),
   * and then the reader's data part too unless the producer's parameters need it */
  c->bwd_data_flops = (a->n_params ? ca.bwd_data_flops : ca.bwd_flops + cb.bwd_data_flops);
  c->params = ca.params + cb.params;
  c->saved_bytes = ca.saved_bytes + cb.saved_bytes + mid;
  if (ca.saved_bytes_fused || cb.saved_bytes_fused)
    c->saved_bytes_fused = (ca.saved_bytes_fused ? ca.saved_bytes_fused : ca.saved_bytes) +
                           (cb.saved_bytes_fused ? cb.saved_bytes_fused : cb.saved_bytes) + mid;
  c->out_bytes = cb.out_bytes;
  /* (B keeps the producer's output gradient for its W, as the unfused pass keeps the
   * producer's dout: the planner counts the node's dout, the same size) */
  c->w_bytes = ca.w_bytes + cb.w_bytes;
  /* (add + norm: the norm writes the sum's gradient into the first input's) */
  c->inner_grad_bytes = ca.inner_grad_bytes + cb.inner_grad_bytes +
                        (f->a_trains && f->kind != GP_FUSE_ADD_NORM ? ca.out_bytes : 0);
}

static gp_status fused_forward(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                               void **saved) {
  const fused_conf *f = conf_of(l);
  const gp_layer *a = &f->part[0], *b = &f->part[1];
  fused_saved *s;
  GP_TRY(gp_arena_alloc(e->arena, sizeof *s, (void **)&s));
  memset(s, 0, sizeof *s);
  if (f->in_place)
    s->mid = *out;
  else /* (both kinds keep the shape: an activation, a norm) */
    GP_TRY(gp_arena_tensor(e->arena, a->out_dtype, &out->shape, &s->mid));
  int taken = 0;
  if (f->kind == GP_FUSE_LINEAR_ACT && a->type->forward_act) {
    GP_TRY(a->type->forward_act(a, e, f->act, in, &s->mid, out, &taken));
    /* (in place, the op wrote ReLU's output alone, and relu commutes with rounding) */
    if (taken && !f->in_place) GP_TRY(round_mid(f, e, &s->mid));
  } else if (f->kind == GP_FUSE_ADD_NORM && b->type->forward_sum) {
    int round = e->be->precision == GP_PREC_BF16_MIXED && f->a_trains;
    GP_TRY(b->type->forward_sum(b, e, round, in, &s->mid, out, &s->saved[1], &taken));
  }
  if (!taken) {
    GP_TRY(a->type->forward(a, e, in, &s->mid, &s->saved[0]));
    GP_TRY(round_mid(f, e, &s->mid));
    GP_TRY(b->type->forward(b, e, &s->mid, out, &s->saved[1]));
  }
  *saved = s;
  return GP_OK;
}

/* The unfused pass's backward of the two nodes: the reader's (its input gradient rounded in
 * bf16-mixed), then the producer's from it, each skipped where the pass would skip it. W: the
 * reader's W, then the producer's from the gradient B kept. */
static gp_status fused_backward(const gp_layer *l, gp_exec *e, const gp_tensor *in,
                                const gp_tensor *out, const gp_tensor *dout, gp_tensor *din,
                                void *saved) {
  const fused_conf *f = conf_of(l);
  const gp_layer *a = &f->part[0], *b = &f->part[1];
  fused_saved *s = saved;
  if (!s) return GP_ERR(GP_ERR_RUNTIME, "fused layer %s: backward without its forward", l->path);
  gp_grad_part part = e->grad_part;
  if (part == GP_GRAD_WEIGHT) {
    GP_TRY(gp_layer_backward_part(b, e, GP_GRAD_WEIGHT, &s->mid, out, dout, NULL, s->saved[1]));
    if (s->dmid.data)
      GP_TRY(
          gp_layer_backward_part(a, e, GP_GRAD_WEIGHT, in, &s->mid, &s->dmid, NULL, s->saved[0]));
    return GP_OK;
  }
  gp_tensor dm, adin[GP_MAX_INPUTS];
  memset(&dm, 0, sizeof dm);
  memcpy(adin, din, sizeof(gp_tensor) * (size_t)a->n_in);
  if (f->a_trains && f->kind == GP_FUSE_ADD_NORM && din[0].data) {
    /* the add hands its dout to its inputs: the norm writes it into the first input's
     * gradient, and the add copies it to the others (no buffer of its own, as unfused) */
    dm = din[0];
    adin[0].data = NULL;
  } else if (f->a_trains) {
    /* kept for the producer's W unless it has none (then B's temporaries, as the pass's) */
    gp_arena *ar = e->temp && a->n_params == 0 ? e->temp : e->arena;
    GP_TRY(gp_arena_tensor(ar, GP_F32, &s->mid.shape, &dm));
  }
  if (dm.data || (b->n_params && part == GP_GRAD_BOTH))
    GP_TRY(gp_layer_backward_part(b, e, part, &s->mid, out, dout, &dm, s->saved[1]));
  if (!dm.data) return GP_OK;
  GP_TRY(round_mid(f, e, &dm));
  s->dmid = dm;
  int any = 0;
  for (int j = 0; j < a->n_in; j++)
    any |= adin[j].data != NULL;
  if (!any && (a->n_params == 0 || part == GP_GRAD_INPUT)) return GP_OK;
  return gp_layer_backward_part(a, e, part, in, &s->mid, &dm, adin, s->saved[0]);
}

#define FUSED_TYPE(var, nm, what, ignores_out)                                                     \
  static const gp_layer_type var = {                                                               \
      .name = (nm),                                                                                \
      .doc = (what),                                                                               \
      .min_inputs = 1,                                                                             \
      .max_inputs = GP_MAX_INPUTS,                                                                 \
      .conf_size = 0, /* its conf holds pointers: nothing to hash or copy by value */              \
      .shape = fused_shape,                                                                        \
      .cost = fused_cost,                                                                          \
      .forward = fused_forward,                                                                    \
      .backward = fused_backward,                                                                  \
      .backward_ignores_out = (ignores_out),                                                       \
  }

/* One type per pattern and activation: the name is what tables show, and what the measured
 * costs' cache (core/plan/cost.c) keys a unit by. */
FUSED_TYPE(fused_linear_relu, "linear+relu", "linear, then relu (fused)", 0);
FUSED_TYPE(fused_linear_gelu, "linear+gelu", "linear, then gelu (fused)", 0);
FUSED_TYPE(fused_linear_gelu_tanh, "linear+gelu_tanh", "linear, then gelu tanh (fused)", 0);
FUSED_TYPE(fused_add_layernorm, "add+layernorm", "add, then layernorm (fused)", 0);
FUSED_TYPE(fused_add_rmsnorm, "add+rmsnorm", "add, then rmsnorm (fused)", 1);

static const gp_layer_type *type_of(gp_fuse_kind kind, const gp_layer *b, gp_activation act) {
  if (kind == GP_FUSE_ADD_NORM)
    return !strcmp(b->type->name, "rmsnorm") ? &fused_add_rmsnorm : &fused_add_layernorm;
  return act == GP_ACTIVATION_RELU   ? &fused_linear_relu
         : act == GP_ACTIVATION_GELU ? &fused_linear_gelu
                                     : &fused_linear_gelu_tanh;
}

static int is_fused(const gp_layer *l) {
  static const gp_layer_type *const all[] = {&fused_linear_relu, &fused_linear_gelu,
                                             &fused_linear_gelu_tanh, &fused_add_layernorm,
                                             &fused_add_rmsnorm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (l->type == all[i]) return 1;
  return 0;
}

const gp_layer *gp_fused_part(const gp_layer *l, int i) {
  return is_fused(l) && (i == 0 || i == 1) ? &conf_of(l)->part[i] : NULL;
}

/* Bytes of s with its terminator, 8-aligned. */
static size_t str_room(const char *s) {
  return (strlen(s) + 1 + 7) & ~(size_t)7;
}

static size_t conf_room(const gp_layer *l) {
  return ((l->conf ? l->type->conf_size : 0) + 7) & ~(size_t)7;
}

gp_status gp_fused_make(gp_fuse_kind kind, gp_layer *a, gp_layer *b, int a_trains, gp_layer *out) {
  if (a->n_params && b->n_params)
    return GP_ERR(GP_ERR_RUNTIME, "fusing %s and %s: both have parameters", a->path, b->path);
  const gp_layer *owner = b->n_params ? b : a;
  gp_activation act = kind == GP_FUSE_LINEAR_ACT ? b->type->activation(b) : GP_ACTIVATION_RELU;
  /* one block: the conf, then each part's conf and path, so the layer's free frees it all */
  size_t head = (sizeof(fused_conf) + 7) & ~(size_t)7;
  size_t bytes = head + conf_room(a) + conf_room(b) + str_room(a->path) + str_room(b->path);
  char *blk = calloc(1, bytes), *path = malloc(strlen(owner->path) + 1);
  if (!blk || !path) {
    free(blk);
    free(path);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory fusing %s and %s", a->path, b->path);
  }
  strcpy(path, owner->path);
  fused_conf *f = (fused_conf *)blk;
  f->kind = kind;
  f->act = act;
  f->a_trains = a_trains;
  f->in_place =
      b->type->forward_in_place && a->type->backward_ignores_out && a->out_dtype == b->out_dtype;
  char *p = blk + head;
  gp_layer *parts[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    gp_layer *src = parts[i];
    f->part[i] = *src;
    size_t cs = conf_room(src);
    if (cs) {
      memcpy(p, src->conf, src->type->conf_size);
      f->part[i].conf = p;
      p += cs;
    } else {
      f->part[i].conf = NULL;
    }
  }
  for (int i = 0; i < 2; i++) {
    strcpy(p, parts[i]->path);
    f->part[i].path = p;
    p += str_room(parts[i]->path);
  }
  memset(out, 0, sizeof *out);
  out->type = type_of(kind, b, act);
  out->path = path;
  out->conf = f;
  out->n_in = a->n_in;
  memcpy(out->in_shape, a->in_shape, sizeof out->in_shape);
  memcpy(out->in_dtype, a->in_dtype, sizeof out->in_dtype);
  out->out_shape = b->out_shape;
  out->out_dtype = b->out_dtype;
  out->n_params = owner->n_params;
  memcpy(out->pdesc, owner->pdesc, sizeof out->pdesc);
  for (int i = 0; i < 2; i++) {
    free(parts[i]->conf);
    free(parts[i]->path);
    parts[i]->conf = NULL;
    parts[i]->path = NULL;
  }
  return GP_OK;
}
