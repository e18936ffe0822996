/* Private to direct_conv.c and direct_conv512.c: the register tiles of the direct
 * convolution, which each instruction set implements (AVX2 + FMA in direct_conv.c, vectors of
 * 8 floats; AVX-512F in direct_conv512.c, vectors of 16), and the driver shares. */
#ifndef GP_CPU_DIRECT_CONV_H
#define GP_CPU_DIRECT_CONV_H

#include <stdint.h>

#define GP_DC_MR 6     /* output channels per forward tile */
#define GP_DC_NVMAX 4  /* vectors per forward tile, at most */
#define GP_DC_FMRMAX 4 /* output channels per filter tile, at most */
#define GP_DC_FKR 6    /* (channel, tap) entries per filter tile */

/* A forward tile: GP_DC_MR (or fewer) output channels x nv vectors of output pixels, each one
 * sum over the ckk (channel, tap) pairs in order, then the bias. */
typedef struct gp_dtile {
  int64_t ckk;
  const int64_t *koff;           /* per (channel, tap): its offset in the padded sample */
  const float *src[GP_DC_NVMAX]; /* padded input at each vector's first output pixel */
  const float *w;                /* the channel block's packed weights, [ckk][GP_DC_MR] */
  float *dst[GP_DC_NVMAX];       /* output of the block's first channel at each vector */
  int valid[GP_DC_NVMAX];        /* output pixels of each vector inside its row */
  int64_t ohw;                   /* channel stride of the output */
  const float *bias;             /* the block's first channel's, or NULL */
} gp_dtile;
typedef void (*gp_dtile_fn)(const gp_dtile *);

/* A filter tile: mr output channels x kr entries, summed along the pixels of ns samples and
 * oh rows, then added to dW. */
typedef struct gp_ftile {
  const float *dy;       /* dy of the tile's first channel (the others follow), first sample */
  const float *x;        /* padded input at the tile's first entry, first sample of the visit */
  int64_t xo[GP_DC_FKR]; /* the entries' offsets from the first */
  int64_t ns, dy_stride, x_stride; /* samples; per-sample strides of dy and the input */
  int64_t oh, ow, pw, ohw;
  float *dw[GP_DC_FMRMAX]; /* the tile's first entry in each channel's dW row */
} gp_ftile;
typedef void (*gp_ftile_fn)(const gp_ftile *);

/* direct_conv512.c: whether this CPU runs its tiles (AVX-512F), the forward tile of mr
 * channels (1..GP_DC_MR) x nv vectors (1..4) of 16, and the filter tile of mr channels
 * (1..GP_DC_FMRMAX) x kr entries (1..GP_DC_FKR); NULL where not built. */
int gp_dc512_available(void);
gp_dtile_fn gp_dc512_tile(int mr, int nv);
gp_ftile_fn gp_dc512_ftile(int mr, int kr);

#endif
