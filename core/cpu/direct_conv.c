/* Direct convolution for stride 1 in fp32 on x86-64 with AVX2 and FMA: no column matrix.
 *
 * im2col + GEMM (gemm_conv.c) writes a column matrix kh*kw times the input's size, and
 * OpenBLAS then copies it again into its packed panels; with few channels (16 or 32: each
 * column element feeds only that many outputs) those copies cost as much as the GEMM. Here
 * each sample is copied once into a zero-padded buffer; with stride 1 the input under a
 * kernel tap for 8 consecutive output pixels of a row is then 8 consecutive floats of that
 * buffer, so a register tile of 6 output channels x 16 output pixels reads its "columns"
 * straight from it (one unaligned load per tap and vector) and its weights from a copy packed
 * 6 channels wide (one broadcast per tap and channel): 12 fused multiply-adds per 2 loads of
 * input and 6 of weights.
 *
 * A tile's 16 pixels are two vectors of 8 in raster order over (row, 8-pixel step): both in
 * one row when it is 16 wide or more, two rows when it is 8. A vector that runs past its
 * row's end computes lanes nobody stores (they read the next padded row, or the 8 floats of
 * slack after the buffer). Every output element is one sum over (channel, tap) in the same
 * order, whatever the batch, chunking or thread count.
 *
 * Backward-data with stride 1 runs here too, as the forward convolution of dy with the
 * filters transposed and flipped (the same identity gemm_conv.c uses), packed from w
 * directly. Used only in fp32 (bf16 mode rounds the GEMM operands; gemm_conv.c keeps that)
 * and where it is faster: see gp_cpu_direct_conv_ok. With AVX-512F, rows wider than 8 run
 * direct_conv512.c's tiles (vectors of 16) under this same driver. GP_CPU_DIRECT=0 turns the
 * direct path off, GP_CPU_DIRECT=avx2 keeps it to the AVX2 tiles. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/env.h"
#include "core/cpu/direct_conv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_DIRECT 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#else
#define HAVE_DIRECT 0
#endif

#define MR GP_DC_MR
#define VW 8     /* floats per AVX2 vector */
#define NV 2     /* AVX2 vectors per tile */
#define SPAN 8   /* vectors per band (forward) */
#define SLACK 16 /* floats after a padded sample that a vector past its row's end may read */

typedef struct dconv {
  const gp_conv2d_desc *d;
  int64_t cg, kg, ckk, ncob;  /* channels per group in and out, taps x channels, channel blocks */
  int64_t pw_, plane;         /* padded row and plane */
  int64_t per_worker;         /* floats of one worker's padded sample */
  int vw, nv;                 /* floats per vector, vectors per tile */
  int64_t vrow, nvec;         /* vectors per output row and per output plane */
  int64_t parts;              /* units of work per sample */
  const float *x, *bias, *wp; /* wp: packed weights [groups][ncob][ckk][MR] */
  const int64_t *koff;        /* per (channel, tap): its offset in the padded sample */
  float *y, *pad;
  int64_t *padded; /* per worker: the sample in its pad buffer in this call, -1 for none */
  gp_dtile_fn tile[GP_DC_NVMAX][MR]; /* by vectors and channels, less one */
} dconv;

/* -1 until the first call: then the widest tiles this process uses (GP_CPU_DIRECT_AVX512,
 * _AVX2, or 0: the direct path is off), from what the CPU has and GP_CPU_DIRECT ("0": off,
 * "avx2": not AVX-512), unless gp_cpu_direct_conv_set said otherwise. */
static _Atomic int direct_state = -1;

static int cpu_direct_level(void) {
#if HAVE_DIRECT
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  return gp_dc512_available() ? GP_CPU_DIRECT_AVX512 : GP_CPU_DIRECT_AVX2;
#else
  return 0;
#endif
}

int gp_cpu_direct_conv_set(int level) {
  const int cpu = cpu_direct_level();
  direct_state = level < cpu ? (level > 0 ? level : 0) : cpu;
  return direct_state;
}

static int direct_level(void) {
  if (direct_state < 0) {
    _Static_assert(GP_CPU_DIRECT_AVX2 == 1 && GP_CPU_DIRECT_AVX512 == 2,
                   "GP_CPU_DIRECT's words 0, avx2, avx512 are read as the levels 0, 1, 2");
    gp_cpu_direct_conv_set(gp_env_get(GP_ENV_CPU_DIRECT, GP_CPU_DIRECT_AVX512));
  }
  return direct_state;
}

