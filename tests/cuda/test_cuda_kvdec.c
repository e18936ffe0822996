/* Decoding with a cache on a GPU (core/eval/kvdec.c, layers/attention_cached.c): its two ops
 * against the CPU's, then a small translation model (cross-attention, segments) and a small
 * Llama (rotary positions, two query heads a key/value head) on cuda:0, on two stages there,
 * and split between the CPU and the GPU: teacher-forced logits (with a beam reorder between
 * steps) within a tolerance of the CPU's, greedy hypotheses equal to the CPU's and equal to
 * the uncached path's on the same stages. Exits 77 (skipped) without a GPU. Usage:
 * test_cuda_kvdec [MODELS_DIR] (default: models, as scripts/gpu-check.sh runs it).
 * GP_KVDEC_DEVICE=cpu puts cpu where cuda:0 would be and checks the CPU's ops alone: cached
 * against uncached decoding on the CPU (suite eval), and the test's own logic checked on a
 * machine without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/probe.h"
#include "core/eval/kvdec.h"
#include "core/train/trainer.h"
#include "tests/cuda/cuda_check.h"
#include "tests/support/check.h"

static int failures, passes;

/* Tolerances, with why:
 * - TOL_LOGIT: cuBLAS and OpenBLAS sum a product's terms in other orders (fp32 both, TF32
 *   off), through 2 layers of width 32: max |gpu - cpu| over max |cpu| of the logits.
 * - TOL_GEMM: one product of k <= 40 terms in another order (same measure).
 * - MARGIN: a greedy choice compared across backends must lead its runner-up by more than
 *   twice the logits' tolerance, or equal hypotheses would be luck; the test says so. */
#define TOL_LOGIT 1e-4
#define TOL_GEMM 1e-5
#define NB 3     /* rows */
#define STEPS 10 /* teacher-forced positions */
#define GREEDY 8 /* greedy positions */
#define T 16     /* row length */

static double rel_diff(const float *a, const float *b, int64_t n) {
  double mx = 0, ref = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > mx || d != d) mx = d != d ? INFINITY : d;
    if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
  }
  return mx / (ref > 0 ? ref : 1);
}

/* ---- the ops ---- */

