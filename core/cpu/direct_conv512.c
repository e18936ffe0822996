/* The direct convolution's register tiles in AVX-512F (vectors of 16 floats), for
 * direct_conv.c's driver. The forward tile is 6 output channels x 4 vectors (24 of the 32
 * registers): per (channel, tap) 4 input loads and 6 weight broadcasts feed 24 fused
 * multiply-adds, where AVX2's 6 x 2 tile feeds 12 with 2 and 6. Each output element is the same
 * sum in the same order as in the AVX2 tile, so the two give the same bytes. The filter tile is
 * 4 output channels x 6 entries: 4 dy loads and 6 input loads per 24 multiply-adds. */
#include "core/cpu/direct_conv.h"

#include <stddef.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_512 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline))
#else
#define HAVE_512 0
#endif

#if HAVE_512

#define VW 16

int gp_dc512_available(void) {
  return __builtin_cpu_supports("avx512f");
}

/* Output channel m of the tile, vector v, plus the bias, to its valid lanes. */
INLINE AVX512 void store(const gp_dtile *t, int m, int v, __m512 r) {
  if (t->bias) r = _mm512_add_ps(r, _mm512_set1_ps(t->bias[m]));
  _mm512_mask_storeu_ps(t->dst[v] + m * t->ohw, (__mmask16)((1u << t->valid[v]) - 1u), r);
}

/* Named accumulators, as in direct_conv.c (an array was spilled on every iteration). */
#define ROW(i)                                                                                     \
  if (mr > i) {                                                                                    \
    const __m512 a = _mm512_set1_ps(w[i]);                                                         \
    c##i##0 = _mm512_fmadd_ps(a, b0, c##i##0);                                                     \
    if (nv > 1) c##i##1 = _mm512_fmadd_ps(a, b1, c##i##1);                                         \
    if (nv > 2) c##i##2 = _mm512_fmadd_ps(a, b2, c##i##2);                                         \
    if (nv > 3) c##i##3 = _mm512_fmadd_ps(a, b3, c##i##3);                                         \
  }