int gp_cpu_direct_conv_ok(const gp_backend *be, const gp_conv2d_desc *d, int filter) {
#if HAVE_DIRECT
  if (!direct_level() || be->precision != GP_PREC_FP32 || d->sh != 1 || d->sw != 1) return 0;
  /* Where it is faster than gemm_conv.c, measured with bench/conv_throughput.c on the 2-core
   * Zen 2 VM (AVX2 tiles): not 1x1 kernels (a plain GEMM there), not fewer than 4 output channels
   * per group (depthwise), not rows that waste a quarter of the lanes or more, not a few tiles in
   * all (their set-up dominates), and no forward over fewer than 16 (channel, tap) pairs (the first
   * layer of a grey-scale image: its time goes to storing). */
  const int64_t kg = d->k / d->groups, vrow = (d->ow + VW - 1) / VW;
  const int64_t ckk = d->c / d->groups * d->kh * d->kw;
  if (d->kh * d->kw == 1 || kg < 4 || d->ow * 4 < vrow * VW * 3) return 0;
  if (d->n * d->oh * vrow < 32) return 0;
  /* On a CPU with AVX-512, OpenBLAS's GEMM has it too: rows of 8 or fewer (AVX2 tiles) were
   * as fast through GEMM forward and 0.73x backward-filter, on the 2-core Sapphire Rapids VM */
  if (direct_level() >= GP_CPU_DIRECT_AVX512 && d->ow <= VW) return 0;
  return filter || ckk >= 16;
#else
  (void)be;
  (void)d;
  (void)filter;
  (void)direct_level;
  return 0;
#endif
}

#if HAVE_DIRECT

/* Vectors of 16 wherever the process allows them: gp_cpu_direct_conv_ok has sent rows of 8
 * or fewer to the GEMM then, so the choice depends on the CPU (and GP_CPU_DIRECT) alone. */
static int wide(void) {
  return direct_level() >= GP_CPU_DIRECT_AVX512;
}

/* Output channel m of the tile, vector v, plus the bias, to its place. */
static inline __attribute__((always_inline)) AVX2 void store(const gp_dtile *t, int m, int v,
                                                             __m256 r) {
  if (t->bias) r = _mm256_add_ps(r, _mm256_set1_ps(t->bias[m]));
  float *dst = t->dst[v] + m * t->ohw;
  if (t->valid[v] == VW) {
    _mm256_storeu_ps(dst, r);
  } else {
    float tmp[VW];
    _mm256_storeu_ps(tmp, r);
    memcpy(dst, tmp, (size_t)t->valid[v] * sizeof(float));
  }
}

/* The accumulators are named variables, not an array: GCC kept an array's elements in
 * registers but also stored them to the stack on every iteration. */
#define ROW(i)                                                                                     \
  if (mr > i) {                                                                                    \
    const __m256 a = _mm256_broadcast_ss(w + i);                                                   \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                                     \
    if (nv > 1) c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);                                         \
  }
#define STORE(i)                                                                                   \
  if (mr > i) {                                                                                    \
    store(t, i, 0, c##i##0);                                                                       \
    if (nv > 1) store(t, i, 1, c##i##1);                                                           \
  }

static inline __attribute__((always_inline)) AVX2 void tile_body(const int mr, const int nv,
                                                                 const gp_dtile *t) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *w = t->w, *s0 = t->src[0], *s1 = t->src[nv > 1 ? 1 : 0];
  const int64_t *koff = t->koff, ckk = t->ckk;
  for (int64_t k = 0; k < ckk; k++, w += MR) {
    const int64_t o = koff[k];
    const __m256 b0 = _mm256_loadu_ps(s0 + o);
    const __m256 b1 = nv > 1 ? _mm256_loadu_ps(s1 + o) : b0;
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
  }
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

#define TILE(mr, nv)                                                                               \
  AVX2 static void tile_##mr##_##nv(const gp_dtile *t) {                                           \
    tile_body(mr, nv, t);                                                                          \
  }
TILE(1, 1)
TILE(2, 1)
TILE(3, 1)
TILE(4, 1)
TILE(5, 1)
TILE(6, 1)
TILE(1, 2)
TILE(2, 2)
TILE(3, 2)
TILE(4, 2)
TILE(5, 2)
TILE(6, 2)

static const gp_dtile_fn tiles[NV][MR] = {
    {tile_1_1, tile_2_1, tile_3_1, tile_4_1, tile_5_1, tile_6_1},
    {tile_1_2, tile_2_2, tile_3_2, tile_4_2, tile_5_2, tile_6_2}};

/* Lanes [0, n) of a vector, 0 <= n <= 8. */
static inline __attribute__((always_inline)) AVX2 __m256i lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n floats of src to dst, or zeros where src is NULL, in vectors: a row is a few dozen
 * floats, where memcpy and memset cost a call each (three a row). The empty asm hides the
 * vector from GCC, which would turn the loop back into those calls. Masked loads read
 * nothing past src + n. */
static inline __attribute__((always_inline)) AVX2 void put(float *dst, const float *src,
                                                           int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    __m256 v = src ? _mm256_loadu_ps(src + i) : _mm256_setzero_ps();
    __asm__("" : "+x"(v));
    _mm256_storeu_ps(dst + i, v);
  }
  if (i < n) {
    const __m256i m = lanes(n - i);
    _mm256_maskstore_ps(dst + i, m, src ? _mm256_maskload_ps(src + i, m) : _mm256_setzero_ps());
  }
}

