// One convolution direction through cuDNN's graph (backend) API (conv_graph.h): tensors, the
// convolution and its operation, a one-operation graph, engine configurations from the
// heuristics (mode A, then the fallback list), filtered by their numerical and behaviour
// notes, finalized into execution plans and timed with events.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/conv_graph.h"
#include "core/env.h"
#include "core/cuda/internal.h"

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

struct gp_conv_graph {
  int dir;
  gp_conv_graph_want want;
  cudnnBackendDescriptor_t x, w, y, conv, op, graph;
  cudnnBackendDescriptor_t plan; // NULL until a search or gp_conv_graph_use
  gp_conv_engine engine;
};

#define B_TRY(call) GP_CUDNN_TRY(call)

static gp_status make_desc(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
  *out = NULL;
  B_TRY(cudnnBackendCreateDescriptor(t, out));
  return GP_OK;
}

static void free_desc(cudnnBackendDescriptor_t *d) {
  if (*d) cudnnBackendDestroyDescriptor(*d);
  *d = NULL;
}

// A packed NCHW tensor (or KCRS filter) of dims d.
static gp_status tensor(const int64_t d[4], int64_t uid, cudnnDataType_t dt,
                        cudnnBackendDescriptor_t *out) {
  const int64_t strides[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  const int64_t align = GP_CONV_GRAPH_ALIGN;
  GP_TRY(make_desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
  B_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  B_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d));
  B_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  B_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  B_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
                                 &align));
  B_TRY(cudnnBackendFinalize(*out));
  return GP_OK;
}

