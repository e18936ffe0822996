/* NCCL communicators bootstrapped over MPI, and the operations GPU stages of different
 * processes queue on them (core/dist/nccl.h). Built only where CUDA and MPI both are. None of
 * this has run on a GPU yet: it compiles and links; scripts/gpu-check.sh's mpi phase runs it. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/nccl.h"

struct gp_nccl {
  ncclComm_t comm;
  int device, rank, size;
  cudaStream_t stream; /* every operation of the communicator, in order */
  cudaEvent_t after;   /* the caller's stream's mark the next operation waits for */
  cudaEvent_t done;    /* gp_nccl_join's mark */
  cudaEvent_t *mark;
  int n_mark;
  int failed; /* an operation failed: the communicator is aborted, not destroyed (a peer that
                 died would never answer the destroy's flush) */
};

int gp_nccl_built(void) {
  return 1;
}

int gp_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

static gp_status cuda_err(cudaError_t e, const char *what) {
  return GP_ERR(GP_ERR_RUNTIME, "%s: %s", what, cudaGetErrorString(e));
}
#define CU_TRY(call)                                                                               \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return cuda_err(e_, #call);                                             \
  } while (0)

static gp_status nccl_err(gp_nccl *c, ncclResult_t r, const char *what) {
  if (c) c->failed = 1;
  const char *last = ncclGetLastError(c ? c->comm : NULL);
  return GP_ERR(GP_ERR_RUNTIME, "NCCL %s failed: %s%s%s", what, ncclGetErrorString(r),
                last && *last ? ": " : "", last ? last : "");
}
#define NCCL_TRY(c, call, what)                                                                    \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) return nccl_err((c), r_, what);                                         \
  } while (0)

/* The communicator's stream and events, then the communicator itself (collective over its
 * ranks): a refusal is one line saying what to do about it. */
static gp_status streams(gp_nccl *c) {
  CU_TRY(cudaSetDevice(c->device));
  CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CU_TRY(cudaEventCreateWithFlags(&c->after, cudaEventDisableTiming));
  CU_TRY(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
  for (int i = 0; i < c->n_mark; i++)
    CU_TRY(cudaEventCreateWithFlags(&c->mark[i], cudaEventDisableTiming));
  return GP_OK;
}

static gp_status make(gp_nccl *c, const ncclUniqueId *id, const char *what) {
  gp_status s = streams(c);
  if (s != GP_OK)
    return gp_error_prefix(s, "the NCCL communicator of %s on CUDA device %d: ", what, c->device);
  ncclResult_t r = ncclCommInitRank(&c->comm, c->size, *id, c->rank);
  if (r == ncclSuccess) return GP_OK;
  const char *last = ncclGetLastError(NULL);
  char hint[256] = "";
  const int v = gp_nccl_version();
  if (r == ncclInvalidUsage && v < 23000)
    snprintf(hint, sizeof hint,
             "; several processes on one GPU need NCCL 2.30 or later with "
             "NCCL_MULTI_RANK_GPU_ENABLE=1 (this is %d.%d.%d)",
             v / 10000, v / 100 % 100, v % 100);
  if (c->comm) (void)ncclCommAbort(c->comm);
  c->comm = NULL;
  const int said = last && *last;
  return GP_ERR(GP_ERR_RUNTIME,
                "NCCL refused the communicator of %s on CUDA device %d: %s%s%s%s%s; GP_NCCL=0 "
                "hands GPU tensors through MPI instead",
                what, c->device, ncclGetErrorString(r), said ? " (" : "", said ? last : "",
                said ? ")" : "", hint);
}

static gp_status alloc(int device, int rank, int size, int marks, gp_nccl **out) {
  *out = NULL;
  gp_nccl *c = calloc(1, sizeof *c);
  if (!c || !(c->mark = calloc((size_t)(marks > 0 ? marks : 1), sizeof *c->mark))) {
    free(c);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for an NCCL communicator");
  }
  c->device = device;
  c->rank = rank;
  c->size = size;
  c->n_mark = marks;
  *out = c;
  return GP_OK;
}

gp_status gp_nccl_pair(gp_dist *d, int peer, int maker, int device, int marks, gp_nccl **out) {
  GP_TRY(alloc(device, maker ? 0 : 1, 2, marks, out));
  gp_nccl *c = *out;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  gp_status s = GP_OK;
  if (maker) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) s = nccl_err(NULL, r, "ncclGetUniqueId");
  }
  /* the maker's id travels even after its failure (zeros): the other end must not wait */
  const int me = d->lay.pos;
  gp_status sh = gp_dist_pair_share(d, maker ? me : peer, maker ? peer : me, &id, sizeof id);
  if (s == GP_OK) s = sh;
  char what[96];
  snprintf(what, sizeof what, "positions %d and %d of replica %d", maker ? me : peer,
           maker ? peer : me, d->lay.replica);
  if (s == GP_OK) s = make(c, &id, what);
  if (s != GP_OK) {
    gp_nccl_free(c);
    *out = NULL;
  }
  return s;
}

