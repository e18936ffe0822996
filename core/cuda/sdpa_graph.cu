// Fused attention's cuDNN operation graphs and plans (sdpa.h). cuDNN 9 has no single
// "attention" operation for training graphs with masks in the backend API of 9.19; its fused
// flash-attention engines instead recognize a pattern of plain operations, the one
// cudnn-frontend's SDPA nodes emit. The graphs below follow that pattern node for node (data
// types, virtual tensors, strides, the order of the masks), since an engine matches only
// the shape it was written for:
//   forward:  S = Q K^T, S *= scale, [padding: S = row < seq_q && col < seq_kv ? S : -inf],
//             [causal: S = row >= col ? S : -inf], M = max S, E = exp(S - M), L = sum E,
//             stats = M + log L, P = E / L (bf16), O = P V
//   backward: sum = rowsum(dO * O), S as above less stats (P = exp), dV = P^T dO,
//             dS = P (dO V^T - sum) scale, dK = dS^T Q, dQ = dS K; with fewer key/value heads,
//             dK and dV are reduced over each group of query heads.
// The backward is the "dP workspace" variant (dQ written by its matmul directly), the one
// cudnn-frontend takes for deterministic results on Hopper; with --nondeterministic, its
// default instead: dQ summed into an f32 buffer across key blocks, then converted.
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/sdpa.h"

#define MAX_DESC 160
#define MAX_OPS 64
#define MAX_CFGS 32

typedef cudnnBackendDescriptor_t D;

// A graph under construction: every descriptor made (freed together), the operations in
// order, and the first failure (later calls do nothing), so the builders read as a list.
struct gp_sdpa_graph {
  D all[MAX_DESC];
  int n;
  D ops[MAX_OPS];
  int nops;
  int64_t next_uid; // virtual tensors' ids, above the bound ones
  cudnnStatus_t st;
  const char *what;
  D graph, plan;
  size_t workspace;
};

namespace {

typedef gp_sdpa_graph bld;

int ok(const bld *b) {
  return b->st == CUDNN_STATUS_SUCCESS;
}

void fail(bld *b, cudnnStatus_t r, const char *what) {
  if (ok(b) && r != CUDNN_STATUS_SUCCESS) {
    b->st = r;
    b->what = what;
  }
}

D make(bld *b, cudnnBackendDescriptorType_t t) {
  if (!ok(b)) return NULL;
  if (b->n == MAX_DESC) {
    fail(b, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors");
    return NULL;
  }
  D d = NULL;
  fail(b, cudnnBackendCreateDescriptor(t, &d), "cudnnBackendCreateDescriptor");
  if (!ok(b)) return NULL;
  b->all[b->n++] = d;
  return d;
}

void set(bld *b, D d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
         const void *v, const char *what) {
  if (ok(b) && d) fail(b, cudnnBackendSetAttribute(d, a, t, n, v), what);
}

void fin(bld *b, D d, const char *what) {
  if (ok(b) && d) fail(b, cudnnBackendFinalize(d), what);
}

D tensor(bld *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4],
         bool virt, bool by_value = false) {
  D d = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (uid == 0) uid = b->next_uid++;
  const int64_t align = 16;
  set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
  set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
  set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
  set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
  set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
  if (by_value)
    set(b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
  fin(b, d, "tensor");
  return d;
}

D virt(bld *b, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4]) {
  return tensor(b, 0, dt, dim, str, true);
}

void add_op(bld *b, D op) {
  if (!ok(b)) return;
  if (b->nops == MAX_OPS) return fail(b, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
  b->ops[b->nops++] = op;
}

// y = mode(x, b2, t) computed in prec; axis for GEN_INDEX (-1: none).
void pw(bld *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, D x, D b2, D t, D y,
        int64_t axis = -1) {
  D p = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  set(b, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  set(b, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
  if (axis >= 0) set(b, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  fin(b, p, "pointwise");
  D op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p,
      "pointwise op");
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
      "pointwise x");
  if (b2)
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b2,
        "pointwise b");
  if (t)
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
        "pointwise t");
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
      "pointwise y");
  fin(b, op, "pointwise operation");
  add_op(b, op);
}

