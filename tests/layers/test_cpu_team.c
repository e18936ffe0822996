/* The CPU backend's team (core/cpu/team.c) through gp_cpu_parallel itself: every item of
 * [0, n) is run once, in the pieces of the shares fixed by n and the thread count; a worker
 * index always names the same thread (its buffers are its own); a failing call reports the
 * failing piece with the lowest number, whichever thread ran it; a nested call runs inline; a
 * share whose worker has not started is run by another (on one CPU the caller takes over the
 * helpers' shares instead of waiting for them to be scheduled; GP_CPU_TAKEOVER=0 turns that
 * off, for comparisons); and the pieces of a share whose worker stalls in its first piece are
 * run by the others; an idle helper goes to sleep; and a helper on the caller's core moves off it.
 * The suite runs under ThreadSanitizer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/cpu/cpu.h"
#include "tests/support/check.h"

static int failures, passes;

#define MAX_N 1000
#define MAX_T 8

typedef struct job {
  int threads;
  int64_t n;
  int hits[MAX_N];
  int64_t end_of[MAX_N + 1]; /* end_of[lo] = hi of the range that started at lo, else -1 */
  pthread_t thread_of[MAX_T];
  int seen[MAX_T];
  int wrong_thread, fail_at[2];
  int taken_over[MAX_T]; /* per worker: pieces run that were not of its own share */
  int stall;             /* worker 1 sleeps in the first piece of its share */
  _Atomic int stalling;  /* set by worker 1 as it starts sleeping */
  int ran_by[MAX_N];     /* the worker that ran the piece starting at an item */
} job;

/* Share v's first item and the one past its last, as team.c cuts them. */
static int64_t share_begin(const job *j, int64_t v) {
  const int64_t active = j->n < j->threads ? j->n : j->threads;
  return j->n * v / active;
}

static gp_status count_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  job *j = ctx;
  if (worker < 0 || worker >= j->threads) return GP_ERR(GP_ERR_RUNTIME, "worker %d", worker);
  /* each worker index is only ever used by one thread, which writes its own slot */
  if (!j->seen[worker]) {
    j->seen[worker] = 1;
    j->thread_of[worker] = pthread_self();
  } else if (!pthread_equal(j->thread_of[worker], pthread_self())) {
    j->wrong_thread = 1;
  }
  if (lo < share_begin(j, worker) || lo >= share_begin(j, worker + 1))
    j->taken_over[worker]++; /* a piece of another worker's share */
  j->end_of[lo] = hi;
  j->ran_by[lo] = worker;
  if (j->stall && worker == 1 && lo == share_begin(j, 1)) {
    atomic_store(&j->stalling, 1);
    struct timespec ms20 = {0, 20 * 1000 * 1000};
    nanosleep(&ms20, NULL);
  }
  if (j->stall && worker == 0 && lo == 0) /* the caller waits (up to 0.2 s) for the stall */
    for (int i = 0; i < 2000 && !atomic_load(&j->stalling); i++) {
      struct timespec us100 = {0, 100 * 1000};
      nanosleep(&us100, NULL);
    }
  for (int64_t i = lo; i < hi; i++)
    j->hits[i]++;
  int fail = -1; /* the range's lowest failing item */
  for (int k = 0; k < 2; k++)
    if (j->fail_at[k] >= lo && j->fail_at[k] < hi && (fail < 0 || j->fail_at[k] < fail))
      fail = j->fail_at[k];
  return fail >= 0 ? GP_ERR(GP_ERR_RUNTIME, "item %d failed", fail) : GP_OK;
}

static void job_reset(job *j, int64_t n) {
  memset(j->hits, 0, sizeof j->hits);
  for (int64_t i = 0; i <= MAX_N; i++)
    j->end_of[i] = -1;
  j->n = n;
}