gp_status gp_nccl_replicas(gp_dist *d, int s_index, int device, gp_nccl **out) {
  GP_TRY(alloc(device, d->lay.replica, d->lay.replicas, 0, out));
  gp_nccl *c = *out;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  gp_status s = GP_OK;
  if (d->lay.replica == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) s = nccl_err(NULL, r, "ncclGetUniqueId");
  }
  gp_status b = gp_dist_bcast_replicas(d, s_index, &id, sizeof id);
  if (s == GP_OK) s = b;
  char what[64];
  snprintf(what, sizeof what, "stage %d's %d replicas", s_index, d->lay.replicas);
  if (s == GP_OK) s = make(c, &id, what);
  if (s != GP_OK) {
    gp_nccl_free(c);
    *out = NULL;
  }
  return s;
}

void gp_nccl_free(gp_nccl *c) {
  if (!c) return;
  (void)cudaSetDevice(c->device);
  if (c->stream && !c->failed) (void)cudaStreamSynchronize(c->stream);
  if (c->comm) (void)(c->failed ? ncclCommAbort(c->comm) : ncclCommDestroy(c->comm));
  for (int i = 0; i < c->n_mark; i++)
    if (c->mark[i]) (void)cudaEventDestroy(c->mark[i]);
  if (c->after) (void)cudaEventDestroy(c->after);
  if (c->done) (void)cudaEventDestroy(c->done);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  free(c->mark);
  free(c);
}

/* The communicator's stream waits for the work queued so far on `after`. */
static gp_status follow(gp_nccl *c, void *after) {
  CU_TRY(cudaSetDevice(c->device));
  if (!after) return GP_OK;
  CU_TRY(cudaEventRecord(c->after, (cudaStream_t)after));
  CU_TRY(cudaStreamWaitEvent(c->stream, c->after, 0));
  return GP_OK;
}

/* ncclGroupEnd only enqueues: the group of one send or receive is what lets NCCL match it with
 * the peer's without blocking this thread (NCCL's user guide, point-to-point) */
static gp_status p2p(gp_nccl *c, int send, void *buf, size_t bytes, void *after) {
  GP_TRY(follow(c, after));
  if (!bytes) return GP_OK;
  NCCL_TRY(c, ncclGroupStart(), "ncclGroupStart");
  ncclResult_t r = send ? ncclSend(buf, bytes, ncclUint8, 1 - c->rank, c->comm, c->stream)
                        : ncclRecv(buf, bytes, ncclUint8, 1 - c->rank, c->comm, c->stream);
  ncclResult_t e = ncclGroupEnd();
  NCCL_TRY(c, r, send ? "ncclSend" : "ncclRecv");
  NCCL_TRY(c, e, "ncclGroupEnd");
  return GP_OK;
}

gp_status gp_nccl_send(gp_nccl *c, const void *buf, size_t bytes, void *after) {
  return p2p(c, 1, (void *)buf, bytes, after);
}

gp_status gp_nccl_recv(gp_nccl *c, void *buf, size_t bytes, void *after) {
  return p2p(c, 0, buf, bytes, after);
}

gp_status gp_nccl_allreduce(gp_nccl *c, float *buf, int64_t n, void *after) {
  GP_TRY(follow(c, after));
  if (n <= 0) return GP_OK;
  NCCL_TRY(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum, c->comm, c->stream),
           "ncclAllReduce");
  return GP_OK;
}

gp_status gp_nccl_join(gp_nccl *c, void *stream) {
  CU_TRY(cudaSetDevice(c->device));
  CU_TRY(cudaEventRecord(c->done, c->stream));
  CU_TRY(cudaStreamWaitEvent((cudaStream_t)stream, c->done, 0));
  return GP_OK;
}

gp_status gp_nccl_mark(gp_nccl *c, int i) {
  if (i < 0 || i >= c->n_mark) return GP_ERR(GP_ERR_RUNTIME, "internal: NCCL mark %d", i);
  CU_TRY(cudaSetDevice(c->device));
  CU_TRY(cudaEventRecord(c->mark[i], c->stream));
  return GP_OK;
}

gp_status gp_nccl_passed(gp_nccl *c, int i, int *passed) {
  *passed = 0;
  if (i < 0 || i >= c->n_mark) return GP_ERR(GP_ERR_RUNTIME, "internal: NCCL mark %d", i);
  CU_TRY(cudaSetDevice(c->device));
  cudaError_t e = cudaEventQuery(c->mark[i]);
  if (e == cudaSuccess) return *passed = 1, GP_OK;
  if (e != cudaErrorNotReady) return cuda_err(e, "cudaEventQuery");
  (void)cudaGetLastError();
  /* still in flight: a peer that failed shows here, not as a hang */
  ncclResult_t async = ncclSuccess;
  NCCL_TRY(c, ncclCommGetAsyncError(c->comm, &async), "ncclCommGetAsyncError");
  if (async != ncclSuccess && async != ncclInProgress)
    return nccl_err(c, async, "a transfer in flight");
  return GP_OK;
}