static void test_ops(cc_ctx *c) {
  /* gather_rows: an f32 block into strided rows, then rows picked by a device index */
  enum { R = 5, C = 7, LD = 9 };
  float src[R * LD], got[R * LD], want[R * LD];
  cc_fill_uniform(src, R * LD, 1, -1, 1);
  int32_t idx[R] = {4, 0, 0, 2, 3};
  cc_pair s, d, ix;
  gp_status st = cc_pair_alloc(c, sizeof src, src, &s);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof src, src, &d);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof idx, idx, &ix);
  CHECK(st == GP_OK, "allocating");
  if (st != GP_OK) return;
  for (int with_idx = 0; with_idx < 2; with_idx++) {
    gp_status a =
        c->cpu->gather_rows(c->cpu, R, C, with_idx ? ix.cpu.p : NULL, s.cpu.p, LD, d.cpu.p, LD);
    gp_status b =
        c->gpu->gather_rows(c->gpu, R, C, with_idx ? ix.gpu.p : NULL, s.gpu.p, LD, d.gpu.p, LD);
    CHECK(a == GP_OK && b == GP_OK, "gather_rows (idx %d)", with_idx);
    CHECK(cc_buf_download(&d.cpu, want, sizeof want) == GP_OK &&
              cc_buf_download(&d.gpu, got, sizeof got) == GP_OK && !memcmp(got, want, sizeof got),
          "gather_rows (idx %d): the GPU's rows differ from the CPU's", with_idx);
    CHECK(!memcmp(want + LD, src + (with_idx ? 0 : 1) * LD, C * sizeof *src),
          "gather_rows (idx %d): row 1 is not the source row it names", with_idx);
    CHECK(cc_buf_guards_ok(&d.gpu, "gather_rows"), "guards");
  }
  cc_pair_free(&s);
  cc_pair_free(&d);
  cc_pair_free(&ix);

  /* gemm_strided_batched: score-like (B^T, shared B: stride 0) and mix-like products */
  enum { BATCH = 4, M = 2, N = 6, K = 40 };
  const int64_t sa = M * K + 3, sc = M * N + 1;
  static float A[BATCH * (M * K + 3)], B[BATCH * N * K], Cg[BATCH * (M * N + 1)],
      Cc[BATCH * (M * N + 1)];
  cc_fill_uniform(A, (int64_t)(sizeof A / sizeof *A), 2, -1, 1);
  cc_fill_uniform(B, (int64_t)(sizeof B / sizeof *B), 3, -1, 1);
  cc_pair pa, pb, pc;
  st = cc_pair_alloc(c, sizeof A, A, &pa);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof B, B, &pb);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof Cg, NULL, &pc);
  CHECK(st == GP_OK, "allocating");
  if (st != GP_OK) return;
  for (int shared = 0; shared < 2; shared++) {
    const int64_t sb = shared ? 0 : N * K;
    gp_status a = c->cpu->gemm_strided_batched(c->cpu, 0, 1, M, N, K, 0.5f, pa.cpu.p, K, sa,
                                               pb.cpu.p, K, sb, 0.0f, pc.cpu.p, N, sc, BATCH);
    gp_status b = c->gpu->gemm_strided_batched(c->gpu, 0, 1, M, N, K, 0.5f, pa.gpu.p, K, sa,
                                               pb.gpu.p, K, sb, 0.0f, pc.gpu.p, N, sc, BATCH);
    CHECK(a == GP_OK && b == GP_OK, "gemm_strided_batched (B stride %lld)", (long long)sb);
    CHECK(cc_buf_download(&pc.cpu, Cc, sizeof Cc) == GP_OK &&
              cc_buf_download(&pc.gpu, Cg, sizeof Cg) == GP_OK,
          "downloading");
    /* the entries only: the gaps between them are not written */
    float ec[BATCH * M * N], eg[BATCH * M * N];
    for (int i = 0; i < BATCH; i++) {
      memcpy(ec + i * M * N, Cc + i * sc, M * N * sizeof *ec);
      memcpy(eg + i * M * N, Cg + i * sc, M * N * sizeof *eg);
    }
    double dd = rel_diff(eg, ec, BATCH * M * N);
    CHECK(dd <= TOL_GEMM, "gemm_strided_batched (B stride %lld): %.3g", (long long)sb, dd);
    /* entry 2 is the lone GEMM of its operands, bit for bit on the CPU */
    float one[M * N];
    CHECK(c->cpu->gemm(c->cpu, 0, 1, M, N, K, 0.5f, (float *)pa.cpu.p + 2 * sa, K,
                       (float *)pb.cpu.p + 2 * sb, K, 0.0f, one, N) == GP_OK &&
              !memcmp(one, ec + 2 * M * N, sizeof one),
          "the CPU's batched entry differs from its lone GEMM");
  }
  cc_pair_free(&pa);
  cc_pair_free(&pb);
  cc_pair_free(&pc);
}

/* The CPU's ops against plain loops: gather_rows picks the rows idx names (f32 or i32 bits
 * alike) and leaves the gaps; each batched GEMM entry is the lone call's bits. */
static void test_cpu_ops(gp_backend *be) {
  int32_t src[4 * 3], dst[4 * 5], idx[4] = {3, 3, 0, 1};
  for (int i = 0; i < 12; i++)
    src[i] = 1000 + i;
  for (int i = 0; i < 20; i++)
    dst[i] = -1;
  CHECK(be->gather_rows(be, 4, 2, idx, src, 3, dst, 5) == GP_OK, "gather_rows");
  int ok = 1;
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 5; j++)
      ok &= dst[r * 5 + j] == (j < 2 ? src[idx[r] * 3 + j] : -1);
  CHECK(ok, "gather_rows: the rows are not the ones idx names, or the gaps were written");
  enum { BATCH = 3, N = 5, K = 33 };
  static float a[BATCH * K], b[N * K], c[BATCH * N], one[N];
  cc_fill_uniform(a, BATCH * K, 4, -1, 1);
  cc_fill_uniform(b, N * K, 5, -1, 1);
  CHECK(be->gemm_strided_batched(be, 0, 1, 1, N, K, 0.25f, a, K, K, b, K, 0, 0.0f, c, N, N,
                                 BATCH) == GP_OK,
        "gemm_strided_batched");
  for (int i = 0; i < BATCH; i++)
    CHECK(be->gemm(be, 0, 1, 1, N, K, 0.25f, a + i * K, K, b, K, 0.0f, one, N) == GP_OK &&
              !memcmp(one, c + i * N, sizeof one),
          "batched entry %d: not the lone GEMM's bits", i);
}