/* The ranges of the last call were exactly the pieces of the shares, each item run once. */
static int shares_exact(const job *j) {
  const int64_t active = j->n < j->threads ? j->n : j->threads;
  for (int64_t v = 0; v < active; v++) {
    const int64_t a = share_begin(j, v), len = share_begin(j, v + 1) - a;
    const int64_t pieces = len < gp_cpu_pieces() ? len : gp_cpu_pieces();
    for (int64_t i = 0; i < pieces; i++)
      if (j->end_of[a + len * i / pieces] != a + len * (i + 1) / pieces) return 0;
  }
  for (int64_t i = 0; i < j->n; i++)
    if (j->hits[i] != 1) return 0;
  return 1;
}

static void test_shares(void) {
  static const int threads[] = {2, 3, 5, 8};
  static const int64_t sizes[] = {1, 2, 3, 7, 64, MAX_N};
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    gp_backend *be = NULL;
    CHECK(gp_cpu_backend_create(threads[t], &be) == GP_OK, "backend of %d threads", threads[t]);
    if (!be) continue;
    job *j = calloc(1, sizeof *j);
    j->threads = threads[t];
    j->fail_at[0] = j->fail_at[1] = -1;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      int ok = 1;
      for (int rep = 0; rep < 200 && ok; rep++) {
        job_reset(j, sizes[s]);
        ok = gp_cpu_parallel(be, sizes[s], count_task, j) == GP_OK && shares_exact(j);
      }
      CHECK(ok, "%d threads, n = %lld: every item once, in the fixed pieces", threads[t],
            (long long)sizes[s]);
    }
    CHECK(!j->wrong_thread, "%d threads: a worker index always names the same thread", threads[t]);
    /* two failing shares: the lower one is reported, every time */
    int lowest = 1;
    for (int rep = 0; rep < 200; rep++) {
      job_reset(j, 64);
      j->fail_at[0] = 63;              /* the last share */
      j->fail_at[1] = 64 / threads[t]; /* share 1's first item */
      gp_status st = gp_cpu_parallel(be, 64, count_task, j);
      char want[64];
      snprintf(want, sizeof want, "item %d failed", j->fail_at[1]);
      lowest &= st == GP_ERR_RUNTIME && strcmp(gp_error_message(), want) == 0 && shares_exact(j);
    }
    CHECK(lowest, "%d threads: the failing piece with the lowest number is reported", threads[t]);
    free(j);
    gp_backend_destroy(be);
  }
}

/* A call from inside a task runs inline, on the calling worker, over the whole range. */
typedef struct nest {
  gp_backend *be;
  int bad;
} nest;

static gp_status inner_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  nest *p = ctx;
  if (lo != 0 || hi != 100 || worker != gp_cpu_worker_index()) p->bad = 1;
  return GP_OK;
}

static gp_status outer_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)lo, (void)hi, (void)worker;
  nest *p = ctx;
  nest mine = {p->be, 0};
  gp_status st = gp_cpu_parallel(p->be, 100, inner_task, &mine);
  return st != GP_OK ? st : mine.bad ? GP_ERR(GP_ERR_RUNTIME, "nested call not inline") : GP_OK;
}

static void test_nested(void) {
  gp_backend *be = NULL;
  CHECK(gp_cpu_backend_create(3, &be) == GP_OK, "backend of 3 threads");
  if (!be) return;
  nest p = {be, 0};
  CHECK(gp_cpu_parallel(be, 3, outer_task, &p) == GP_OK, "a nested call runs inline: %s",
        gp_error_message());
  gp_backend_destroy(be);
}

/* The scratch buffer is the running op's: a task asking for it (a convolution called inside
 * another op) is refused rather than handed the buffer the outer op is using. */
static gp_status scratch_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)lo, (void)hi, (void)worker;
  void *buf = NULL;
  return gp_cpu_scratch(ctx, 64, &buf);
}

static void test_scratch_in_task(void) {
  gp_backend *be = NULL;
  CHECK(gp_cpu_backend_create(2, &be) == GP_OK, "backend of 2 threads");
  if (!be) return;
  void *buf = NULL;
  CHECK(gp_cpu_scratch(be, 64, &buf) == GP_OK && buf, "scratch outside a task");
  gp_error_clear();
  CHECK(gp_cpu_parallel(be, 2, scratch_task, be) == GP_ERR_RUNTIME &&
            strstr(gp_error_message(), "inside another op's parallel task"),
        "scratch inside a task refused");
  gp_backend_destroy(be);
}

