/* Whole-model gradients through the executor: a small model whose tensors are read by
 * several layers (a residual add, a tensor used three times, add(x, x)) is checked against
 * central finite differences of the loss for every parameter element, so gradient
 * summation over consumers and the += / = conventions are tested end to end. Its first layer
 * is parameter-free on the input: no gradient may be computed for its output (nothing before
 * it trains), and the next layer's weight gradient must still be right. The buffers the
 * executor shares are checked too: tanh and sigmoid write over an input read by them alone
 * (not over the model's input), and add hands dout's memory to its first input's gradient,
 * and to its second's too where nothing adds into one of the two before the other's producer
 * has read it (a ResNet skip: 'res'), not where something would ('res2': tanh 'u'); the loss
 * keeps its probabilities over the logits and writes their gradient there.
 * The backward in halves (gp_pass_backward_input, then _weight) must give the combined
 * backward's parameter gradients byte for byte, onto zeroed and onto non-zero gradients, B
 * alone must leave them, and B must not share res's gradient (W reads c's dout later). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/exec/pass.h"
#include "core/train/params.h"

static const char *model_text =
    "name: grad-check\n"
    "inputs: {image: [2, 5, 5], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: tanh, name: pre}\n"
    "  - {type: conv2d, out_channels: 3, kernel: 3, padding: 1, name: a}\n"
    "  - {type: tanh, name: t}\n"
    "  - {type: conv2d, out_channels: 3, kernel: [1, 3], padding: [0, 1], name: b}\n"
    "  - {type: add, from: [b, t], name: r}\n"
    "  - {type: add, from: [r, r, t], name: twice}\n"
    "  - {type: sigmoid, name: s}\n"
    "  - {type: conv2d, out_channels: 3, kernel: 3, padding: 1, name: c}\n"
    "  - {type: add, from: [c, s], name: res}\n"
    "  - {type: conv2d, out_channels: 3, kernel: 1, name: e}\n"
    "  - {type: tanh, from: res, name: u}\n"
    "  - {type: add, from: [e, res], name: res2}\n"
    "  - {type: concat, from: [res2, u, t], name: cat}\n"
    "  - {type: global_avgpool}\n"
    "  - {type: linear, out_features: 4, name: fc}\n"
    "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n";

/* f32 forward, central differences with step H on an O(1) loss: about 1e-4 of noise. */
#define H 1e-2
#define TOL 2e-3

typedef struct rig {
  gp_model *m;
  gp_backend *be;
  gp_arena arena;
  gp_params params;
} rig;

/* The tensor id of the node named `name`. */
static int tensor_of(const gp_model *m, const char *name) {
  for (int i = 0; i < m->n_nodes; i++)
    if (!strcmp(m->nodes[i].layer.path, name)) return m->n_inputs + i;
  printf("FAIL: no layer %s\n", name);
  exit(1);
}

static int shared_checks;

