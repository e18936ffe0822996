/* The CUDA test harness: see cuda_check.h. */
#include "tests/cuda/cuda_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda.h"
#include "core/cuda/probe.h"

int cc_open(cc_ctx *c) {
  memset(c, 0, sizeof *c);
  if (gp_cuda_device_count() == 0) {
    printf("no CUDA device (or a build without CUDA): skipped\n");
    return CC_SKIP;
  }
  if (gp_cpu_backend_create(1, &c->cpu) != GP_OK) {
    printf("creating the CPU backend failed: %s\n", gp_error_message());
    return 1;
  }
  if (gp_cuda_backend_create(0, &c->gpu) != GP_OK) {
    printf("creating the CUDA backend failed: %s\n", gp_error_message());
    gp_backend_destroy(c->cpu);
    c->cpu = NULL;
    return 1;
  }
  return 0;
}

void cc_close(cc_ctx *c) {
  gp_backend_destroy(c->gpu);
  gp_backend_destroy(c->cpu);
  c->gpu = c->cpu = NULL;
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Uniform in (0, 1): 24 bits, never 0 (log-safe for Box-Muller). */
static double unit(uint64_t seed, uint64_t i) {
  return ((double)(mix(seed ^ mix(i)) >> 40) + 0.5) / 16777216.0;
}

void cc_fill_uniform(float *h, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < n; i++)
    h[i] = (float)(lo + (hi - lo) * unit(seed, (uint64_t)i));
}