static gp_status convolution(const gp_conv2d_desc *d, cudnnBackendDescriptor_t *out) {
  const int64_t dims = 2, pad[2] = {d->ph, d->pw}, stride[2] = {d->sh, d->sw},
                dil[2] = {d->dh, d->dw};
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  GP_TRY(make_desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out));
  cudnnBackendDescriptor_t c = *out;
  B_TRY(
      cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  B_TRY(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                                 &comp));
  B_TRY(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
                                 1, &mode));
  B_TRY(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  B_TRY(
      cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  B_TRY(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
  B_TRY(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2,
                                 stride));
  B_TRY(cudnnBackendFinalize(c));
  return GP_OK;
}

// The direction's operation over the graph's tensors, alpha 1 and the wanted beta.
static gp_status operation(gp_conv_graph *g) {
  static const cudnnBackendDescriptorType_t type[3] = {
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  // attribute names per direction: X, W, Y, conv, alpha, beta
  static const cudnnBackendAttributeName_t attr[3][6] = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  const cudnnBackendAttributeName_t *a = attr[g->dir];
  const float alpha = 1.0f, beta = g->want.beta;
  GP_TRY(make_desc(type[g->dir], &g->op));
  B_TRY(cudnnBackendSetAttribute(g->op, a[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->x));
  B_TRY(cudnnBackendSetAttribute(g->op, a[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->w));
  B_TRY(cudnnBackendSetAttribute(g->op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->y));
  B_TRY(cudnnBackendSetAttribute(g->op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv));
  B_TRY(cudnnBackendSetAttribute(g->op, a[4], CUDNN_TYPE_FLOAT, 1, &alpha));
  B_TRY(cudnnBackendSetAttribute(g->op, a[5], CUDNN_TYPE_FLOAT, 1, &beta));
  B_TRY(cudnnBackendFinalize(g->op));
  return GP_OK;
}

void gp_conv_graph_free(gp_conv_graph *g) {
  if (!g) return;
  free_desc(&g->plan);
  free_desc(&g->graph);
  free_desc(&g->op);
  free_desc(&g->conv);
  free_desc(&g->y);
  free_desc(&g->w);
  free_desc(&g->x);
  free(g);
}

gp_status gp_conv_graph_make(cudnnHandle_t h, const gp_conv2d_desc *d, int dir,
                             const gp_conv_graph_want *want, gp_conv_graph **out) {
  *out = NULL;
  gp_conv_graph *g = (gp_conv_graph *)calloc(1, sizeof *g);
  if (!g) return GP_ERR(GP_ERR_NOMEM, "conv2d: out of host memory for a cuDNN graph");
  g->dir = dir;
  g->want = *want;
  const cudnnDataType_t dt = want->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const int64_t xd[4] = {d->n, d->c, d->h, d->w}, wd[4] = {d->k, d->c / d->groups, d->kh, d->kw},
                yd[4] = {d->n, d->k, d->oh, d->ow};
  gp_status s = tensor(xd, UID_X, dt, &g->x);
  if (s == GP_OK) s = tensor(wd, UID_W, dt, &g->w);
  if (s == GP_OK) s = tensor(yd, UID_Y, dt, &g->y);
  if (s == GP_OK) s = convolution(d, &g->conv);
  if (s == GP_OK) s = operation(g);
  if (s == GP_OK) s = make_desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph);
  if (s == GP_OK)
    s = gp_cudnn_check(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->op),
                       "cudnnBackendSetAttribute(OPERATIONGRAPH_OPS)", __FILE__, __LINE__);
  if (s == GP_OK)
    s = gp_cudnn_check(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                                CUDNN_TYPE_HANDLE, 1, &h),
                       "cudnnBackendSetAttribute(OPERATIONGRAPH_HANDLE)", __FILE__, __LINE__);
  if (s == GP_OK)
    s = gp_cudnn_check(cudnnBackendFinalize(g->graph), "cudnnBackendFinalize(operation graph)",
                       __FILE__, __LINE__);
  if (s != GP_OK) {
    gp_conv_graph_free(g);
    return s;
  }
  *out = g;
  return GP_OK;
}

/* ---- engines ---- */

// Whether an engine's notes allow it (see gp_conv_graph_want).
static int acceptable(const gp_conv_graph *g, cudnnBackendDescriptor_t engine) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return 0;
  for (int64_t i = 0; i < n; i++) {
    switch (notes[i]) {
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
      if (!g->want.nondeterministic) return 0;
      break;
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: // on f32 data: TF32
      if (!g->want.bf16) return 0;
      break;
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      return 0;
    case CUDNN_NUMERICAL_NOTE_FFT:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
      if (g->want.bf16) return 0;
      break;
    default:
      break;
    }
  }
  cudnnBackendBehaviorNote_t behav[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behav) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; i++)
      if (behav[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return 0; // NVRTC: slow to build
  return 1;
}

// The engine and knobs of a heuristics result; 0 when it cannot be read or is not acceptable.
static int describe(const gp_conv_graph *g, cudnnBackendDescriptor_t cfg, gp_conv_engine *e) {
  cudnnBackendDescriptor_t engine = NULL, knobs[GP_CONV_GRAPH_MAX_KNOBS] = {0};
  int ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ==
           CUDNN_STATUS_SUCCESS;
  int64_t n = 0;
  ok = ok &&
       cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &n, &engine) == CUDNN_STATUS_SUCCESS;
  ok = ok && acceptable(g, engine);
  ok = ok && cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                      &n, &e->global_index) == CUDNN_STATUS_SUCCESS;
  for (int i = 0; ok && i < GP_CONV_GRAPH_MAX_KNOBS; i++)
    ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]) ==
         CUDNN_STATUS_SUCCESS;
  n = 0;
  ok = ok && cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, GP_CONV_GRAPH_MAX_KNOBS, &n,
                                      knobs) == CUDNN_STATUS_SUCCESS;
  e->n_knobs = ok ? (int)n : 0;
  for (int i = 0; ok && i < e->n_knobs; i++) {
    cudnnBackendKnobType_t t;
    int64_t c = 0;
    ok = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                  1, &c, &t) == CUDNN_STATUS_SUCCESS &&
         cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                  &c, &e->knob_value[i]) == CUDNN_STATUS_SUCCESS;
    e->knob_type[i] = (int64_t)t;
  }
  for (int i = 0; i < GP_CONV_GRAPH_MAX_KNOBS; i++)
    if (knobs[i]) cudnnBackendDestroyDescriptor(knobs[i]);
  if (engine) cudnnBackendDestroyDescriptor(engine);
  return ok;
}