/* What shares memory after the first forward and backward (see the header). */
static void check_sharing(const gp_model *m, const gp_pass *p) {
  const gp_tensor *v = p->val, *g = p->grad;
  int a = tensor_of(m, "a"), t = tensor_of(m, "t"), twice = tensor_of(m, "twice");
  int s = tensor_of(m, "s"), pre = tensor_of(m, "pre"), b = tensor_of(m, "b");
  int r = tensor_of(m, "r"), cv = tensor_of(m, "c"), res = tensor_of(m, "res");
  int ev = tensor_of(m, "e"), res2 = tensor_of(m, "res2"), fc = tensor_of(m, "fc");
  struct {
    int ok;
    const char *what;
  } c[] = {
      {v[t].data == v[a].data, "tanh 't' writes over conv 'a''s output, read by it alone"},
      {v[s].data == v[twice].data, "sigmoid 's' writes over add 'twice''s output"},
      {v[pre].data != v[0].data, "tanh 'pre' does not write over the model's input"},
      {g[r].data == g[twice].data, "add 'twice' hands its dout to r's gradient"},
      {g[b].data == g[r].data, "add 'r' hands its dout to b's gradient"},
      {g[t].data != g[r].data, "t's gradient (several readers) is its own"},
      {g[cv].data == g[res].data, "add 'res' hands its dout to c's gradient"},
      {g[s].data == g[res].data, "add 'res' hands its dout to s's gradient too (a skip)"},
      {g[ev].data == g[res2].data, "add 'res2' hands its dout to e's gradient"},
      {g[res].data != g[res2].data,
       "add 'res2' keeps res's gradient apart (tanh 'u' adds to it before conv 'e' reads its)"},
      {p->saved[m->n_nodes - 1] == v[fc].data && g[fc].data == v[fc].data,
       "the loss keeps its probabilities over linear 'fc''s logits and writes their gradient "
       "there"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    if (!c[i].ok) printf("FAIL: %s\n", c[i].what), shared_checks++;
}

static int split_fails;

/* backward: 0 none, 1 gp_pass_backward, 2 its halves (B, then W). */
static double loss_of(rig *t, const float *x, const int32_t *y, int64_t batch, int backward) {
  gp_pass p;
  gp_model *m = t->m;
  gp_exec e = {.be = t->be,
               .arena = &t->arena,
               .training = 1,
               .seed = 1,
               .loss_count = batch,
               .binds = t->params.bind};
  gp_pass_init(&p, m, 0, m->n_nodes, batch);
  p.val[0] = (gp_tensor){(void *)x, gp_shape_batch(batch, &m->inputs[0].shape), GP_F32, -1};
  p.val[1] = (gp_tensor){(void *)y, gp_shape_batch(batch, &m->inputs[1].shape), GP_I32, -1};
  gp_status st = gp_pass_forward(&p, &e);
  if (st == GP_OK && backward == 1) st = gp_pass_backward(&p, &e);
  if (st == GP_OK && backward == 2) {
    size_t bytes = (size_t)t->params.n_train * sizeof(float);
    float *before = malloc(bytes);
    memcpy(before, t->params.grad, bytes);
    st = gp_pass_backward_input(&p, &e);
    if (st == GP_OK && memcmp(before, t->params.grad, bytes))
      printf("FAIL: gp_pass_backward_input changed parameter gradients\n"), split_fails++;
    int s = tensor_of(m, "s"), res = tensor_of(m, "res");
    if (p.grad[s].data == p.grad[res].data)
      printf("FAIL: B handed add 'res''s dout to s's gradient too\n"), split_fails++;
    if (st == GP_OK) st = gp_pass_backward_weight(&p, &e);
    free(before);
  }
  if (st != GP_OK) {
    printf("FAIL: pass: %s\n", gp_error_message());
    exit(1);
  }
  if (backward && p.grad[m->n_inputs].data) { /* node 0, 'pre' */
    printf("FAIL: a gradient was computed for 'pre', which depends on no parameter\n");
    exit(1);
  }
  if (backward == 1) check_sharing(m, &p);
  gp_pass_free(&p);
  gp_arena_reset(&t->arena);
  return e.loss_sum;
}

int main(void) {
  gp_model *m;
  gp_backend *be;
  rig t;
  if (gp_model_load_string(model_text, "grad-check.yaml", NULL, 0, &m) != GP_OK ||
      gp_cpu_backend_create(1, &be) != GP_OK ||
      gp_params_init(&t.params, m, 0, m->n_nodes, be, 3) != GP_OK) {
    printf("FAIL: setup: %s\n", gp_error_message());
    return 1;
  }
  t.m = m;
  t.be = be;
  gp_arena_init(&t.arena, be, 0);
  int64_t batch = 3, per = 2 * 5 * 5;
  float *x = malloc(sizeof(float) * (size_t)(batch * per));
  int32_t y[3] = {0, 3, 1};
  gp_rng r;
  gp_rng_seed(&r, 5);
  for (int64_t i = 0; i < batch * per; i++)
    x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;

  gp_params_zero_grad(&t.params);
  loss_of(&t, x, y, batch, 1);
  int64_t n = t.params.n_train, bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    float w = t.params.train[i];
    t.params.train[i] = w + (float)H;
    double lp = loss_of(&t, x, y, batch, 0);
    t.params.train[i] = w - (float)H;
    double lm = loss_of(&t, x, y, batch, 0);
    t.params.train[i] = w;
    double fd = (lp - lm) / (2 * H), g = t.params.grad[i];
    double err = fabs(fd - g) / fmax(1e-2, fabs(fd) + fabs(g));
    if (err > worst) worst = err;
    if (err > TOL) {
      if (bad < 5)
        printf("parameter element %lld: analytic %.6g, numeric %.6g\n", (long long)i, g, fd);
      bad++;
    }
  }
  printf("%lld parameter elements, worst relative error %.3g\n", (long long)n, worst);

  /* The halves: a first micro-batch onto zeroed gradients, a second onto its gradients. */
  size_t bytes = (size_t)n * sizeof(float);
  float *want = malloc(bytes), *first = malloc(bytes);
  for (int mb = 0; mb < 2; mb++) {
    if (mb == 0) gp_params_zero_grad(&t.params);
    memcpy(first, t.params.grad, bytes);
    loss_of(&t, x, y, batch, 1);
    memcpy(want, t.params.grad, bytes);
    memcpy(t.params.grad, first, bytes);
    loss_of(&t, x, y, batch, 2);
    int64_t diff = 0, at = -1;
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&want[i], &t.params.grad[i], sizeof *want)) at = at < 0 ? i : at, diff++;
    if (diff) {
      printf("FAIL: B then W, micro-batch %d: %lld of %lld gradients differ from the combined "
             "backward's, first %lld (%.9g, want %.9g)\n",
             mb, (long long)diff, (long long)n, (long long)at, t.params.grad[at], want[at]);
      split_fails++;
    } else {
      printf("ok   B then W, micro-batch %d: the combined backward's %lld gradients, bit for "
             "bit\n",
             mb, (long long)n);
    }
  }
  free(want);
  free(first);
  gp_params_free(&t.params);
  gp_arena_free(&t.arena);
  gp_backend_destroy(be);
  gp_model_free(m);
  free(x);
  printf("%d passed, %d failed\n", (bad == 0) + (shared_checks == 0) + (split_fails == 0),
         (bad != 0) + (shared_checks != 0) + (split_fails != 0));
  return bad != 0 || shared_checks != 0 || split_fails != 0;
}