void cc_fill_normal(float *h, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = 0; i < n; i++) {
    double u1 = unit(seed, 2 * (uint64_t)i), u2 = unit(seed, 2 * (uint64_t)i + 1);
    h[i] = (float)(stddev * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

void cc_fill_int(int32_t *h, int64_t n, uint64_t seed, int32_t lo, int32_t hi) {
  uint64_t span = (uint64_t)((int64_t)hi - lo);
  for (int64_t i = 0; i < n; i++)
    h[i] = span ? (int32_t)(lo + (int64_t)(mix(seed ^ mix((uint64_t)i)) % span)) : lo;
}

static void fill_sentinel(void *p, size_t bytes) {
  unsigned char pat[4];
  uint32_t s = CC_SENTINEL;
  memcpy(pat, &s, 4);
  unsigned char *q = p;
  for (size_t i = 0; i < bytes; i++)
    q[i] = pat[i % 4];
}

gp_status cc_buf_alloc(gp_backend *be, size_t bytes, const void *host, cc_buf *b) {
  memset(b, 0, sizeof *b);
  size_t total = bytes + 2 * (size_t)CC_GUARD_BYTES;
  unsigned char *init = malloc(total);
  if (!init) return GP_ERR(GP_ERR_NOMEM, "cc_buf_alloc: out of host memory");
  fill_sentinel(init, total);
  if (host && bytes) memcpy(init + CC_GUARD_BYTES, host, bytes);
  gp_status s = be->alloc(be, total, &b->base);
  if (s == GP_OK) s = be->from_host(be, b->base, init, total);
  free(init);
  if (s != GP_OK) {
    if (b->base) be->free(be, b->base);
    b->base = NULL;
    return s;
  }
  b->be = be;
  b->p = (unsigned char *)b->base + CC_GUARD_BYTES;
  b->bytes = bytes;
  return GP_OK;
}

gp_status cc_buf_upload(cc_buf *b, const void *host, size_t bytes) {
  if (bytes > b->bytes)
    return GP_ERR(GP_ERR_USAGE, "cc_buf_upload: %zu bytes > %zu", bytes, b->bytes);
  return b->be->from_host(b->be, b->p, host, bytes);
}

gp_status cc_buf_download(const cc_buf *b, void *host, size_t bytes) {
  if (bytes > b->bytes)
    return GP_ERR(GP_ERR_USAGE, "cc_buf_download: %zu bytes > %zu", bytes, b->bytes);
  return b->be->to_host(b->be, host, b->p, bytes);
}

int cc_buf_guards_ok(const cc_buf *b, const char *what) {
  unsigned char got[CC_GUARD_BYTES], want[CC_GUARD_BYTES];
  fill_sentinel(want, sizeof want);
  const unsigned char *base = b->base;
  const void *where[2] = {base, base + CC_GUARD_BYTES + b->bytes};
  for (int side = 0; side < 2; side++) {
    if (b->be->to_host(b->be, got, where[side], sizeof got) != GP_OK) {
      printf("  %s (%s): reading the guard failed: %s\n", what, b->be->name, gp_error_message());
      return 0;
    }
    if (memcmp(got, want, sizeof got) != 0) {
      printf("  %s (%s): guard bytes %s the buffer were overwritten\n", what, b->be->name,
             side ? "after" : "before");
      return 0;
    }
  }
  return 1;
}

void cc_buf_free(cc_buf *b) {
  if (b->be && b->base) b->be->free(b->be, b->base);
  memset(b, 0, sizeof *b);
}

gp_status cc_pair_alloc(cc_ctx *c, size_t bytes, const void *host, cc_pair *p) {
  memset(p, 0, sizeof *p);
  GP_TRY(cc_buf_alloc(c->cpu, bytes, host, &p->cpu));
  gp_status s = cc_buf_alloc(c->gpu, bytes, host, &p->gpu);
  if (s != GP_OK) {
    cc_buf_free(&p->cpu);
    return s;
  }
  p->bytes = bytes;
  return GP_OK;
}

gp_status cc_pair_upload(cc_pair *p, const void *host) {
  GP_TRY(cc_buf_upload(&p->cpu, host, p->bytes));
  return cc_buf_upload(&p->gpu, host, p->bytes);
}

void cc_pair_free(cc_pair *p) {
  cc_buf_free(&p->gpu);
  cc_buf_free(&p->cpu);
  p->bytes = 0;
}

/* Downloads both payloads into fresh host buffers (NULL and a message on failure). */
static int download_both(const cc_pair *p, const char *what, size_t bytes, void **ref, void **got) {
  *ref = malloc(bytes ? bytes : 1);
  *got = malloc(bytes ? bytes : 1);
  if (!*ref || !*got) {
    printf("  %s: out of host memory\n", what);
    return 0;
  }
  if (cc_buf_download(&p->cpu, *ref, bytes) != GP_OK ||
      cc_buf_download(&p->gpu, *got, bytes) != GP_OK) {
    printf("  %s: download failed: %s\n", what, gp_error_message());
    return 0;
  }
  return 1;
}

int cc_pair_compare(const cc_pair *p, const char *what, int64_t n, double tol) {
  size_t bytes = (size_t)n * sizeof(float);
  if (bytes > p->bytes) {
    printf("  %s: comparing %lld floats of a %zu-byte buffer\n", what, (long long)n, p->bytes);
    return 0;
  }
  void *ref = NULL, *got = NULL;
  int ok = download_both(p, what, bytes, &ref, &got);
  if (ok) ok = cc_compare(what, ref, got, n, tol);
  free(ref);
  free(got);
  int g1 = cc_buf_guards_ok(&p->cpu, what), g2 = cc_buf_guards_ok(&p->gpu, what);
  return ok && g1 && g2;
}

int cc_pair_equal(const cc_pair *p, const char *what) {
  void *ref = NULL, *got = NULL;
  int ok = download_both(p, what, p->bytes, &ref, &got);
  if (ok && memcmp(ref, got, p->bytes) != 0) {
    size_t i = 0;
    while (((unsigned char *)ref)[i] == ((unsigned char *)got)[i])
      i++;
    printf("  %s: differs from the CPU at byte %zu of %zu\n", what, i, p->bytes);
    ok = 0;
  }
  free(ref);
  free(got);
  int g1 = cc_buf_guards_ok(&p->cpu, what), g2 = cc_buf_guards_ok(&p->gpu, what);
  return ok && g1 && g2;
}

double cc_nmse(const float *ref, const float *got, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(ref[i]) || !isfinite(got[i])) continue;
    double d = (double)ref[i] - (double)got[i];
    num += d * d;
    den += (double)ref[i] * ref[i];
  }
  return den > 0.0 ? num / den : num;
}

static int fp_class(float v) {
  if (isnan(v)) return 1;
  if (isinf(v)) return v > 0 ? 2 : 3;
  return 0;
}

int64_t cc_nonfinite_mismatches(const float *ref, const float *got, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += fp_class(ref[i]) != fp_class(got[i]);
  return bad;
}

int cc_compare(const char *what, const float *ref, const float *got, int64_t n, double tol) {
  double e = cc_nmse(ref, got, n);
  int64_t bad = cc_nonfinite_mismatches(ref, got, n);
  if (e <= tol && bad == 0) return 1;
  int64_t first = -1;
  for (int64_t i = 0; i < n && first < 0; i++)
    if (fp_class(ref[i]) != fp_class(got[i]) ||
        (fp_class(ref[i]) == 0 && ref[i] != got[i] &&
         fabs((double)ref[i] - got[i]) > 1e-3 * (fabs((double)ref[i]) + 1e-6)))
      first = i;
  printf("  %s: nmse %.3g (tol %.3g), %lld NaN/Inf mismatches of %lld", what, e, tol,
         (long long)bad, (long long)n);
  if (first >= 0)
    printf("; first at %lld: cpu %.9g cuda %.9g", (long long)first, (double)ref[first],
           (double)got[first]);
  printf("\n");
  return 0;
}
