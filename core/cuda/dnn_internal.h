/* Private to the dnn family of the CUDA backend (dnn.cu, dnn_pool.cu, dnn_norm.cu,
 * dnn_rmsnorm.cu, dnn_seq.cu): the state behind gp_cuda_impl.dnn_state, launch geometry, the
 * private workspace, the device flags that input checks report through, and block reductions. */
#ifndef GP_CUDA_DNN_INTERNAL_H
#define GP_CUDA_DNN_INTERNAL_H

#include "core/cuda/internal.h"

/* Slots of first-bad-position flags one check may use (attention checks three arrays). */
#define GP_DNN_FLAGS 4
/* Threads per block of the element-wise kernels of this family. */
#define GP_DNN_BLOCK 256

typedef struct gp_dnn_conv_cache gp_dnn_conv_cache; /* dnn.cu */
typedef struct gp_sdpa_cache gp_sdpa_cache;         /* sdpa.cu: fused attention's plans */

typedef struct gp_dnn_state {
  int sms;                          /* multiprocessors of the device, for grid sizes */
  void *work;                       /* private device workspace (never the public scratch, */
  size_t work_bytes;                /* which layers keep data in across calls) */
  unsigned long long *flags_dev;    /* [GP_DNN_FLAGS] first bad positions, ULLONG_MAX = none */
  unsigned long long *flags_host;   /* pinned copy */
  gp_dnn_conv_cache *conv;          /* cuDNN descriptors and algorithms per convolution shape */
  gp_sdpa_cache *sdpa;              /* fused attention's plans per shape (sdpa.cu) */
  int64_t conv_searches, conv_hits; /* algorithm choices made (searched, or another instance's
                                     * search of the shape taken over), and lookups that hit */
} gp_dnn_state;

static inline gp_dnn_state *gp_dnn_of(gp_backend *be) {
  return (gp_dnn_state *)gp_cuda_of(be)->dnn_state;
}

/* Blocks for a grid-stride loop over n items with `threads` per block (>= 1, capped; the
 * loop covers the rest). */
unsigned gp_dnn_blocks(gp_backend *be, int64_t n, int threads);
/* Threads per block of the kernels that give a block to a row of `cols` (a multiple of 32,
 * at most 512). */
int gp_dnn_row_threads(int64_t cols);
/* The private workspace of at least bytes (grows only; valid until the next op of the
 * family). */
gp_status gp_dnn_work(gp_backend *be, size_t bytes, void **out);
/* Sets the first `count` flags to "none" (on the instance's stream). */
gp_status gp_dnn_flags_reset(gp_backend *be, int count);
/* Copies the first `count` flags to flags_host and waits for them. */
gp_status gp_dnn_flags_read(gp_backend *be, int count);
/* Synchronous copy of a few bytes from the device (the offending value of a failed check). */
gp_status gp_dnn_fetch(gp_backend *be, void *host, const void *dev, size_t bytes);

/* Fill the table entries of each file. */
void gp_dnn_install_conv(gp_backend *be);
void gp_dnn_install_pool(gp_backend *be);
void gp_dnn_install_norm(gp_backend *be);
void gp_dnn_install_rmsnorm(gp_backend *be); /* dnn_rmsnorm.cu */
void gp_dnn_install_seq(gp_backend *be);
void gp_dnn_install_shapes(gp_backend *be); /* dnn_shapes.cu: permute, group norm, losses */
void gp_dnn_install_resize(gp_backend *be); /* dnn_resize.cu */
/* sdpa.cu: fused attention's table entries (NULL where cuDNN is older than 9 at build time),
 * and its shape cache's release from gp_cuda_dnn_release. */
void gp_dnn_install_sdpa(gp_backend *be);
void gp_dnn_sdpa_release(gp_backend *be);
void gp_dnn_conv_release(gp_dnn_state *st);

/* Per-channel sums over [n, c, inner] (dnn_norm.cu): dbias[j] += sum of dy over channel j,
 * summed deterministically (the conv bias gradient). */
gp_status gp_dnn_channel_sum(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                             float *dbias);

#ifdef __CUDACC__
/* Records position i as bad: the flag keeps the smallest, so the report names the first bad
 * position, as the CPU's sequential scan does. */
static __device__ __forceinline__ void gp_dnn_flag(unsigned long long *f, int64_t i) {
  atomicMin(f, (unsigned long long)i);
}

/* Block-wide reductions (blockDim.x a multiple of 32, at most 1024; every thread calls; sh
 * is __shared__ T[32]). The order is fixed by blockDim, so results are deterministic. */
struct gp_dnn_add {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
/* Larger of a and b where b wins only when it compares greater: a NaN never wins (as the
 * CPU's `if (v > best)` loops), and -INFINITY is the identity. */
struct gp_dnn_max {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return b > a ? b : a;
  }
};

template <typename T, typename Op>
static __device__ __forceinline__ T gp_dnn_block_reduce(T v, T identity, Op op, T *sh) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads(); /* sh may still be read by an earlier reduction */
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < nw ? sh[lane] : identity;
    for (int o = 16; o > 0; o >>= 1)
      v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
#endif

#endif
