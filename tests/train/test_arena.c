/* core/arena.c on the CPU backend, its allocations counted: the chunks of a first step become
 * one chunk at the reset, and steps that stay within it allocate nothing; an arena whose steps
 * vary in size (a new high after the first coalescing) is re-planned with 1/16 to spare, so
 * the next slightly larger step does not re-map it again; the spare never passes the limit;
 * and peak stays the bytes really used. */
#include <stdio.h>

#include "core/arena.h"
#include "tests/check.h"

static int failures, passes;
static int allocs;
static gp_status (*cpu_alloc)(gp_backend *, size_t, void **);

static gp_status counted_alloc(gp_backend *be, size_t bytes, void **out) {
  allocs++;
  return cpu_alloc(be, bytes, out);
}

/* One step: n allocations of `each` bytes, then the reset. Returns the backend allocations it
 * made (its own and the reset's). */
static int step(gp_arena *a, int n, size_t each) {
  const int before = allocs;
  void *p;
  for (int i = 0; i < n; i++)
    CHECK(gp_arena_alloc(a, each, &p) == GP_OK, "alloc %d of %zu bytes", i, each);
  CHECK(gp_arena_reset(a) == GP_OK, "reset");
  return allocs - before;
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) return 1;
  cpu_alloc = be->alloc;
  be->alloc = counted_alloc;
  enum { MB = 1 << 20 };

  gp_arena a;
  gp_arena_init(&a, be, 0);
  CHECK(step(&a, 8, MB) == 9, "the first step: 8 chunks, then one at the reset");
  CHECK(step(&a, 8, MB) == 0 && step(&a, 4, MB) == 0, "the same or less: nothing allocated");
  CHECK(step(&a, 8, MB + 4096) == 2, "a new high: a chunk for the overflow, one at the reset");
  CHECK(a.peak == 8 * (size_t)(MB + 4096), "peak is what was used: %zu", a.peak);
  CHECK(step(&a, 8, MB + 3 * 4096) == 0 && step(&a, 8, MB + MB / 20) == 0,
        "the second re-plan holds 1/16 more: a slightly larger step fits");
  CHECK(a.peak == 8 * (size_t)((MB + MB / 20 + 63) & ~63), "peak is still what was used: %zu",
        a.peak);
  gp_arena_free(&a);

  /* with a limit just above the peak, the spare stops at the limit */
  const size_t limit = 8 * (size_t)MB + 3 * 4096;
  gp_arena_init(&a, be, limit);
  CHECK(step(&a, 8, MB) == 9 && step(&a, 8, MB + 128) == 2, "first and second plan");
  CHECK(step(&a, 8, MB + 3 * 4096 / 8) == 0, "up to the limit fits without a new chunk");
  void *p;
  CHECK(gp_arena_alloc(&a, limit + 1, &p) == GP_ERR_FULL, "past the limit: GP_ERR_FULL");
  gp_arena_free(&a);

  be->alloc = cpu_alloc;
  be->destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