/* ---- decoding ---- */

typedef struct model_case {
  const char *file, *name;
  const char *ov[40];
  const char *in_names[7]; /* ids, seg, pos, label (step inputs), then src, src_seg, src_pos */
} model_case;

static const model_case nmt = {
    "transformer-nmt.yaml",
    "translation",
    {"blocks.embed.params.vocab=20",
     "layers.4.out_features=20",
     "blocks.embed.params.d=32",
     "blocks.embed.params.max_len=16",
     "blocks.embed.params.p=0",
     "blocks.enc.params.d=32",
     "blocks.enc.params.heads=2",
     "blocks.enc.params.ff=64",
     "blocks.enc.params.p=0",
     "blocks.dec.params.d=32",
     "blocks.dec.params.heads=2",
     "blocks.dec.params.ff=64",
     "blocks.dec.params.p=0",
     "layers.1.repeat=1",
     "layers.3.repeat=2",
     "inputs.src.shape.0=16",
     "inputs.src_seg.shape.0=16",
     "inputs.src_pos.shape.0=16",
     "inputs.tgt_in.shape.0=16",
     "inputs.tgt_seg.shape.0=16",
     "inputs.tgt_pos.shape.0=16",
     "inputs.label.shape.0=16",
     NULL},
    {"tgt_in", "tgt_seg", "tgt_pos", "label", "src", "src_seg", "src_pos"}};

static const model_case llama = {
    "llama.yaml",
    "llama",
    {"layers.0.num_embeddings=20", "layers.0.dim=32", "blocks.layer.params.d=32",
     "blocks.layer.params.heads=4", "blocks.layer.params.kv_heads=2", "blocks.layer.params.ff=48",
     "blocks.layer.params.theta=500", "layers.1.repeat=2", "layers.3.out_features=20",
     "inputs.tokens.shape.0=16", "inputs.seg.shape.0=16", "inputs.pos.shape.0=16",
     "inputs.label.shape.0=16", NULL},
    {"tokens", "seg", "pos", "label", NULL, NULL, NULL}};

typedef struct placement {
  const char *name;
  int k;
  const char *dev[2];
} placement;

typedef struct result {
  float tf[STEPS * NB * 20];   /* teacher-forced logits */
  float gl[GREEDY * NB * 20];  /* greedy steps' logits */
  int32_t greedy[NB * GREEDY]; /* greedy ids, BOS first fed */
  int32_t uncached[NB * T];    /* the uncached path's argmax over the greedy rows */
  int ok;
} result;

static int32_t argmax_of(const float *z, int64_t k) {
  int64_t best = 0;
  for (int64_t j = 1; j < k; j++)
    if (z[j] > z[best]) best = j;
  return (int32_t)best;
}

