// Ordering between instances (pipeline stages) on CUDA: the instance's copy streams, events,
// copies between devices (peer-to-peer where the devices allow it, staged by the driver
// where not) and pinned host memory for asynchronous input copies.
#include <pthread.h>
#include <stdlib.h>

#include "core/cuda/internal.h"

struct gp_event {
  cudaEvent_t ev;
  int device; // where it was created: it may only be recorded on that device's streams
};

namespace {

cudaStream_t queue_of(gp_backend *be, gp_queue q) {
  gp_cuda_impl *im = gp_cuda_of(be);
  return q == GP_Q_IN ? im->in : q == GP_Q_OUT ? im->out : im->stream;
}

// Peer access is per ordered pair of devices and process-wide: enabled once, by whichever
// instance first copies between the two.
const int MAX_PEERS = 64;
pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;
unsigned char peer_tried[MAX_PEERS][MAX_PEERS];

// Lets `from` read and write `to`'s memory directly when the hardware allows; otherwise
// cudaMemcpyPeerAsync stages through the host by itself. Leaves `from` current.
gp_status enable_peer(int from, int to) {
  if (from == to || from < 0 || to < 0 || from >= MAX_PEERS || to >= MAX_PEERS) return GP_OK;
  pthread_mutex_lock(&peer_mu);
  gp_status s = GP_OK;
  if (!peer_tried[from][to]) {
    peer_tried[from][to] = 1;
    int can = 0;
    s = gp_cuda_check(cudaDeviceCanAccessPeer(&can, from, to), "cudaDeviceCanAccessPeer", __FILE__,
                      __LINE__);
    if (s == GP_OK) s = gp_cuda_check(cudaSetDevice(from), "cudaSetDevice", __FILE__, __LINE__);
    if (s == GP_OK && can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        s = gp_cuda_check(e, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
    }
  }
  pthread_mutex_unlock(&peer_mu);
  return s;
}

// flags: cudaEventDisableTiming for the ordering events (cheaper to record and wait on),
// cudaEventDefault for timers.
gp_status event_make(gp_backend *be, unsigned flags, gp_event **out) {
  *out = NULL;
  GP_TRY(gp_cuda_use(be));
  gp_event *ev = (gp_event *)calloc(1, sizeof *ev);
  if (!ev) return GP_ERR(GP_ERR_NOMEM, "out of host memory for an event");
  ev->device = be->device;
  gp_status s = gp_cuda_check(cudaEventCreateWithFlags(&ev->ev, flags), "cudaEventCreateWithFlags",
                              __FILE__, __LINE__);
  if (s != GP_OK) {
    free(ev);
    return s;
  }
  *out = ev;
  return GP_OK;
}

gp_status order_event_create(gp_backend *be, gp_event **out) {
  return event_make(be, cudaEventDisableTiming, out);
}

gp_status order_timer_create(gp_backend *be, gp_event **out) {
  return event_make(be, cudaEventDefault, out);
}

gp_status order_event_elapsed(gp_backend *be, gp_event *from, gp_event *to, double *seconds) {
  if (from->device != be->device || to->device != be->device)
    return GP_ERR(GP_ERR_RUNTIME, "timers of CUDA devices %d and %d read on device %d",
                  from->device, to->device, be->device);
  GP_TRY(gp_cuda_use(be));
  float ms = 0;
  GP_CUDA_TRY(cudaEventElapsedTime(&ms, from->ev, to->ev));
  *seconds = 1e-3 * (double)ms;
  return GP_OK;
}

void order_event_destroy(gp_backend *be, gp_event *ev) {
  (void)be;
  if (!ev) return;
  (void)cudaSetDevice(ev->device);
  (void)cudaEventDestroy(ev->ev);
  free(ev);
}

gp_status order_event_record(gp_backend *be, gp_queue q, gp_event *ev) {
  if (ev->device != be->device)
    return GP_ERR(GP_ERR_RUNTIME, "an event of CUDA device %d recorded on device %d", ev->device,
                  be->device);
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaEventRecord(ev->ev, queue_of(be, q)));
  return GP_OK;
}

gp_status order_event_wait(gp_backend *be, gp_queue q, gp_event *ev) {
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaStreamWaitEvent(queue_of(be, q), ev->ev, 0));
  return GP_OK;
}

