/* Bump allocators over backend memory for activations and saved tensors. An arena grows
 * by chunks during the first step (a large allocation gets one of its own size, small ones
 * share), then is coalesced into one chunk at the first reset to the start, so later steps
 * do not allocate. peak is the measured high-water mark. */
#ifndef GP_ARENA_H
#define GP_ARENA_H

#include <stddef.h>

#include "core/backend.h"
#include "core/tensor.h"

/* Allocations below 64 KiB share chunks of this size while an arena grows, so an arena holding
 * any takes at least one: the memory estimate (core/plan/solve.c) counts one per micro-batch
 * slot. */
#define GP_ARENA_SMALL_CHUNK ((size_t)256 << 10)

typedef struct gp_arena_chunk gp_arena_chunk;

/* Bytes in use across several arenas (a stage's), with the high-water mark: the measured
 * activation memory. Updated by the arenas attached to it; not thread-safe (one stage). */
typedef struct gp_mem_meter {
  size_t live, peak;
} gp_mem_meter;

typedef struct gp_arena {
  gp_backend *be;
  gp_arena_chunk *chunks; /* newest first */
  gp_arena_chunk *small;  /* while growing: the chunk small allocations share, or NULL */
  size_t used;            /* bytes handed out since init or the last full reset */
  size_t peak;            /* high-water mark of used */
  size_t limit;           /* 0 = none; past it, alloc fails with GP_ERR_FULL */
  size_t grown;           /* bytes needed beyond the first chunk since the last full reset */
  gp_mem_meter *meter;    /* optional: also counts used bytes here */
  gp_arena_chunk *host; /* a device arena's host-side chunks (gp_arena_host_alloc), newest first */
} gp_arena;

void gp_arena_init(gp_arena *a, gp_backend *be, size_t limit);
void gp_arena_free(gp_arena *a);
gp_status gp_arena_alloc(gp_arena *a, size_t bytes, void **out); /* 64-byte aligned */
gp_status gp_arena_tensor(gp_arena *a, gp_dtype dtype, const gp_shape *shape, gp_tensor *out);
/* Memory the host reads and writes (a layer's struct of pointers kept for its backward), with
 * the lifetime of the arena's own allocations: on the CPU the arena's memory itself; on a device,
 * whose memory the host may not touch, host chunks beside it, reused in the same order at each
 * reset, so a step gets the same addresses as the one before. */
gp_status gp_arena_host_alloc(gp_arena *a, size_t bytes, void **out);
/* Back to empty; if it had to grow, re-plans one chunk big enough for what was used. */
gp_status gp_arena_reset(gp_arena *a);

/* Where an arena's next allocation goes: a replayed CUDA graph (core/exec/graphs.c) checks that
 * the arena is where it was when the graph was recorded, then moves it on to where the recorded
 * allocations left it, without making them again. */
typedef struct gp_arena_mark {
  const void *chunk, *small;
  size_t chunk_off, small_off, used, grown;
  const void *host;
  size_t host_off;
} gp_arena_mark;
void gp_arena_get_mark(const gp_arena *a, gp_arena_mark *m);
int gp_arena_mark_eq(const gp_arena_mark *x, const gp_arena_mark *y);
/* a, at a mark of the same chunks, to m (a later one: more used), peaks and meter counted. */
void gp_arena_set_mark(gp_arena *a, const gp_arena_mark *m);

#endif