static int input_of(const gp_model *m, const char *name) {
  for (int i = 0; name && i < m->n_inputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return i;
  return -1;
}

/* The step's inputs: id a row, segment 1, position p, label ignored. */
static void step_in(const int *ix, const int32_t *ids, int32_t p, int32_t *seg, int32_t *pos,
                    int32_t *lab, const void *in[GP_MAX_MODEL_INPUTS]) {
  for (int r = 0; r < NB; r++) {
    seg[r] = 1;
    pos[r] = p;
    lab[r] = -100;
  }
  in[ix[0]] = ids;
  if (ix[1] >= 0) in[ix[1]] = seg;
  if (ix[2] >= 0) in[ix[2]] = pos;
  if (ix[3] >= 0) in[ix[3]] = lab;
}

static gp_status decode(gp_trainer *t, const int *ix, gp_batch_buffers *buf, result *o) {
  unsigned char sin[GP_MAX_MODEL_INPUTS] = {0};
  for (int k = 0; k < 4; k++)
    if (ix[k] >= 0) sin[ix[k]] = 1;
  gp_kvdec *d;
  GP_TRY(gp_kvdec_create(t, sin, NB, &d));
  gp_batch b = gp_batch_of(buf, NB);
  int32_t ids[NB], seg[NB], pos[NB], lab[NB];
  const void *in[GP_MAX_MODEL_INPUTS] = {0};
  const float *z;
  int64_t V = 0;
  gp_status st = gp_kvdec_begin(d, &b);
  for (int s = 0; st == GP_OK && s < STEPS; s++) { /* teacher-forced, rows reordered at 4 */
    for (int r = 0; r < NB; r++)
      ids[r] = 4 + (7 * s + 5 * r + s * r) % 16;
    step_in(ix, ids, s, seg, pos, lab, in);
    st = gp_kvdec_step(d, in, &z, &V);
    if (st == GP_OK && V != 20) st = GP_ERR(GP_ERR_RUNTIME, "width %lld, want 20", (long long)V);
    if (st == GP_OK) memcpy(o->tf + s * NB * 20, z, NB * 20 * sizeof *z);
    const int64_t from[NB] = {1, 1, 0};
    if (st == GP_OK && s == 3) st = gp_kvdec_reorder(d, from);
  }
  if (st == GP_OK) st = gp_kvdec_begin(d, &b);
  for (int r = 0; r < NB; r++)
    ids[r] = 2; /* BOS */
  for (int s = 0; st == GP_OK && s < GREEDY; s++) {
    step_in(ix, ids, s, seg, pos, lab, in);
    st = gp_kvdec_step(d, in, &z, &V);
    for (int r = 0; st == GP_OK && r < NB; r++) {
      memcpy(o->gl + (s * NB + r) * 20, z + r * V, 20 * sizeof *z);
      ids[r] = o->greedy[r * GREEDY + s] = argmax_of(z + r * V, V);
    }
  }
  gp_kvdec_free(d);
  GP_TRY(st);
  /* the uncached path over the same rows: BOS, the greedy ids, padding */
  for (int r = 0; r < NB; r++)
    for (int j = 0; j < T; j++) {
      ((int32_t *)buf->in[ix[0]])[r * T + j] = j == 0        ? 2
                                               : j <= GREEDY ? o->greedy[r * GREEDY + j - 1]
                                                             : 0;
      if (ix[1] >= 0) ((int32_t *)buf->in[ix[1]])[r * T + j] = 1;
      if (ix[2] >= 0) ((int32_t *)buf->in[ix[2]])[r * T + j] = j;
      if (ix[3] >= 0) ((int32_t *)buf->in[ix[3]])[r * T + j] = -100;
    }
  gp_prediction pr = {.argmax = o->uncached};
  gp_step_result res = {0};
  return gp_pipeline_predict(t->pl, &b, &pr, &res);
}

static void run(const model_case *mc, const char *dir, const placement *pl, result *o) {
  memset(o, 0, sizeof *o);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, mc->file);
  gp_override ov[40];
  char keys[40][128];
  int n_ov = 0;
  for (; mc->ov[n_ov]; n_ov++) {
    const char *eq = strchr(mc->ov[n_ov], '=');
    snprintf(keys[n_ov], sizeof keys[n_ov], "%.*s", (int)(eq - mc->ov[n_ov]), mc->ov[n_ov]);
    ov[n_ov] = (gp_override){keys[n_ov], eq + 1, NULL};
  }
  gp_model *m = NULL;
  gp_plan plan;
  gp_trainer t;
  int have_t = 0;
  gp_batch_buffers buf = {0};
  gp_status st = gp_model_load(path, ov, n_ov, &m);
  if (st == GP_OK) {
    m->pipeline.stages = pl->k;
    m->pipeline.micro_batches = 1;
    m->pipeline.n_balance = 0;
    m->pipeline.n_devices = pl->k;
    for (int s = 0; s < pl->k; s++)
      snprintf(m->pipeline.devices[s], sizeof m->pipeline.devices[s], "%s", pl->dev[s]);
    st = gp_plan_make(m, &m->pipeline, &plan);
  }
  gp_pipeline_opts po = {.cores = 1};
  if (st == GP_OK) st = gp_trainer_init(&t, m, &plan, &po, 7);
  have_t = st == GP_OK;
  if (st == GP_OK) st = gp_batch_buffers_alloc(m, NB, &buf);
  int ix[7];
  for (int k = 0; st == GP_OK && k < 7; k++)
    ix[k] = input_of(m, mc->in_names[k]);
  if (st == GP_OK) { /* the source side, a row each; the step inputs' rows are unread */
    for (int i = 0; i < m->n_inputs; i++)
      memset(buf.in[i], 0, (size_t)(NB * T) * sizeof(int32_t));
    for (int r = 0; r < NB; r++)
      for (int j = 0; j < T; j++) {
        if (ix[4] >= 0) ((int32_t *)buf.in[ix[4]])[r * T + j] = 4 + (3 * j + 11 * r) % 16;
        if (ix[5] >= 0) ((int32_t *)buf.in[ix[5]])[r * T + j] = 1;
        if (ix[6] >= 0) ((int32_t *)buf.in[ix[6]])[r * T + j] = j;
      }
    st = decode(&t, ix, &buf, o);
  }
  o->ok = st == GP_OK;
  CHECK(st == GP_OK, "%s on %s", mc->name, pl->name);
  gp_batch_buffers_free(&buf);
  if (have_t) gp_trainer_free(&t);
  gp_model_free(m);
}

