/* Source indices and weights of 2-D resizing (gp_resize2d_desc), PyTorch's formulas in f32,
 * shared by the CPU and CUDA backends so both pick the same pixels with the same weights. */
#ifndef GP_RESIZE2D_H
#define GP_RESIZE2D_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GP_RESIZE_FN static __host__ __device__ __forceinline__
#else
#define GP_RESIZE_FN static inline
#endif

/* The f32 step from an output index to a source coordinate along one axis. */
GP_RESIZE_FN float gp_resize_scale(int64_t in, int64_t out, double factor, int bilinear,
                                   int align_corners) {
  if (bilinear && align_corners) return out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
  return factor > 0 ? (float)(1.0 / factor) : (float)in / (float)out;
}

/* Nearest: the source index of output o (PyTorch's nearest_idx). */
GP_RESIZE_FN int64_t gp_resize_nearest(int64_t o, int64_t in, int64_t out, float scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  int64_t i = (int64_t)floorf((float)o * scale);
  return i < in - 1 ? i : in - 1;
}

/* Bilinear: output o reads i0 with weight 1 - l and i0 + 1 (i0 itself at the last index)
 * with weight l; returns i0. */
GP_RESIZE_FN int64_t gp_resize_linear(int64_t o, int64_t in, float scale, int align_corners,
                                      float *l) {
  float src = align_corners ? scale * (float)o : scale * ((float)o + 0.5f) - 0.5f;
  if (src < 0.0f) src = 0.0f;
  int64_t i = (int64_t)floorf(src);
  if (i > in - 1) i = in - 1;
  float f = src - (float)i;
  *l = f < 0.0f ? 0.0f : f > 1.0f ? 1.0f : f;
  return i;
}

#endif