/* Sample xs (all channels) into the zero-padded planes at pad, and the slack after them.
 * A row's right padding and the next row's left one are one run of zeros. */
AVX2 static void pad_sample(const dconv *j, const float *restrict xs, float *restrict pad) {
  const gp_conv2d_desc *d = j->d;
  const int64_t pw = j->pw_, top = d->ph * pw;
  for (int64_t c = 0; c < d->c; c++) {
    float *p = pad + c * j->plane;
    const float *src = xs + c * d->h * d->w;
    put(p, NULL, top + d->pw);
    for (int64_t r = 0; r < d->h; r++) {
      float *row = p + top + r * pw + d->pw;
      put(row, src + r * d->w, d->w);
      put(row + d->w, NULL, r + 1 < d->h ? 2 * d->pw : d->pw + top);
    }
  }
  put(pad + d->c * j->plane, NULL, SLACK);
}

/* Units of work: whole samples, or with fewer samples than pieces (team.c), parts of one
 * (runs of bands); a worker pads a sample unless its pad buffer holds it already (its unit
 * before, in this piece or its last one, was of the same sample). Padding the sample again
 * for each piece cost 4% of balanced-cnn's step at 4-sample micro-batches on 2 threads. */
static gp_status run_units(void *ctx, int64_t lo, int64_t hi, int worker) {
  const dconv *j = ctx;
  const gp_conv2d_desc *d = j->d;
  const int64_t ohw = d->oh * d->ow, nb = (j->nvec + SPAN - 1) / SPAN;
  float *pad = j->pad + worker * j->per_worker;
  for (int64_t u = lo; u < hi; u++) {
    const int64_t s = u / j->parts, part = u % j->parts;
    if (j->padded[worker] != s) {
      pad_sample(j, j->x + s * d->c * d->h * d->w, pad);
      j->padded[worker] = s;
    }
    const int64_t b0 = nb * part / j->parts, b1 = nb * (part + 1) / j->parts;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      const float *pg = pad + grp * j->cg * j->plane;
      float *yg = j->y + (s * d->k + grp * j->kg) * ohw;
      /* A band of tiles at a time, every channel block over it: the band's input rows stay
       * in L1 across the blocks, and a block's weights across the band's tiles. */
      for (int64_t band = b0; band < b1; band++) {
        const int64_t p0 = band * SPAN, p1 = p0 + SPAN < j->nvec ? p0 + SPAN : j->nvec;
        for (int64_t b = 0; b < j->ncob; b++) {
          const int64_t co = b * MR;
          const int mr = j->kg - co < MR ? (int)(j->kg - co) : MR;
          for (int64_t p = p0; p < p1; p += j->nv) {
            gp_dtile t = {.ckk = j->ckk, .koff = j->koff, .ohw = ohw};
            const int nv = p1 - p < j->nv ? (int)(p1 - p) : j->nv;
            for (int v = 0; v < nv; v++) {
              const int64_t oy = (p + v) / j->vrow, ox = (p + v) % j->vrow * j->vw;
              t.src[v] = pg + oy * j->pw_ + ox;
              t.dst[v] = yg + co * ohw + oy * d->ow + ox;
              t.valid[v] = d->ow - ox < j->vw ? (int)(d->ow - ox) : j->vw;
            }
            t.w = j->wp + ((grp * j->ncob + b) * j->ckk) * MR;
            t.bias = j->bias ? j->bias + grp * j->kg + co : NULL;
            j->tile[nv - 1][mr - 1](&t);
          }
        }
      }
    }
  }
  return GP_OK;
}

