/* NCCL between the GPU stages of different processes: communicators bootstrapped over MPI
 * (core/dist/dist.h), each with a stream of its own, and the operations the channels and the
 * gradients' all-reduce queue there. Built where CUDA and MPI both are (nccl.c); elsewhere
 * nonccl.c says no. Streams are CUDA streams passed as void * (gp_cuda_queue), so that plain C
 * callers need no CUDA header. NCCL's thread rule holds by construction: a communicator's end
 * is driven by one stage thread (it is made on the main thread, before the stages start). */
#ifndef GP_NCCL_H
#define GP_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "core/dist/dist.h"

typedef struct gp_nccl gp_nccl;

/* 1 when this build has NCCL (CUDA and MPI found). */
int gp_nccl_built(void);
/* The NCCL library's version as NCCL_VERSION_CODE counts it (2.28.9: 22809); 0 without. */
int gp_nccl_version(void);

/* A communicator of two: this process and position `peer` of its replica, on CUDA device
 * `device`; `maker` (one end, the other 0) makes the id and sends it over MPI. marks: how many
 * marks (gp_nccl_mark) it keeps. Both ends call it on their main threads, in the same order
 * among the pairs of the run. GP_ERR_RUNTIME with one line when NCCL refuses (several
 * processes on one GPU need NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1). */
gp_status gp_nccl_pair(gp_dist *d, int peer, int maker, int device, int marks, gp_nccl **out);
/* A communicator of stage s's replicas (rank = replica), on device `device`: every process
 * holding stage s calls it, on its main thread; replica 0 makes the id (MPI_Bcast). */
gp_status gp_nccl_replicas(gp_dist *d, int s, int device, gp_nccl **out);
void gp_nccl_free(gp_nccl *c); /* NULL ok */

/* ---- operations, queued on the communicator's stream after the work queued so far on
 * `after` (a stage's compute stream); the host does not wait ---- */
/* bytes from buf to the other end of a pair (ncclSend in a group). */
gp_status gp_nccl_send(gp_nccl *c, const void *buf, size_t bytes, void *after);
/* bytes from the other end of a pair into buf (ncclRecv in a group). */
gp_status gp_nccl_recv(gp_nccl *c, void *buf, size_t bytes, void *after);
/* n floats at buf summed in place over the communicator (ncclAllReduce). */
gp_status gp_nccl_allreduce(gp_nccl *c, float *buf, int64_t n, void *after);
/* Work queued on `stream` after this waits for everything queued on the communicator so far. */
gp_status gp_nccl_join(gp_nccl *c, void *stream);
/* Mark i (< marks) at the work queued on the communicator so far; whether it has passed (an
 * error NCCL reported meanwhile is returned). */
gp_status gp_nccl_mark(gp_nccl *c, int i);
gp_status gp_nccl_passed(gp_nccl *c, int i, int *passed);

#endif