/* On one CPU the helpers run only when the caller is not running: the caller must take over
 * their shares rather than wait for them to be scheduled. */
static void test_take_over(int takeover) {
  cpu_set_t old, one;
  if (sched_getaffinity(0, sizeof old, &old) != 0) {
    printf("skip take-over: no affinity\n");
    return;
  }
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &old))
    cpu++;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    printf("skip take-over: cannot pin to one CPU\n");
    return;
  }
  gp_backend *be = NULL;
  if (!takeover) setenv("GP_CPU_TAKEOVER", "0", 1); /* read when the helpers start */
  CHECK(gp_cpu_backend_create(4, &be) == GP_OK, "backend of 4 threads");
  job *j = calloc(1, sizeof *j);
  j->threads = 4;
  j->fail_at[0] = j->fail_at[1] = -1;
  int ok = be != NULL;
  for (int rep = 0; rep < 2000 && ok; rep++) {
    job_reset(j, 16);
    ok = gp_cpu_parallel(be, 16, count_task, j) == GP_OK && shares_exact(j);
  }
  CHECK(ok, "on one CPU: every item once, in the fixed pieces");
  int taken = 0;
  for (int w = 0; w < MAX_T; w++)
    taken += j->taken_over[w];
  if (takeover)
    CHECK(taken > 0, "on one CPU, shares of helpers not running were taken over (%d of 8000)",
          taken);
  else
    CHECK(taken == 0, "with GP_CPU_TAKEOVER=0 every share waits for its worker (%d taken)", taken);
  CHECK(!j->wrong_thread, "on one CPU: a worker index always names the same thread");
  free(j);
  gp_backend_destroy(be); /* the helpers, pinned with the caller, are joined here */
  unsetenv("GP_CPU_TAKEOVER");
  sched_setaffinity(0, sizeof old, &old);
}

/* Worker 1 sleeps 20 ms in the first piece of its share: the caller runs the rest of that
 * share meanwhile, so the call waits for one piece of the stalled worker, not its share. */
static void test_stall(void) {
  gp_backend *be = NULL;
  CHECK(gp_cpu_backend_create(2, &be) == GP_OK, "backend of 2 threads");
  if (!be) return;
  job *j = calloc(1, sizeof *j);
  j->threads = 2;
  j->fail_at[0] = j->fail_at[1] = -1;
  j->stall = 1;
  int stalled = 0, rest_by_caller = 0, ok = 1;
  for (int rep = 0; rep < 20 && ok; rep++) {
    job_reset(j, 64);
    memset(j->ran_by, -1, sizeof j->ran_by);
    atomic_store(&j->stalling, 0);
    ok = gp_cpu_parallel(be, 64, count_task, j) == GP_OK && shares_exact(j);
    if (j->ran_by[32] != 1) continue; /* the caller took the whole share before worker 1 woke */
    stalled++;
    int rest = 1; /* share 1's other pieces, [40, 64) in pieces of 8 at 4 pieces a share */
    for (int64_t lo = 32; lo < 64; lo = j->end_of[lo])
      if (lo > 32 && j->ran_by[lo] != 0) rest = 0;
    rest_by_caller += rest;
  }
  CHECK(ok, "2 threads, one stalling: every item once, in the fixed pieces");
  if (gp_cpu_pieces() > 1)
    CHECK(stalled > 0 && rest_by_caller == stalled,
          "a stalled worker's other pieces were run by the caller (%d of %d calls)", rest_by_caller,
          stalled);
  free(j);
  gp_backend_destroy(be);
}

/* The helper's thread id, as the task saw it, for its state under /proc. */
static _Atomic long helper_tid;

static gp_status tid_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)ctx, (void)lo, (void)hi;
  if (worker == 1) atomic_store(&helper_tid, (long)syscall(SYS_gettid));
  return GP_OK;
}

/* Thread tid's scheduler state: 'R' running or runnable (spinning too), 'S' asleep; '?'. */
static char state_of(long tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "tid (name) S ..." */
  return p && p[1] == ' ' ? p[2] : '?';
}