typedef struct pack_job {
  const dconv *j;
  const float *w;
  int transposed;
  float *wp;
} pack_job;

/* Packs the weights of input channels [c0, c1) of every group (w as given, or for
 * `transposed`: the original convolution's filters, [cg][kg'][kh][kw] per group, transposed
 * and flipped) 6 channels wide. */
static gp_status pack_part(void *ctx, int64_t c0, int64_t c1, int worker) {
  (void)worker;
  const pack_job *p = ctx;
  const dconv *j = p->j;
  const gp_conv2d_desc *d = j->d;
  const int64_t kk = d->kh * d->kw, k0 = c0 * kk, k1 = c1 * kk;
  for (int64_t grp = 0; grp < d->groups; grp++)
    for (int64_t b = 0; b < j->ncob; b++) {
      float *blk = p->wp + (grp * j->ncob + b) * j->ckk * MR;
      for (int64_t m = 0; m < MR; m++) {
        const int64_t co = b * MR + m;
        if (co >= j->kg) {
          for (int64_t k = k0; k < k1; k++)
            blk[k * MR + m] = 0.0f;
        } else if (!p->transposed) {
          const float *src = p->w + (grp * j->kg + co) * j->ckk;
          for (int64_t k = k0; k < k1; k++)
            blk[k * MR + m] = src[k];
        } else { /* this conv's input channel ci is the original's output channel */
          for (int64_t ci = c0, k = k0; ci < c1; ci++) {
            const float *src = p->w + ((grp * j->cg + ci) * j->kg + co) * kk + kk - 1;
            for (int64_t tap = 0; tap < kk; tap++, k++)
              blk[k * MR + m] = src[-tap];
          }
        }
      }
    }
  return GP_OK;
}

/* Floats of packed weights per part when the packing is split over the threads: a 4-sample
 * micro-batch's convolution on 16 threads computes for ~7 us, and packing its 32x32x3x3
 * weights on one thread took 2.6 us (4.7 transposed) while the others waited. */
#define PACK_GRAIN 1024

/* The sizes of d that both directions use, with vectors of 16 floats when `wide`, else 8. */
static void geometry(dconv *j, const gp_conv2d_desc *d, int wide) {
  j->d = d;
  j->cg = d->c / d->groups;
  j->kg = d->k / d->groups;
  j->ckk = j->cg * d->kh * d->kw;
  j->ncob = (j->kg + MR - 1) / MR;
  j->pw_ = d->w + 2 * d->pw;
  j->plane = (d->h + 2 * d->ph) * j->pw_;
  j->per_worker = (d->c * j->plane + SLACK + 15) & ~(int64_t)15;
  j->vw = wide ? 2 * VW : VW;
  j->nv = wide ? GP_DC_NVMAX : NV;
  j->vrow = (d->ow + j->vw - 1) / j->vw;
  j->nvec = d->oh * j->vrow;
}

/* Each (channel, tap)'s offset in a padded sample, into koff (ckk entries). */
static void fill_offsets(dconv *j, int64_t *koff) {
  const gp_conv2d_desc *d = j->d;
  for (int64_t ci = 0, k = 0; ci < j->cg; ci++)
    for (int64_t a = 0; a < d->kh; a++)
      for (int64_t b = 0; b < d->kw; b++, k++)
        koff[k] = ci * j->plane + a * d->dh * j->pw_ + b * d->dw;
  j->koff = koff;
}