// The execution plan of engine e over g's graph; NULL when cuDNN does not finalize it.
static cudnnBackendDescriptor_t build_plan(cudnnHandle_t h, gp_conv_graph *g,
                                           const gp_conv_engine *e) {
  cudnnBackendDescriptor_t engine = NULL, cfg = NULL, plan = NULL,
                           knobs[GP_CONV_GRAPH_MAX_KNOBS] = {0};
  int ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ==
           CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &g->graph) == CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                      &e->global_index) == CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendFinalize(engine) == CUDNN_STATUS_SUCCESS;
  for (int i = 0; ok && i < e->n_knobs; i++) {
    cudnnBackendKnobType_t t = (cudnnBackendKnobType_t)e->knob_type[i];
    ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]) ==
             CUDNN_STATUS_SUCCESS &&
         cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                  1, &t) == CUDNN_STATUS_SUCCESS &&
         cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                  &e->knob_value[i]) == CUDNN_STATUS_SUCCESS &&
         cudnnBackendFinalize(knobs[i]) == CUDNN_STATUS_SUCCESS;
  }
  ok = ok && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) ==
                 CUDNN_STATUS_SUCCESS;
  ok = ok &&
       cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &engine) == CUDNN_STATUS_SUCCESS;
  ok = ok && (e->n_knobs == 0 || cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, e->n_knobs,
                                                          knobs) == CUDNN_STATUS_SUCCESS);
  ok = ok && cudnnBackendFinalize(cfg) == CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) ==
                 CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                      &h) == CUDNN_STATUS_SUCCESS;
  ok = ok &&
       cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) == CUDNN_STATUS_SUCCESS;
  ok = ok && cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS;
  for (int i = 0; i < e->n_knobs; i++)
    if (knobs[i]) cudnnBackendDestroyDescriptor(knobs[i]);
  if (cfg) cudnnBackendDestroyDescriptor(cfg);
  if (engine) cudnnBackendDestroyDescriptor(engine);
  if (!ok && plan) {
    cudnnBackendDestroyDescriptor(plan);
    plan = NULL;
  }
  return plan;
}

static size_t plan_workspace(cudnnBackendDescriptor_t plan) {
  int64_t ws = 0, n = 0;
  if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               &n, &ws) != CUDNN_STATUS_SUCCESS ||
      ws < 0)
    return (size_t)-1;
  return (size_t)ws;
}

static cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *const ptrs[3],
                             void *ws) {
  static const int64_t uids[3] = {UID_X, UID_W, UID_Y};
  cudnnBackendDescriptor_t pack = NULL;
  cudnnStatus_t r = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                 3, ptrs);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                                 uids);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                 &ws);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnBackendFinalize(pack);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnBackendExecute(h, plan, pack);
  if (pack) cudnnBackendDestroyDescriptor(pack);
  return r;
}

// The heuristics' configurations for mode m, appended to cfgs (created here) up to max.
static void heuristics(gp_conv_graph *g, cudnnBackendHeurMode_t m, cudnnBackendDescriptor_t *cfgs,
                       int *n, int max) {
  cudnnBackendDescriptor_t heur = NULL;
  int64_t count = 0;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &g->graph) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               0, &count, NULL) != CUDNN_STATUS_SUCCESS) {
    if (heur) cudnnBackendDestroyDescriptor(heur);
    return;
  }
  if (count > max - *n) count = max - *n;
  int made = 0;
  while (made < count && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                      &cfgs[*n + made]) == CUDNN_STATUS_SUCCESS)
    made++;
  int64_t got = 0;
  if (made > 0 &&
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               made, &got, &cfgs[*n]) != CUDNN_STATUS_SUCCESS)
    got = 0;
  for (int i = (int)got; i < made; i++) // created but not filled
    cudnnBackendDestroyDescriptor(cfgs[*n + i]);
  *n += (int)got;
  cudnnBackendDestroyDescriptor(heur);
}

#define MAX_CFGS 64

static int same_engine(const gp_conv_engine *a, const gp_conv_engine *b) {
  if (a->global_index != b->global_index || a->n_knobs != b->n_knobs) return 0;
  for (int i = 0; i < a->n_knobs; i++)
    if (a->knob_type[i] != b->knob_type[i] || a->knob_value[i] != b->knob_value[i]) return 0;
  return 1;
}