/* A helper with nothing to do goes to sleep: it must not hold a core forever. */
static void test_idle_sleeps(void) {
  gp_backend *be = NULL;
  setenv("GP_CPU_TAKEOVER", "0", 1); /* the helper runs its share: the caller cannot take it */
  CHECK(gp_cpu_backend_create(2, &be) == GP_OK, "backend of 2 threads");
  if (!be) return;
  atomic_store(&helper_tid, 0);
  int ok = 1;
  for (int i = 0; i < 2000 && ok && !atomic_load(&helper_tid); i++)
    ok = gp_cpu_parallel(be, 8, tid_task, NULL) == GP_OK;
  CHECK(ok, "calls until the helper takes a piece");
  const long tid = atomic_load(&helper_tid);
  if (!tid || state_of(tid) == '?') {
    printf("skip idle sleep: the helper took no piece, or no /proc\n");
    gp_backend_destroy(be);
    unsetenv("GP_CPU_TAKEOVER");
    return;
  }
  char st = '?'; /* a loaded machine may take a while to give the helper its core */
  for (int i = 0; i < 200 && st != 'S'; i++) {
    struct timespec ms10 = {0, 10 * 1000 * 1000};
    nanosleep(&ms10, NULL);
    st = state_of(tid);
  }
  CHECK(st == 'S', "the helper sleeps within 2 s with nothing to do (state %c)", st);
  gp_backend_destroy(be);
  unsetenv("GP_CPU_TAKEOVER");
}

/* A helper on the caller's core moves off it (core/cpu/team.c leave_callers_core): the caller
 * is pinned to one core, the helper (free to run on two) is pulled onto it by its own first
 * piece, and its pieces of the next calls must run elsewhere. Shares are not taken over
 * (GP_CPU_TAKEOVER=0), so the helper runs its own. */
static cpu_set_t team_mask;
static _Atomic int pull_to = -1, helper_cpu = -1;

static gp_status where_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)ctx, (void)lo, (void)hi;
  if (worker != 1) return GP_OK;
  int to = atomic_exchange(&pull_to, -1);
  if (to >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(to, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);             /* moves it there now */
    pthread_setaffinity_np(pthread_self(), sizeof team_mask, &team_mask); /* stays there */
  }
  atomic_store(&helper_cpu, sched_getcpu());
  return GP_OK;
}

static void test_leaves_callers_core(void) {
  cpu_set_t one;
  if (sched_getaffinity(0, sizeof team_mask, &team_mask) != 0 || CPU_COUNT(&team_mask) < 2) {
    printf("skip leaving the caller's core: fewer than 2 CPUs\n");
    return;
  }
  int cpu = 0;
  while (!CPU_ISSET(cpu, &team_mask))
    cpu++;
  setenv("GP_CPU_TAKEOVER", "0", 1);
  gp_backend *be = NULL;
  CHECK(gp_cpu_backend_create(2, &be) == GP_OK, "backend of 2 threads");
  CHECK(gp_cpu_parallel(be, 2, where_task, NULL) == GP_OK, "a first call starts the helper");
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "the caller pinned to CPU %d", cpu);
  int on_caller = 0;
  for (int rep = 0; rep < 20; rep++) {
    atomic_store(&pull_to, cpu);
    CHECK(gp_cpu_parallel(be, 2, where_task, NULL) == GP_OK, "a call that pulls the helper");
    CHECK(gp_cpu_parallel(be, 2, where_task, NULL) == GP_OK, "the call after it");
    on_caller += atomic_load(&helper_cpu) == cpu;
  }
  CHECK(on_caller == 0,
        "the helper ran on the caller's core in %d of 20 calls after being pulled "
        "there",
        on_caller);
  gp_backend_destroy(be);
  unsetenv("GP_CPU_TAKEOVER");
  sched_setaffinity(0, sizeof team_mask, &team_mask);
}

int main(void) {
  test_shares();
  test_nested();
  test_scratch_in_task();
  test_take_over(1);
  test_take_over(0);
  test_stall();
  test_idle_sleeps();
  test_leaves_callers_core();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