static gp_status direct_run(gp_backend *be, const gp_conv2d_desc *d, const float *x, const float *w,
                            int transposed, const float *bias, float *y) {
  if (d->n == 0) return GP_OK;
  dconv j = {.x = x, .bias = bias, .y = y};
  geometry(&j, d, wide());
  for (int nv = 1; nv <= j.nv; nv++)
    for (int mr = 1; mr <= MR; mr++)
      j.tile[nv - 1][mr - 1] = j.nv > NV ? gp_dc512_tile(mr, nv) : tiles[nv - 1][mr - 1];
  const int64_t nb = (j.nvec + SPAN - 1) / SPAN;
  /* enough units for every worker's pieces (team.c): a 4-sample micro-batch on 2 threads is
   * 8 half samples, 4 pieces a share */
  const int64_t want = gp_cpu_max_parts(be);
  j.parts = d->n >= want ? 1 : (want + d->n - 1) / d->n;
  if (j.parts > nb) j.parts = nb;
  const int workers = gp_cpu_workers(be, d->n * j.parts);
  const int64_t wfloats = (d->groups * j.ncob * j.ckk * MR + 15) & ~(int64_t)15;
  const int64_t kfloats = (j.ckk * 2 + 15) & ~(int64_t)15;   /* int64 offsets, as floats */
  const int64_t sfloats = (workers * 2 + 15) & ~(int64_t)15; /* int64 sample numbers */
  float *buf = NULL;
  GP_TRY(gp_cpu_scratch(
      be, (size_t)(wfloats + kfloats + sfloats + j.per_worker * workers) * sizeof(float),
      (void **)&buf));
  float *wp = buf;
  int64_t *koff = (int64_t *)(buf + wfloats);
  j.padded = (int64_t *)(buf + wfloats + kfloats);
  for (int w = 0; w < workers; w++)
    j.padded[w] = -1;
  j.pad = buf + wfloats + kfloats + sfloats;
  pack_job pj = {&j, w, transposed, wp};
  const int64_t per_channel = d->groups * j.ncob * MR * d->kh * d->kw;
  GP_TRY(gp_cpu_parallel_for(be, j.cg, PACK_GRAIN / per_channel + 1, pack_part, &pj));
  fill_offsets(&j, koff);
  j.wp = wp;
  return gp_cpu_parallel(be, d->n * j.parts, run_units, &j);
}

/* ---- backward-filter ----
 * dW[co][ci, tap] += sum over samples and output pixels of dy[co][pixel] * xpad[ci][pixel +
 * tap's offset]: a tile of 2 output channels (4 with AVX-512) x 6 (channel, tap) entries keeps
 * 12 (24) vector sums along the pixels; each step loads a vector of dy for each of its channels
 * and of the padded input for each entry (mostly the same cache lines: a row's taps are 1
 * float apart). Workers own tiles, so each dW entry is summed by one thread in one order. A
 * tile visits samples in groups of at least 128 vectors, then adds its sums to dW: the order of
 * the additions depends on the shape (and the vector width) alone. A row's last, partial vector
 * masks both operands, so no lane past the row (another row's input) meets a zero dy: NaN and
 * Inf stay where they were. Consecutive tiles share their output channels (and walk the entries),
 * so a visit's dy stays in L1 from one tile to the next: 2-7% faster than the other way round on
 * the ResNet-56 and Fashion-CNN shapes (2 threads, alternated, mean of 40), the same bits. */

#define FMR 2 /* output channels per AVX2 filter tile */
#define FKR GP_DC_FKR
#define VISIT 128 /* vectors of each operand per visit of a tile */

typedef struct dfilter {
  dconv c;
  const float *dy;
  float *dw;
  int fmr;                  /* output channels per tile */
  int64_t nmb, nkb, ntiles; /* channel and entry blocks per group; tiles in all */
  int64_t s0, ns;           /* the chunk of samples padded at c.pad */
  int64_t group, band;      /* a tile's visit: samples, and rows of each */
  gp_ftile_fn tile[GP_DC_FMRMAX][FKR];
} dfilter;

#define FSTEP(LOAD)                                                                                \
  {                                                                                                \
    const __m256 d0 = LOAD(dr), d1 = mr > 1 ? LOAD(dr + c1) : d0;                                  \
    FENTRY(0, LOAD);                                                                               \
    FENTRY(1, LOAD);                                                                               \
    FENTRY(2, LOAD);                                                                               \
    FENTRY(3, LOAD);                                                                               \
    FENTRY(4, LOAD);                                                                               \
    FENTRY(5, LOAD);                                                                               \
  }