// c = a b over the last two dims (batched over the first two, broadcast where they are 1 or
// divide, as cuDNN's attention patterns use); the overrides bound m, n, k per sample.
void mm(bld *b, D a, D bm, D c, D m_ov, D n_ov, D k_ov, bool padded) {
  D m = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const double zero = 0.0;
  set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul precision");
  if (padded) set(b, m, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &zero, "padding");
  fin(b, m, "matmul");
  D op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm, "matmul b");
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul op");
  if (m_ov)
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &m_ov, "matmul m override");
  if (n_ov)
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &n_ov, "matmul n override");
  if (k_ov)
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &k_ov, "matmul k override");
  fin(b, op, "matmul operation");
  add_op(b, op);
}

// y = reduction of x over the dims where y is 1 (or by the factor where y's dim divides x's).
void red(bld *b, cudnnReduceTensorOp_t how, D x, D y) {
  D r = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how,
      "reduction operator");
  set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction precision");
  fin(b, r, "reduction");
  D op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
      "reduction x");
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
      "reduction y");
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
      "reduction op");
  fin(b, op, "reduction operation");
  add_op(b, op);
}

void reshape(bld *b, D x, D y) {
  D op = make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
  set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
  fin(b, op, "reshape operation");
  add_op(b, op);
}

// The tensors both directions share.
struct common {
  int64_t sdim[4], sstr[4]; // scores [b, h, tq, tk]
  int64_t rdim[4], rstr[4]; // per row [b, h, tq, 1]
  D scale, neg_inf, seq_q, seq_kv, stats;
};

void common_tensors(bld *b, const gp_sdpa_shape *s, common *c) {
  const int64_t one[4] = {1, 1, 1, 1}, sd[4] = {s->b, s->h, s->tq, s->tk},
                ss[4] = {s->h * s->tq * s->tk, s->tq * s->tk, s->tk, 1},
                rd[4] = {s->b, s->h, s->tq, 1}, rs[4] = {s->h * s->tq, s->tq, 1, 1},
                qd[4] = {s->b, 1, 1, 1};
  memcpy(c->sdim, sd, sizeof sd);
  memcpy(c->sstr, ss, sizeof ss);
  memcpy(c->rdim, rd, sizeof rd);
  memcpy(c->rstr, rs, sizeof rs);
  c->scale = tensor(b, GP_SDPA_SCALE, CUDNN_DATA_FLOAT, one, one, false, true);
  c->neg_inf = tensor(b, GP_SDPA_NEG_INF, CUDNN_DATA_FLOAT, one, one, false, true);
  c->seq_q = s->padding ? tensor(b, GP_SDPA_SEQ_Q, CUDNN_DATA_INT32, qd, one, false) : NULL;
  c->seq_kv = s->padding ? tensor(b, GP_SDPA_SEQ_KV, CUDNN_DATA_INT32, qd, one, false) : NULL;
  c->stats = tensor(b, GP_SDPA_STATS, CUDNN_DATA_FLOAT, rd, rs, false);
}

// x with the positions outside (seq_q, seq_kv) set to -inf.
D padding_mask(bld *b, const common *c, D x) {
  D row = virt(b, CUDNN_DATA_INT32, c->sdim, c->sstr),
    col = virt(b, CUDNN_DATA_INT32, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, row, 2);
  pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, col, 3);
  D rin = virt(b, CUDNN_DATA_BOOLEAN, c->sdim, c->sstr),
    cin = virt(b, CUDNN_DATA_BOOLEAN, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, c->seq_q, NULL, rin);
  pw(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, c->seq_kv, NULL, cin);
  D keep = virt(b, CUDNN_DATA_BOOLEAN, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, rin, cin, NULL, keep);
  D y = virt(b, CUDNN_DATA_FLOAT, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, c->neg_inf, keep, y);
  return y;
}

