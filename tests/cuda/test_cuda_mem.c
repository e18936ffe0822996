/* The memory count of a backend instance (gp_backend.mem_used, mem_peak, mem_limit): every
 * alloc and scratch adds its bytes, free takes them back, the peak is the high-water mark, and
 * past the limit alloc refuses with GP_ERR_FULL and changes nothing. Checked on the CPU
 * backend (the reference) and, where there is a GPU, on CUDA, whose free looks the size up in
 * a table of its own: thousands of allocations freed in a scrambled order must come back to
 * the same count, and what it counts must match what the device says it lost. Exits 77 after
 * the CPU checks when there is no GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cuda/cuda.h"
#include "core/cuda/probe.h"
#include "tests/support/check.h"

static int failures, passes;

#define MIB ((size_t)1 << 20)
#define MANY 3000

/* cudaMalloc cannot give 0 bytes: CUDA rounds requests below 256 up to it. */
static size_t counted(const gp_backend *be, size_t bytes) {
  return be->device >= 0 && bytes < 256 ? 256 : bytes;
}

static void check_counts(gp_backend *be) {
  const char *nm = be->name;
  be->mem_peak = be->mem_used;
  const size_t base = be->mem_used;
  void *a = NULL, *b = NULL, *z = NULL, *s = NULL;
  CHECK(be->alloc(be, 1000, &a) == GP_OK && be->mem_used == base + counted(be, 1000),
        "%s: 1000 bytes: used %zu, base %zu", nm, be->mem_used, base);
  CHECK(be->alloc(be, 0, &z) == GP_OK && z &&
            be->mem_used == base + counted(be, 1000) + counted(be, 0),
        "%s: 0 bytes: used %zu", nm, be->mem_used);
  size_t before = be->mem_used;
  CHECK(be->alloc(be, 3 * MIB, &b) == GP_OK && be->mem_used == before + 3 * MIB &&
            be->mem_peak == be->mem_used,
        "%s: 3 MiB: used %zu peak %zu", nm, be->mem_used, be->mem_peak);
  size_t top = be->mem_peak;
  be->free(be, a);
  CHECK(be->mem_used == top - counted(be, 1000) && be->mem_peak == top,
        "%s: free: used %zu peak %zu (top %zu)", nm, be->mem_used, be->mem_peak, top);
  be->free(be, NULL);
  CHECK(be->mem_used == top - counted(be, 1000), "%s: free(NULL) changed the count", nm);

  /* scratch grows only, and is counted */
  before = be->mem_used;
  CHECK(be->scratch(be, 2 * MIB, &s) == GP_OK && be->mem_used == before + 2 * MIB,
        "%s: scratch 2 MiB: used %zu, before %zu", nm, be->mem_used, before);
  CHECK(be->scratch(be, MIB, &s) == GP_OK && be->mem_used == before + 2 * MIB,
        "%s: a smaller scratch changed the count", nm);
  CHECK(be->scratch(be, 4 * MIB, &s) == GP_OK && be->mem_used == before + 4 * MIB &&
            be->mem_peak >= before + 4 * MIB,
        "%s: scratch 4 MiB: used %zu peak %zu, before %zu", nm, be->mem_used, be->mem_peak, before);

  /* the limit: refused without a change, then what fits still fits */
  before = be->mem_used;
  size_t peak = be->mem_peak;
  be->mem_limit = before + MIB;
  void *c = NULL;
  gp_status r = be->alloc(be, 2 * MIB, &c);
  CHECK(r == GP_ERR_FULL && strstr(gp_error_message(), "memory limit of") &&
            be->mem_used == before && be->mem_peak == peak,
        "%s: over the limit: status %d, used %zu (before %zu)", nm, (int)r, be->mem_used, before);
  r = be->alloc(be, SIZE_MAX / 2, &c);
  CHECK(r == GP_ERR_FULL && be->mem_used == before, "%s: absurd size: status %d", nm, (int)r);
  r = be->scratch(be, 8 * MIB, &c);
  CHECK(r == GP_ERR_FULL && be->mem_used <= before, "%s: scratch past the limit: status %d", nm,
        (int)r);
  CHECK(be->alloc(be, MIB / 2, &c) == GP_OK && be->mem_used <= be->mem_limit,
        "%s: under the limit: used %zu, limit %zu", nm, be->mem_used, be->mem_limit);
  be->free(be, c);
  be->mem_limit = 0;

  /* many live blocks, freed in a scrambled order */
  before = be->mem_used;
  static void *p[MANY];
  size_t total = 0;
  int ok = 1;
  for (int i = 0; i < MANY && ok; i++) {
    size_t n = (size_t)(i % 97) * 64 + (size_t)(i % 3);
    ok = be->alloc(be, n, &p[i]) == GP_OK;
    total += counted(be, n);
  }
  CHECK(ok && be->mem_used == before + total, "%s: %d blocks: used %zu, want %zu", nm, MANY,
        be->mem_used, before + total);
  for (int i = 0; i < MANY; i++) { /* 1777 is prime to MANY: every block once */
    int j = (int)(((int64_t)i * 1777) % MANY);
    be->free(be, p[j]);
  }
  CHECK(be->mem_used == before, "%s: after freeing them: used %zu, want %zu", nm, be->mem_used,
        before);
  be->free(be, b);
  be->free(be, z);
}

/* CUDA only: ops that keep a private workspace count it, and the count is real memory. */
static void check_cuda_device(gp_backend *be) {
  float *x = NULL;
  double sum = 0;
  CHECK(be->alloc(be, (1 << 20) * sizeof(float), (void **)&x) == GP_OK &&
            be->zero(be, x, (1 << 20) * sizeof(float)) == GP_OK,
        "cuda: a 4 MiB buffer");
  size_t before = be->mem_used;
  CHECK(be->sum(be, 1 << 20, x, &sum) == GP_OK && sum == 0 && be->mem_used > before,
        "cuda: sum's workspace is not counted (used %zu, before %zu)", be->mem_used, before);
  be->free(be, x);
  size_t free0 = 0, free1 = 0, total = 0;
  void *big = NULL;
  before = be->mem_used;
  int got = gp_cuda_mem_info(be->device, &free0, &total) == 0 &&
            be->alloc(be, 256 * MIB, &big) == GP_OK &&
            gp_cuda_mem_info(be->device, &free1, &total) == 0;
  CHECK(got && be->mem_used == before + 256 * MIB && free0 - free1 >= 256 * MIB &&
            free0 - free1 <= 258 * MIB,
        "cuda: 256 MiB counted %zu, device lost %zu", be->mem_used - before, free0 - free1);
  be->free(be, big);
}

int main(void) {
  gp_backend *cpu = NULL, *gpu = NULL;
  CHECK(gp_cpu_backend_create(1, &cpu) == GP_OK, "cpu backend");
  if (cpu) check_counts(cpu);
  gp_backend_destroy(cpu);
  int skip = gp_cuda_device_count() == 0;
  if (skip) {
    printf("no CUDA device (or a build without CUDA): the CUDA part is skipped\n");
  } else {
    CHECK(gp_cuda_backend_create(0, &gpu) == GP_OK, "cuda backend");
    if (gpu) {
      check_counts(gpu);
      check_cuda_device(gpu);
    }
    gp_backend_destroy(gpu);
  }
  printf("%d passed, %d failed\n", passes, failures);
  if (failures) return 1;
  return skip ? 77 : 0;
}