#define FENTRY(r, LOAD)                                                                            \
  if (kr > r) {                                                                                    \
    __m256 xv = LOAD(xb + o##r);                                                                   \
    __asm__("" : "+x"(xv)); /* one load, not one folded into each multiply-add */                  \
    a0##r = _mm256_fmadd_ps(d0, xv, a0##r);                                                        \
    if (mr > 1) a1##r = _mm256_fmadd_ps(d1, xv, a1##r);                                            \
  }
#define LOADU(p) _mm256_loadu_ps(p)
#define LOADM(p) _mm256_maskload_ps(p, mask)

static inline __attribute__((always_inline)) AVX2 float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#define FADD(m, r)                                                                                 \
  if (mr > m && kr > r) t->dw[m][r] += hsum(a##m##r);

static inline __attribute__((always_inline)) AVX2 void ftile_body(const int mr, const int kr,
                                                                  const gp_ftile *t) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a04 = a00, a05 = a00,
         a10 = a00, a11 = a00, a12 = a00, a13 = a00, a14 = a00, a15 = a00;
  const int64_t full = t->ow / VW * VW, rest = t->ow - full;
  const __m256i mask = lanes(rest);
  /* Down the columns of 8 pixels: the inner loop runs over the rows (8 to 32 of them in
   * these networks, where a row holds 1 to 4 vectors). The entries' offsets from the first
   * are scalars, so they stay in registers. */
  const int64_t o0 = 0, o1 = t->xo[1], o2 = t->xo[2], o3 = t->xo[3], o4 = t->xo[4], o5 = t->xo[5],
                c1 = mr > 1 ? t->ohw : 0;
  for (int64_t s = 0; s < t->ns; s++)
    for (int64_t ox = 0; ox < t->ow; ox += VW) {
      const float *dr = t->dy + s * t->dy_stride + ox, *xb = t->x + s * t->x_stride + ox;
      if (ox < full) {
        for (int64_t oy = 0; oy < t->oh; oy++, dr += t->ow, xb += t->pw)
          FSTEP(LOADU)
      } else {
        for (int64_t oy = 0; oy < t->oh; oy++, dr += t->ow, xb += t->pw)
          FSTEP(LOADM)
      }
    }
  FADD(0, 0);
  FADD(0, 1);
  FADD(0, 2);
  FADD(0, 3);
  FADD(0, 4);
  FADD(0, 5);
  FADD(1, 0);
  FADD(1, 1);
  FADD(1, 2);
  FADD(1, 3);
  FADD(1, 4);
  FADD(1, 5);
}

#define FTILE(mr, kr)                                                                              \
  AVX2 static void ftile_##mr##_##kr(const gp_ftile *t) {                                          \
    ftile_body(mr, kr, t);                                                                         \
  }
FTILE(1, 1)
FTILE(1, 2)
FTILE(1, 3)
FTILE(1, 4)
FTILE(1, 5)
FTILE(1, 6)
FTILE(2, 1)
FTILE(2, 2)
FTILE(2, 3)
FTILE(2, 4)
FTILE(2, 5)
FTILE(2, 6)

static const gp_ftile_fn ftiles[FMR][FKR] = {
    {ftile_1_1, ftile_1_2, ftile_1_3, ftile_1_4, ftile_1_5, ftile_1_6},
    {ftile_2_1, ftile_2_2, ftile_2_3, ftile_2_4, ftile_2_5, ftile_2_6}};

static gp_status pad_chunk(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const dfilter *f = ctx;
  const gp_conv2d_desc *d = f->c.d;
  for (int64_t s = lo; s < hi; s++)
    pad_sample(&f->c, f->c.x + (f->s0 + s) * d->c * d->h * d->w, f->c.pad + s * f->c.per_worker);
  return GP_OK;
}

static gp_status filter_tiles(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const dfilter *f = ctx;
  const dconv *j = &f->c;
  const gp_conv2d_desc *d = j->d;
  const int64_t ohw = d->oh * d->ow, nmb = f->nmb;
  for (int64_t g0 = 0; g0 < f->ns; g0 += f->group)
    for (int64_t r0 = 0; r0 < d->oh; r0 += f->band)
      for (int64_t i = lo; i < hi; i++) {
        const int64_t grp = i / (nmb * f->nkb), cb = i / f->nkb % nmb, kb = i % f->nkb;
        const int64_t co = cb * f->fmr, k0 = kb * FKR;
        const int mr = j->kg - co < f->fmr ? (int)(j->kg - co) : f->fmr;
        const int kr = j->ckk - k0 < FKR ? (int)(j->ckk - k0) : FKR;
        gp_ftile t = {.ns = f->ns - g0 < f->group ? f->ns - g0 : f->group,
                      .dy_stride = d->k * ohw,
                      .x_stride = j->per_worker,
                      .oh = d->oh - r0 < f->band ? d->oh - r0 : f->band,
                      .ow = d->ow,
                      .pw = j->pw_,
                      .ohw = ohw};
        const float *pg = j->pad + g0 * j->per_worker + grp * j->cg * j->plane + r0 * j->pw_;
        t.dy = f->dy + ((f->s0 + g0) * d->k + grp * j->kg + co) * ohw + r0 * d->ow;
        for (int m = 0; m < mr; m++)
          t.dw[m] = f->dw + (grp * j->kg + co + m) * j->ckk + k0;
        t.x = pg + j->koff[k0];
        for (int r = 0; r < kr; r++)
          t.xo[r] = j->koff[k0 + r] - j->koff[k0];
        f->tile[mr - 1][kr - 1](&t);
      }
  return GP_OK;
}