// x with key col > query row set to -inf (the diagonal band's right bound 0, top-left).
D causal_mask(bld *b, const common *c, D x) {
  D row = virt(b, CUDNN_DATA_INT32, c->sdim, c->sstr),
    col = virt(b, CUDNN_DATA_INT32, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
  pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
  D keep = virt(b, CUDNN_DATA_BOOLEAN, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep);
  D y = virt(b, CUDNN_DATA_FLOAT, c->sdim, c->sstr);
  pw(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, c->neg_inf, keep, y);
  return y;
}

// Packed BSHD tensors of n positions and heads hh: dims [b, hh, n, d]; transposed: [b, hh, d, n].
void bshd(const gp_sdpa_shape *s, int64_t hh, int64_t n, int transposed, int64_t dim[4],
          int64_t str[4]) {
  dim[0] = s->b;
  dim[1] = hh;
  str[0] = n * hh * s->d;
  str[1] = s->d;
  dim[2] = transposed ? s->d : n;
  dim[3] = transposed ? n : s->d;
  str[2] = transposed ? 1 : hh * s->d;
  str[3] = transposed ? hh * s->d : 1;
}

// Q K^T, scaled and masked: the scores as the softmax sees them (the forward's matmul gives
// padded positions 0, as cudnn-frontend's does; its backward's does not say).
D scores(bld *b, const gp_sdpa_shape *s, const common *c, D q, D kt, bool fwd) {
  D raw = virt(b, CUDNN_DATA_FLOAT, c->sdim, c->sstr),
    x = virt(b, CUDNN_DATA_FLOAT, c->sdim, c->sstr);
  mm(b, q, kt, raw, c->seq_q, c->seq_kv, NULL, fwd && s->padding);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, raw, c->scale, NULL, x);
  if (s->padding) x = padding_mask(b, c, x);
  return x;
}

void forward(bld *b, const gp_sdpa_shape *s) {
  common c;
  common_tensors(b, s, &c);
  int64_t dim[4], str[4];
  bshd(s, s->h, s->tq, 0, dim, str);
  D q = tensor(b, GP_SDPA_Q, CUDNN_DATA_BFLOAT16, dim, str, false);
  D o = tensor(b, GP_SDPA_O, CUDNN_DATA_BFLOAT16, dim, str, false);
  bshd(s, s->hk, s->tk, 1, dim, str);
  D kt = tensor(b, GP_SDPA_K, CUDNN_DATA_BFLOAT16, dim, str, false);
  bshd(s, s->hk, s->tk, 0, dim, str);
  D v = tensor(b, GP_SDPA_V, CUDNN_DATA_BFLOAT16, dim, str, false);
  D x = scores(b, s, &c, q, kt, true);
  if (s->causal) x = causal_mask(b, &c, x);
  // softmax, keeping log-sum-exp per row for the backward
  D mx = virt(b, CUDNN_DATA_FLOAT, c.rdim, c.rstr), z = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr),
    e = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr), sum = virt(b, CUDNN_DATA_FLOAT, c.rdim, c.rstr),
    lg = virt(b, CUDNN_DATA_FLOAT, c.rdim, c.rstr),
    p = virt(b, CUDNN_DATA_BFLOAT16, c.sdim, c.sstr);
  red(b, CUDNN_REDUCE_TENSOR_MAX, x, mx);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, x, mx, NULL, z);
  pw(b, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, z, NULL, NULL, e);
  red(b, CUDNN_REDUCE_TENSOR_ADD, e, sum);
  pw(b, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg);
  pw(b, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, c.stats);
  pw(b, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, NULL, p);
  mm(b, p, v, o, c.seq_q, NULL, c.seq_kv, false);
}