gp_status order_event_sync(gp_backend *be, gp_event *ev) {
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaEventSynchronize(ev->ev));
  return GP_OK;
}

gp_status order_copy_peer(gp_backend *be, gp_queue q, void *dst, int dst_dev, const void *src,
                          int src_dev, size_t bytes) {
  if (!bytes) return GP_OK;
  if (dst_dev != be->device && src_dev != be->device)
    return GP_ERR(GP_ERR_RUNTIME,
                  "a copy from CUDA device %d to %d queued on device %d (one end must be it)",
                  src_dev, dst_dev, be->device);
  if (dst_dev != src_dev)
    GP_TRY(enable_peer(be->device, dst_dev == be->device ? src_dev : dst_dev));
  GP_TRY(gp_cuda_use(be));
  cudaStream_t s = queue_of(be, q);
  if (dst_dev == src_dev)
    GP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  else
    GP_CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s));
  return GP_OK;
}

gp_status order_host_alloc(gp_backend *be, size_t bytes, void **out) {
  GP_TRY(gp_cuda_use(be));
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return GP_ERR(GP_ERR_NOMEM, "out of page-locked host memory allocating %zu bytes", bytes);
  }
  GP_TRY(gp_cuda_check(e, "cudaHostAlloc", __FILE__, __LINE__));
  *out = p;
  return GP_OK;
}

void order_host_free(gp_backend *be, void *p) {
  (void)be;
  if (p) (void)cudaFreeHost(p);
}

gp_status order_from_host_async(gp_backend *be, void *dst, const void *host, size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, gp_cuda_of(be)->stream));
  return GP_OK;
}

// q is IN or OUT: host memory from host_alloc, so the copy runs beside compute
gp_status order_to_host_on(gp_backend *be, gp_queue q, void *host, const void *src, size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, queue_of(be, q)));
  return GP_OK;
}

gp_status order_from_host_on(gp_backend *be, gp_queue q, void *dst, const void *host,
                             size_t bytes) {
  if (!bytes) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, queue_of(be, q)));
  return GP_OK;
}

gp_status order_event_query(gp_backend *be, gp_event *ev, int *passed) {
  GP_TRY(gp_cuda_use(be));
  cudaError_t e = cudaEventQuery(ev->ev);
  *passed = e == cudaSuccess;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError(); // not an error: the mark is still ahead
    return GP_OK;
  }
  return gp_cuda_check(e, "cudaEventQuery", __FILE__, __LINE__);
}

} // namespace

extern "C" void *gp_cuda_queue(gp_backend *be, gp_queue q) {
  return (void *)queue_of(be, q);
}

gp_status gp_cuda_order_install(gp_backend *be) {
  gp_cuda_impl *im = gp_cuda_of(be);
  GP_TRY(gp_cuda_use(be));
  GP_CUDA_TRY(cudaStreamCreateWithFlags(&im->in, cudaStreamNonBlocking));
  GP_CUDA_TRY(cudaStreamCreateWithFlags(&im->out, cudaStreamNonBlocking));
  be->event_create = order_event_create;
  be->event_destroy = order_event_destroy;
  be->event_record = order_event_record;
  be->event_wait = order_event_wait;
  be->event_sync = order_event_sync;
  be->timer_create = order_timer_create;
  be->event_elapsed = order_event_elapsed;
  be->copy_peer = order_copy_peer;
  be->host_alloc = order_host_alloc;
  be->host_free = order_host_free;
  be->from_host_async = order_from_host_async;
  be->to_host_on = order_to_host_on;
  be->from_host_on = order_from_host_on;
  be->event_query = order_event_query;
  return GP_OK;
}

void gp_cuda_order_release(gp_backend *be) {
  gp_cuda_impl *im = gp_cuda_of(be);
  (void)cudaSetDevice(be->device);
  if (im->in) (void)cudaStreamSynchronize(im->in), (void)cudaStreamDestroy(im->in);
  if (im->out) (void)cudaStreamSynchronize(im->out), (void)cudaStreamDestroy(im->out);
  im->in = im->out = NULL;
}
