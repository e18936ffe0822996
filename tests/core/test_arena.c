/* gp_arena_host_alloc: on the CPU the arena's own memory; on a device (here the CPU backend
 * marked as device 0, whose memory the test only compares, never lets the host treat as host
 * memory) separate host chunks that reset reuses in order, so a step gets the same addresses as
 * the one before (what a replayed CUDA graph relies on), and marks that cover them. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/arena.h"
#include "tests/support/check.h"

static int failures, passes;

/* One "step": a device block, a host struct, a large host block, another host struct. */
static void step(gp_arena *a, void *got[4]) {
  if (gp_arena_alloc(a, 1000, &got[0]) != GP_OK) gp_t_die(gp_error_message());
  if (gp_arena_host_alloc(a, 72, &got[1]) != GP_OK) gp_t_die(gp_error_message());
  if (gp_arena_host_alloc(a, 100000, &got[2]) != GP_OK) gp_t_die(gp_error_message());
  if (gp_arena_host_alloc(a, 72, &got[3]) != GP_OK) gp_t_die(gp_error_message());
  memset(got[1], 0xab, 72); /* host memory: writable (ASan checks the bounds) */
  memset(got[2], 0xcd, 100000);
  memset(got[3], 0xef, 72);
}

int main(void) {
  gp_backend *cpu;
  if (gp_cpu_backend_create(1, &cpu) != GP_OK) gp_t_die(gp_error_message());

  gp_arena a;
  gp_arena_init(&a, cpu, 0);
  void *p;
  if (gp_arena_host_alloc(&a, 64, &p) != GP_OK) gp_t_die(gp_error_message());
  CHECK(a.used == 64, "on the CPU, host memory is the arena's own (used %zu)", a.used);
  gp_arena_free(&a);

  cpu->device = 0; /* as a device backend: host allocations must not come from the arena */
  gp_arena_init(&a, cpu, 0);
  void *s1[4], *s2[4], *s3[4];
  step(&a, s1);
  CHECK(a.used == 1024, "on a device, host allocations take nothing from the arena (used %zu)",
        a.used);
  CHECK(((uintptr_t)s1[1] | (uintptr_t)s1[3]) % 64 == 0, "host allocations are 64-byte aligned");
  if (gp_arena_reset(&a) != GP_OK) gp_t_die(gp_error_message());
  step(&a, s2);
  if (gp_arena_reset(&a) != GP_OK) gp_t_die(gp_error_message());
  step(&a, s3);
  CHECK(s2[1] == s3[1] && s2[2] == s3[2] && s2[3] == s3[3],
        "after the first reset, each step's host allocations get the same addresses");
  gp_arena_mark m0, m1;
  if (gp_arena_reset(&a) != GP_OK) gp_t_die(gp_error_message());
  gp_arena_get_mark(&a, &m0);
  step(&a, s3);
  gp_arena_get_mark(&a, &m1);
  CHECK(!gp_arena_mark_eq(&m0, &m1), "a mark moves with host allocations");
  gp_arena_set_mark(&a, &m0);
  void *q;
  if (gp_arena_host_alloc(&a, 72, &q) != GP_OK) gp_t_die(gp_error_message());
  CHECK(q == s3[1], "set_mark puts the host side back too");
  gp_arena_free(&a);
  cpu->device = -1;
  cpu->destroy(cpu);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