// dK or dV of [b, hk, tk, d] from a [b, h, tk, tq] left operand and a [b, h, tq, d] right
// one: directly with as many heads, else through all h heads and a sum over each group.
void head_grad(bld *b, const gp_sdpa_shape *s, const common *c, D lhs, D rhs, D out) {
  if (s->h == s->hk) return mm(b, lhs, rhs, out, c->seq_kv, NULL, c->seq_q, false);
  const int64_t fd[4] = {s->b, s->h, s->tk, s->d},
                fs[4] = {s->h * s->tk * s->d, s->tk * s->d, s->d, 1};
  D full = virt(b, CUDNN_DATA_BFLOAT16, fd, fs);
  mm(b, lhs, rhs, full, c->seq_kv, NULL, c->seq_q, false);
  red(b, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void backward(bld *b, const gp_sdpa_shape *s, int version, int nondeterministic) {
  common c;
  common_tensors(b, s, &c);
  const int64_t one[4] = {1, 1, 1, 1};
  D unit = tensor(b, GP_SDPA_ONE, CUDNN_DATA_FLOAT, one, one, false, true);
  int64_t dim[4], str[4];
  bshd(s, s->h, s->tq, 0, dim, str);
  D q = tensor(b, GP_SDPA_Q, CUDNN_DATA_BFLOAT16, dim, str, false);
  D o = tensor(b, GP_SDPA_O, CUDNN_DATA_BFLOAT16, dim, str, false);
  D dout = tensor(b, GP_SDPA_DO, CUDNN_DATA_BFLOAT16, dim, str, false);
  D dq = tensor(b, GP_SDPA_DQ, CUDNN_DATA_BFLOAT16, dim, str, false);
  bshd(s, s->hk, s->tk, 1, dim, str);
  D kt = tensor(b, GP_SDPA_K, CUDNN_DATA_BFLOAT16, dim, str, false);
  D vt = tensor(b, GP_SDPA_V, CUDNN_DATA_BFLOAT16, dim, str, false);
  bshd(s, s->hk, s->tk, 0, dim, str);
  D dk = tensor(b, GP_SDPA_DK, CUDNN_DATA_BFLOAT16, dim, str, false);
  D dv = tensor(b, GP_SDPA_DV, CUDNN_DATA_BFLOAT16, dim, str, false);
  D kr = virt(b, CUDNN_DATA_BFLOAT16, dim, str); // K again, for dS K

  // sum = rowsum(dO * O), the softmax backward's per-row term, in memory the caller gives
  const int64_t pd[4] = {s->b, s->h, s->tq, s->d},
                ps[4] = {s->h * s->tq * s->d, s->tq * s->d, s->h * s->d, 1};
  D prod = virt(b, CUDNN_DATA_FLOAT, pd, ps), rsum = virt(b, CUDNN_DATA_FLOAT, c.rdim, c.rstr);
  D sum = tensor(b, GP_SDPA_SUM, CUDNN_DATA_FLOAT, c.rdim, c.rstr, false);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, prod);
  red(b, CUDNN_REDUCE_TENSOR_ADD, prod, rsum);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rsum, unit, NULL, sum);

  // P again from the scores and the forward's log-sum-exp
  D x = scores(b, s, &c, q, kt, false);
  D z = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, x, c.stats, NULL, z);
  // cuDNN 9.0 to 9.9 want the padding applied again after the stats (cudnn-frontend does so)
  if (s->padding && version < 91000) z = padding_mask(b, &c, z);
  if (s->causal) z = causal_mask(b, &c, z);
  D p = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
  pw(b, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, z, NULL, NULL, p);

  // dV = P^T dO
  const int64_t td[4] = {s->b, s->h, s->tk, s->tq},
                ts[4] = {s->h * s->tq * s->tk, s->tq * s->tk, 1, s->tk};
  D pt = virt(b, CUDNN_DATA_BFLOAT16, td, ts);
  reshape(b, p, pt);
  head_grad(b, s, &c, pt, dout, dv);

  // dS = P (dO V^T - sum) scale
  D dp = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr), t1 = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr),
    t2 = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr), ds = virt(b, CUDNN_DATA_FLOAT, c.sdim, c.sstr);
  mm(b, dout, vt, dp, c.seq_q, c.seq_kv, NULL, false);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, sum, NULL, t1);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, t1, p, NULL, t2);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, t2, c.scale, NULL, ds);

  // dK = dS^T Q, dQ = dS K
  D dst = virt(b, CUDNN_DATA_BFLOAT16, td, ts);
  reshape(b, ds, dst);
  head_grad(b, s, &c, dst, q, dk);
  reshape(b, kt, kr);
  if (!nondeterministic) return mm(b, ds, kr, dq, c.seq_q, NULL, c.seq_kv, false);
  const int64_t ad[4] = {s->b, s->h, s->tq, s->d},
                as[4] = {s->h * s->tq * s->d, s->tq * s->d, s->d, 1};
  D acc = tensor(b, GP_SDPA_DQ_ACCUM, CUDNN_DATA_FLOAT, ad, as, false);
  mm(b, ds, kr, acc, c.seq_q, NULL, c.seq_kv, false);
  pw(b, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, dq);
}

// Whether an engine may be used: with nondeterministic 0, none that notes itself so.
int acceptable(D cfg, int nondeterministic) {
  if (nondeterministic) return 1;
  D engine = NULL;
  int64_t n = 0;
  int good =
      cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ==
          CUDNN_STATUS_SUCCESS &&
      cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &n, &engine) == CUDNN_STATUS_SUCCESS;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  good = good && cudnnBackendGetAttribute(
                     engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS;
  for (int64_t i = 0; good && i < n; i++)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) good = 0;
  if (engine) cudnnBackendDestroyDescriptor(engine);
  return good;
}