static void test_model(const model_case *mc, const char *dir, const char *g) {
  static const placement cpu = {"cpu", 1, {"cpu"}};
  const placement gpus[] = {{"cuda:0", 1, {g}},
                            {"cuda:0 twice", 2, {g, g}},
                            {"cpu then cuda:0", 2, {"cpu", g}},
                            {"cuda:0 then cpu", 2, {g, "cpu"}}};
  static result ref, got;
  run(mc, dir, &cpu, &ref);
  if (!ref.ok) return;
  /* greedy choices must not be near-ties, or comparing them tells nothing */
  double margin = INFINITY, top = 0;
  for (int i = 0; i < GREEDY * NB; i++) {
    const float *z = ref.gl + i * 20;
    int32_t a = argmax_of(z, 20);
    for (int j = 0; j < 20; j++) {
      if (j != a && z[a] - z[j] < margin) margin = z[a] - z[j];
      if (fabs(z[j]) > top) top = fabs(z[j]);
    }
  }
  printf("%s: greedy choices lead by %.3g or more, logits up to %.3g\n", mc->name, margin, top);
  CHECK(margin > 2 * TOL_LOGIT * top,
        "%s: a greedy choice leads by %.3g of logits up to %.3g: change the seed", mc->name, margin,
        top);
  for (int r = 0; r < NB; r++)
    for (int s = 0; s < GREEDY; s++)
      CHECK(ref.uncached[r * T + s] == ref.greedy[r * GREEDY + s],
            "%s on the CPU: row %d position %d: cached %d, uncached %d", mc->name, r, s,
            ref.greedy[r * GREEDY + s], ref.uncached[r * T + s]);
  for (size_t p = 0; p < sizeof gpus / sizeof gpus[0]; p++) {
    run(mc, dir, &gpus[p], &got);
    if (!got.ok) continue;
    double dd = rel_diff(got.tf, ref.tf, STEPS * NB * 20);
    CHECK(dd <= TOL_LOGIT, "%s on %s: teacher-forced logits %.3g from the CPU's", mc->name,
          gpus[p].name, dd);
    CHECK(!memcmp(got.greedy, ref.greedy, sizeof got.greedy),
          "%s on %s: greedy hypotheses differ from the CPU's", mc->name, gpus[p].name);
    int same = 1;
    for (int r = 0; r < NB; r++)
      for (int s = 0; s < GREEDY; s++)
        same &= got.uncached[r * T + s] == got.greedy[r * GREEDY + s];
    CHECK(same, "%s on %s: the cached hypotheses differ from the uncached path's", mc->name,
          gpus[p].name);
    printf("%s on %s: logits within %.3g of the CPU's, hypotheses equal\n", mc->name, gpus[p].name,
           dd);
  }
}

int main(int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: test_cuda_kvdec [MODELS_DIR (default: models)]\n");
    return 2;
  }
  const char *dir = argc == 2 ? argv[1] : "models";
  const char *g = getenv("GP_KVDEC_DEVICE") ? getenv("GP_KVDEC_DEVICE") : "cuda:0";
  if (!strcmp(g, "cuda:0")) {
    cc_ctx c;
    int rc = cc_open(&c);
    if (rc) return rc;
    test_cpu_ops(c.cpu);
    test_ops(&c);
    cc_close(&c);
  } else {
    gp_backend *cpu;
    if (gp_cpu_backend_create(1, &cpu) != GP_OK) gp_t_die("a CPU backend");
    test_cpu_ops(cpu);
    gp_backend_destroy(cpu);
  }
  test_model(&nmt, dir, g);
  test_model(&llama, dir, g);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