/* Samples whose padded inputs are kept at once (a multiple of the visit group). */
#define FILTER_CHUNK_BYTES ((int64_t)4 << 20)

gp_status gp_cpu_direct_conv_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                    const float *dy, float *dw) {
  if (d->n == 0) return GP_OK;
  dfilter f = {.c = {.x = x}, .dy = dy, .dw = dw};
  dconv *j = &f.c;
  geometry(j, d, wide()); /* here per_worker is the stride of the chunk's padded samples */
  f.fmr = j->vw > VW ? GP_DC_FMRMAX : FMR;
  for (int mr = 1; mr <= f.fmr; mr++)
    for (int kr = 1; kr <= FKR; kr++)
      f.tile[mr - 1][kr - 1] = j->vw > VW ? gp_dc512_ftile(mr, kr) : ftiles[mr - 1][kr - 1];
  f.group = (VISIT + j->nvec - 1) / j->nvec;
  if (f.group > d->n) f.group = d->n;
  f.band = f.group > 1 ? d->oh : (VISIT + j->vrow - 1) / j->vrow;
  int64_t chunk = FILTER_CHUNK_BYTES / (j->per_worker * (int64_t)sizeof(float));
  chunk = chunk < f.group ? f.group : chunk / f.group * f.group;
  if (chunk > d->n) chunk = d->n;
  f.nkb = (j->ckk + FKR - 1) / FKR;
  f.nmb = (j->kg + f.fmr - 1) / f.fmr;
  f.ntiles = d->groups * f.nmb * f.nkb;
  const int64_t kfloats = (j->ckk * 2 + 15) & ~(int64_t)15;
  float *buf = NULL;
  GP_TRY(
      gp_cpu_scratch(be, (size_t)(kfloats + j->per_worker * chunk) * sizeof(float), (void **)&buf));
  int64_t *koff = (int64_t *)buf;
  j->pad = buf + kfloats;
  fill_offsets(j, koff);
  for (f.s0 = 0; f.s0 < d->n; f.s0 += chunk) {
    f.ns = d->n - f.s0 < chunk ? d->n - f.s0 : chunk;
    GP_TRY(gp_cpu_parallel(be, f.ns, pad_chunk, &f));
    GP_TRY(gp_cpu_parallel(be, f.ntiles, filter_tiles, &f));
  }
  return GP_OK;
}

gp_status gp_cpu_direct_conv_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                     const float *w, const float *bias, float *y) {
  return direct_run(be, d, x, w, 0, bias, y);
}

gp_status gp_cpu_direct_conv_transposed(gp_backend *be, const gp_conv2d_desc *t, const float *dy,
                                        const float *w, float *dx) {
  return direct_run(be, t, dy, w, 1, NULL, dx);
}

#else

gp_status gp_cpu_direct_conv_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                     const float *w, const float *bias, float *y) {
  (void)be, (void)d, (void)x, (void)w, (void)bias, (void)y;
  return GP_ERR(GP_ERR_RUNTIME, "conv2d: direct convolution is not built on this platform");
}

gp_status gp_cpu_direct_conv_transposed(gp_backend *be, const gp_conv2d_desc *t, const float *dy,
                                        const float *w, float *dx) {
  (void)be, (void)t, (void)dy, (void)w, (void)dx;
  return GP_ERR(GP_ERR_RUNTIME, "conv2d: direct convolution is not built on this platform");
}

gp_status gp_cpu_direct_conv_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                    const float *dy, float *dw) {
  (void)be, (void)d, (void)x, (void)dy, (void)dw;
  return GP_ERR(GP_ERR_RUNTIME, "conv2d: direct convolution is not built on this platform");
}

#endif