#define STORE(i)                                                                                   \
  if (mr > i) {                                                                                    \
    store(t, i, 0, c##i##0);                                                                       \
    if (nv > 1) store(t, i, 1, c##i##1);                                                           \
    if (nv > 2) store(t, i, 2, c##i##2);                                                           \
    if (nv > 3) store(t, i, 3, c##i##3);                                                           \
  }
#define ZERO(i)                                                                                    \
  c##i##0 = _mm512_setzero_ps(), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0

INLINE AVX512 void tile_body(const int mr, const int nv, const gp_dtile *t) {
  __m512 ZERO(0), ZERO(1), ZERO(2), ZERO(3), ZERO(4), ZERO(5);
  const float *w = t->w, *s0 = t->src[0], *s1 = t->src[nv > 1 ? 1 : 0],
              *s2 = t->src[nv > 2 ? 2 : 0], *s3 = t->src[nv > 3 ? 3 : 0];
  const int64_t *koff = t->koff, ckk = t->ckk;
  for (int64_t k = 0; k < ckk; k++, w += GP_DC_MR) {
    const int64_t o = koff[k];
    const __m512 b0 = _mm512_loadu_ps(s0 + o);
    const __m512 b1 = nv > 1 ? _mm512_loadu_ps(s1 + o) : b0;
    const __m512 b2 = nv > 2 ? _mm512_loadu_ps(s2 + o) : b0;
    const __m512 b3 = nv > 3 ? _mm512_loadu_ps(s3 + o) : b0;
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
  }
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

#define TILE(mr, nv)                                                                               \
  AVX512 static void tile_##mr##_##nv(const gp_dtile *t) {                                         \
    tile_body(mr, nv, t);                                                                          \
  }
#define TILES(nv) TILE(1, nv) TILE(2, nv) TILE(3, nv) TILE(4, nv) TILE(5, nv) TILE(6, nv)
TILES(1)
TILES(2)
TILES(3)
TILES(4)
#define ROWFNS(nv)                                                                                 \
  { tile_1_##nv, tile_2_##nv, tile_3_##nv, tile_4_##nv, tile_5_##nv, tile_6_##nv }
static const gp_dtile_fn tiles[GP_DC_NVMAX][GP_DC_MR] = {ROWFNS(1), ROWFNS(2), ROWFNS(3),
                                                         ROWFNS(4)};

gp_dtile_fn gp_dc512_tile(int mr, int nv) {
  return tiles[nv - 1][mr - 1];
}

/* ---- backward-filter: a step loads 16 pixels of dy for each of the tile's channels and of
 * the padded input for each entry; a row's last, partial vector loads both with the lanes past
 * the row zeroed, so no other row's input meets a zero dy (NaN and Inf stay where they are). */
#define FENTRY(r)                                                                                  \
  if (kr > r) {                                                                                    \
    __m512 xv = LOAD(xb + o##r);                                                                   \
    __asm__("" : "+v"(xv)); /* one load, not one folded into each multiply-add */                  \
    a0##r = _mm512_fmadd_ps(d0, xv, a0##r);                                                        \
    if (mr > 1) a1##r = _mm512_fmadd_ps(d1, xv, a1##r);                                            \
    if (mr > 2) a2##r = _mm512_fmadd_ps(d2, xv, a2##r);                                            \
    if (mr > 3) a3##r = _mm512_fmadd_ps(d3, xv, a3##r);                                            \
  }
#define FSTEP                                                                                      \
  {                                                                                                \
    const __m512 d0 = LOAD(dr), d1 = mr > 1 ? LOAD(dr + c1) : d0,                                  \
                 d2 = mr > 2 ? LOAD(dr + c2) : d0, d3 = mr > 3 ? LOAD(dr + c3) : d0;               \
    FENTRY(0) FENTRY(1) FENTRY(2) FENTRY(3) FENTRY(4) FENTRY(5)                                    \
  }
#define FADD(m)                                                                                    \
  if (mr > m) {                                                                                    \
    t->dw[m][0] += _mm512_reduce_add_ps(a##m##0);                                                  \
    if (kr > 1) t->dw[m][1] += _mm512_reduce_add_ps(a##m##1);                                      \
    if (kr > 2) t->dw[m][2] += _mm512_reduce_add_ps(a##m##2);                                      \
    if (kr > 3) t->dw[m][3] += _mm512_reduce_add_ps(a##m##3);                                      \
    if (kr > 4) t->dw[m][4] += _mm512_reduce_add_ps(a##m##4);                                      \
    if (kr > 5) t->dw[m][5] += _mm512_reduce_add_ps(a##m##5);                                      \
  }
#define FZERO(m)                                                                                   \
  a##m##0 = _mm512_setzero_ps(), a##m##1 = a##m##0, a##m##2 = a##m##0, a##m##3 = a##m##0,          \
  a##m##4 = a##m##0, a##m##5 = a##m##0

INLINE AVX512 void ftile_body(const int mr, const int kr, const gp_ftile *t) {
  __m512 FZERO(0), FZERO(1), FZERO(2), FZERO(3);
  const int64_t full = t->ow / VW * VW, rest = t->ow - full;
  const __mmask16 mask = (__mmask16)((1u << rest) - 1u);
  /* Down the columns of 16 pixels: the inner loop runs over the rows. */
  const int64_t o0 = 0, o1 = t->xo[1], o2 = t->xo[2], o3 = t->xo[3], o4 = t->xo[4], o5 = t->xo[5],
                c1 = t->ohw, c2 = 2 * t->ohw, c3 = 3 * t->ohw;
  for (int64_t s = 0; s < t->ns; s++)
    for (int64_t ox = 0; ox < t->ow; ox += VW) {
      const float *dr = t->dy + s * t->dy_stride + ox, *xb = t->x + s * t->x_stride + ox;
      if (ox < full) {
#define LOAD(p) _mm512_loadu_ps(p)
        for (int64_t oy = 0; oy < t->oh; oy++, dr += t->ow, xb += t->pw)
          FSTEP
#undef LOAD
      } else {
#define LOAD(p) _mm512_maskz_loadu_ps(mask, p)
        for (int64_t oy = 0; oy < t->oh; oy++, dr += t->ow, xb += t->pw)
          FSTEP
#undef LOAD
      }
    }
  FADD(0) FADD(1) FADD(2) FADD(3)
}

#define FTILE(mr, kr)                                                                              \
  AVX512 static void ftile_##mr##_##kr(const gp_ftile *t) {                                        \
    ftile_body(mr, kr, t);                                                                         \
  }
#define FTILES(mr) FTILE(mr, 1) FTILE(mr, 2) FTILE(mr, 3) FTILE(mr, 4) FTILE(mr, 5) FTILE(mr, 6)
FTILES(1)
FTILES(2)
FTILES(3)
FTILES(4)
#define FROWFNS(mr)                                                                                \
  { ftile_##mr##_1, ftile_##mr##_2, ftile_##mr##_3, ftile_##mr##_4, ftile_##mr##_5, ftile_##mr##_6 }
static const gp_ftile_fn ftiles[GP_DC_FMRMAX][GP_DC_FKR] = {FROWFNS(1), FROWFNS(2), FROWFNS(3),
                                                            FROWFNS(4)};

gp_ftile_fn gp_dc512_ftile(int mr, int kr) {
  return ftiles[mr - 1][kr - 1];
}

#else

int gp_dc512_available(void) {
  return 0;
}
gp_dtile_fn gp_dc512_tile(int mr, int nv) {
  (void)mr, (void)nv;
  return NULL;
}
gp_ftile_fn gp_dc512_ftile(int mr, int kr) {
  (void)mr, (void)kr;
  return NULL;
}

#endif