gp_status gp_conv_graph_search(cudnnHandle_t h, cudaStream_t s, gp_conv_graph *g,
                               void *const ptrs[3], void *ws, int *found, gp_conv_engine *best,
                               float *ms, int *tried) {
  *found = 0;
  *tried = 0;
  cudnnBackendDescriptor_t cfgs[MAX_CFGS];
  int n = 0;
  heuristics(g, CUDNN_HEUR_MODE_A, cfgs, &n, MAX_CFGS);
  heuristics(g, CUDNN_HEUR_MODE_FALLBACK, cfgs, &n, MAX_CFGS);
  cudaEvent_t t0 = NULL, t1 = NULL;
  gp_status st = GP_OK;
  if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)
    st = GP_ERR(GP_ERR_DEVICE, "conv2d: cannot create CUDA events for the engine search");
  gp_conv_engine *seen = (gp_conv_engine *)calloc(MAX_CFGS, sizeof *seen);
  int n_seen = 0;
  if (!seen && st == GP_OK) st = GP_ERR(GP_ERR_NOMEM, "conv2d: out of host memory for the search");
  const int log = g->want.log;
  for (int i = 0; st == GP_OK && i < n && *tried < g->want.max_candidates; i++) {
    gp_conv_engine e;
    memset(&e, 0, sizeof e);
    if (!describe(g, cfgs[i], &e)) continue;
    int dup = 0; // the fallback list repeats configurations of mode A
    for (int j = 0; j < n_seen && !dup; j++)
      dup = same_engine(&seen[j], &e);
    if (dup) continue;
    seen[n_seen++] = e;
    cudnnBackendDescriptor_t plan = build_plan(h, g, &e);
    if (!plan) continue;
    e.workspace = plan_workspace(plan);
    float best_t = -1.0f;
    if (e.workspace <= g->want.workspace) {
      (*tried)++;
      // one untimed run (setup, caches), then the best of three
      int ok = execute(h, plan, ptrs, ws) == CUDNN_STATUS_SUCCESS;
      for (int r = 0; ok && r < 3; r++) {
        float t = 0;
        ok = cudaEventRecord(t0, s) == cudaSuccess &&
             execute(h, plan, ptrs, ws) == CUDNN_STATUS_SUCCESS &&
             cudaEventRecord(t1, s) == cudaSuccess && cudaEventSynchronize(t1) == cudaSuccess &&
             cudaEventElapsedTime(&t, t0, t1) == cudaSuccess;
        if (ok && (best_t < 0 || t < best_t)) best_t = t;
      }
      cudaGetLastError(); // a failed engine leaves nothing for the next call to report
    }
    if (log)
      fprintf(stderr, "  graph engine %lld (%d knobs): %s %.4f ms, %zu bytes\n",
              (long long)e.global_index, e.n_knobs,
              e.workspace > g->want.workspace ? "over the workspace cap"
              : best_t < 0                    ? "failed"
                                              : "ok",
              best_t, e.workspace);
    if (best_t >= 0 && (!*found || best_t < *ms)) {
      *found = 1;
      *ms = best_t;
      *best = e;
      free_desc(&g->plan);
      g->plan = plan;
      g->engine = e;
    } else {
      cudnnBackendDestroyDescriptor(plan);
    }
  }
  for (int i = 0; i < n; i++)
    cudnnBackendDestroyDescriptor(cfgs[i]);
  free(seen);
  if (t0) cudaEventDestroy(t0);
  if (t1) cudaEventDestroy(t1);
  return st;
}

gp_status gp_conv_graph_use(cudnnHandle_t h, gp_conv_graph *g, const gp_conv_engine *e) {
  cudnnBackendDescriptor_t plan = build_plan(h, g, e);
  if (!plan)
    return GP_ERR(GP_ERR_DEVICE, "conv2d: cuDNN does not build engine %lld for this handle",
                  (long long)e->global_index);
  free_desc(&g->plan);
  g->plan = plan;
  g->engine = *e;
  g->engine.workspace = plan_workspace(plan);
  return GP_OK;
}

gp_status gp_conv_graph_run(cudnnHandle_t h, gp_conv_graph *g, void *const ptrs[3], void *ws) {
  if (!g->plan) return GP_ERR(GP_ERR_RUNTIME, "conv2d: a cuDNN graph without a plan was run");
  GP_TRY(gp_cudnn_check(execute(h, g->plan, ptrs, ws), "cudnnBackendExecute", __FILE__, __LINE__));
  return GP_OK;
}

size_t gp_conv_graph_workspace(const gp_conv_graph *g) {
  return g && g->plan ? g->engine.workspace : 0;
}

int gp_conv_graph_aligned(const void *const ptrs[3]) {
  for (int i = 0; i < 3; i++)
    if ((uintptr_t)ptrs[i] % GP_CONV_GRAPH_ALIGN) return 0;
  return 1;
}

int gp_conv_graph_enabled(void) {
  return gp_env_get(GP_ENV_CUDNN_GRAPH, 1);
}