// The first configuration of the heuristics (mode A, then the fallback list) whose plan
// finalizes; NULL when none does (*skipped: how many were left out as nondeterministic).
D first_plan(cudnnHandle_t h, D graph, int nondeterministic, size_t *workspace, int *skipped) {
  *skipped = 0;
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  D plan = NULL;
  for (int m = 0; m < 2 && !plan; m++) {
    D heur = NULL, cfgs[MAX_CFGS] = {0};
    int64_t count = 0;
    int made = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &graph) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                 &modes[m]) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, NULL) == CUDNN_STATUS_SUCCESS) {
      if (count > MAX_CFGS) count = MAX_CFGS;
      while (made < count && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                          &cfgs[made]) == CUDNN_STATUS_SUCCESS)
        made++;
      int64_t got = 0;
      if (made > 0 && cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got,
                                               cfgs) != CUDNN_STATUS_SUCCESS)
        got = 0;
      for (int64_t i = 0; i < got && !plan; i++) {
        if (!acceptable(cfgs[i], nondeterministic)) {
          (*skipped)++;
          continue;
        }
        D p = NULL;
        int64_t ws = 0, n = 0;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) !=
            CUDNN_STATUS_SUCCESS)
          continue;
        if (cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &h) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                     1, &n, &ws) == CUDNN_STATUS_SUCCESS &&
            ws >= 0) {
          plan = p;
          *workspace = (size_t)ws;
        } else {
          cudnnBackendDestroyDescriptor(p);
        }
      }
    }
    for (int i = 0; i < made; i++)
      cudnnBackendDestroyDescriptor(cfgs[i]);
    if (heur) cudnnBackendDestroyDescriptor(heur);
  }
  return plan;
}

} // namespace

gp_status gp_sdpa_graph_make(cudnnHandle_t h, const gp_sdpa_shape *s, int bwd, gp_sdpa_graph **out,
                             const char **why) {
  const int nondeterministic = s->nondeterministic;
  *out = NULL;
  *why = NULL;
  bld *b = (bld *)calloc(1, sizeof *b);
  if (!b) return GP_ERR(GP_ERR_NOMEM, "attention: out of host memory for a cuDNN graph");
  b->next_uid = 100;
  b->st = CUDNN_STATUS_SUCCESS;
  if (bwd)
    backward(b, s, (int)cudnnGetVersion(), nondeterministic);
  else
    forward(b, s);
  b->graph = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(b, b->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->nops, b->ops,
      "graph operations");
  set(b, b->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  fin(b, b->graph, "the operation graph");
  if (!ok(b)) {
    *why = b->what; // a descriptor cuDNN refused: this cuDNN does not take the pattern
    gp_sdpa_graph_free(b);
    return GP_OK;
  }
  int skipped = 0;
  b->plan = first_plan(h, b->graph, nondeterministic, &b->workspace, &skipped);
  if (!b->plan) {
    *why = skipped ? "cuDNN's engines for this graph note themselves nondeterministic "
                     "(--nondeterministic allows them)"
                   : "no engine of cuDNN's heuristics builds a plan for this graph";
    gp_sdpa_graph_free(b);
    return GP_OK;
  }
  *out = b;
  return GP_OK;
}

size_t gp_sdpa_graph_workspace(const gp_sdpa_graph *g) {
  return g ? g->workspace : 0;
}

gp_status gp_sdpa_graph_run(cudnnHandle_t h, gp_sdpa_graph *g, void *const ptrs[GP_SDPA_UIDS + 1],
                            void *ws) {
  int64_t uids[GP_SDPA_UIDS];
  void *data[GP_SDPA_UIDS];
  int n = 0;
  for (int u = 1; u <= GP_SDPA_UIDS; u++)
    if (ptrs[u]) {
      uids[n] = u;
      data[n++] = ptrs[u];
    }
  D pack = NULL;
  cudnnStatus_t r = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                 n, data);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                 uids);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                 &ws);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnBackendFinalize(pack);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnBackendExecute(h, g->plan, pack);
  if (pack) cudnnBackendDestroyDescriptor(pack);
  GP_TRY(gp_cudnn_check(r, "cudnnBackendExecute (fused attention)", __FILE__, __LINE__));
  return GP_OK;
}

void gp_sdpa_graph_free(gp_sdpa_graph *g) {
  if (!g) return;
  if (g->plan) cudnnBackendDestroyDescriptor(g->plan);
  for (int i = g->n - 1; i >= 0; i--)
    cudnnBackendDestroyDescriptor(g->all[i]);
  free(g);
}
