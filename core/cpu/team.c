/* The threads of a CPU instance: be->threads - 1 helpers started on the first parallel call
 * (so they inherit the affinity of the thread that drives the instance, e.g. a pinned
 * pipeline stage), plus the calling thread. OpenBLAS runs single-threaded in each of them:
 * its own thread pool is process-global, so stages that each asked it for several threads
 * queued behind one another. Here every instance owns its cores.
 *
 * A call splits [0, n) into one contiguous share per worker, and each share into up to
 * gp_cpu_pieces() contiguous pieces, all fixed by n and the thread count alone. A worker runs
 * the pieces of its own share in order (so consecutive ops over the same items find them in
 * its caches), then the pieces of other shares that nobody has started. So a call does not wait
 * for a thread that is not running (a vCPU the host took away, a core shared with another
 * process) or runs slower than the others, beyond the piece it is in. On a 2-core VM beside a
 * busy process, 2 threads with fixed shares ran balanced-cnn's 4-sample micro-batches at 0.36x
 * the speed of one thread, and at 0.7x with unstarted shares taken over; with one core made
 * half as fast (scripts/uneven-cores.py), 4 pieces a share ran 2 threads 1.3x faster at 128
 * samples an op and 1.1x at 4 than whole shares (docs/bench.md, "Unequal cores").
 * Which thread runs a piece changes nothing in what it computes: the ops write each piece's
 * results apart, and a worker's buffers are scratch. The caller returns when every piece is
 * done, without waiting for the helpers that took none; a helper that wakes late finds the
 * call over (see `claim`).
 *
 * The call's description (fn, ctx, n, active, base) is published under a sequence lock, and
 * a piece is claimed by a compare-and-swap of its share's counter. Piece numbers only grow:
 * call c's share v has the numbers [base + v * P, base + v * P + pieces of v) (P the most
 * pieces a share has), its counter holds the next one unclaimed, and the next call's base is
 * past them all. A helper holding a stale description asks for numbers its share's counter
 * has passed, so it gets nothing. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/env.h"
#include "core/spin.h"

#define MSG_MAX 512
/* Waits spin this many pauses before sleeping: the ops of a stage come back to back, and a
 * sleeping thread takes ~15 us to wake (measured on the 2-core VM), as long as a micro-batch's
 * whole convolution at small sizes. On the 2-core EPYC VM a pause is 24 ns, so this is 100 us
 * of CPU; waiting longer (yielding the core for up to 2 ms) was tried on 2026-11-30 and cost
 * 4-sample micro-batches 0.5-0.8x beside other processes without making the layer benchmarks'
 * second thread less bimodal (bench/results/2026-11-29-layer-speed.md). */
#define SPIN 4096

/* The number of the next unclaimed piece of a worker's share, on a cache line of its own. */
typedef struct counter {
  _Alignas(64) _Atomic int64_t next;
} counter;

/* What one call is; helpers read it whole under the sequence lock. */
typedef struct call {
  gp_cpu_task fn;
  void *ctx;
  int64_t n, base;
  int active;
  int cpu; /* the caller's core when it published the call, or -1 */
} call;

struct gp_cpu_team {
  int helpers; /* threads started, workers 1..helpers */
  pthread_t *th;
  pthread_mutex_t mu; /* for sleeping, and the call's error */
  pthread_cond_t go, done;
  _Atomic int quit;
  int takeover;         /* 0 with GP_CPU_TAKEOVER=0: each share waits for its worker (to compare) */
  int pieces;           /* the most pieces a share is cut into (gp_cpu_pieces()) */
  _Atomic uint64_t seq; /* odd while a call's fields are written; helpers wait for it to move */
  _Atomic(gp_cpu_task) fn;
  _Atomic(void *) ctx;
  _Atomic int64_t n, base;
  _Atomic int active;
  _Atomic int cpu;
  _Atomic int64_t left; /* pieces of the call not finished */
  counter *next;        /* per worker */
  /* the failing piece with the lowest number, written under mu */
  int64_t err_share;
  gp_status err;
  char msg[MSG_MAX];
};

/* The worker index of this thread while it runs a task, -1 outside: a nested call runs
 * inline on the same worker (its per-worker buffers stay its own). */
static _Thread_local int current_worker = -1;

/* The sequence lock without fences (ThreadSanitizer has none): the fields are stored with
 * release after the odd count, so a reader that loads (acquire) any field of a newer call
 * then sees the count moved. */
static void publish(struct gp_cpu_team *t, const call *c) {
  const memory_order rel = memory_order_release;
  uint64_t s = atomic_load_explicit(&t->seq, memory_order_relaxed);
  atomic_store_explicit(&t->seq, s + 1, memory_order_relaxed);
  atomic_store_explicit(&t->fn, c->fn, rel);
  atomic_store_explicit(&t->ctx, c->ctx, rel);
  atomic_store_explicit(&t->n, c->n, rel);
  atomic_store_explicit(&t->base, c->base, rel);
  atomic_store_explicit(&t->active, c->active, rel);
  atomic_store_explicit(&t->cpu, c->cpu, rel);
  atomic_store_explicit(&t->seq, s + 2, rel);
}

/* Reads the current call into c; returns its sequence count. */
static uint64_t snapshot(struct gp_cpu_team *t, call *c) {
  const memory_order acq = memory_order_acquire;
  for (;;) {
    uint64_t s = atomic_load_explicit(&t->seq, acq);
    if (s & 1) {
      gp_cpu_relax();
      continue;
    }
    c->fn = atomic_load_explicit(&t->fn, acq);
    c->ctx = atomic_load_explicit(&t->ctx, acq);
    c->n = atomic_load_explicit(&t->n, acq);
    c->base = atomic_load_explicit(&t->base, acq);
    c->active = atomic_load_explicit(&t->active, acq);
    c->cpu = atomic_load_explicit(&t->cpu, acq);
    if (atomic_load_explicit(&t->seq, memory_order_relaxed) == s) return s;
  }
}

/* Share v of call c: its items [*a, *a + *len) and its pieces' count. */
static int64_t share_of(const call *c, int pieces, int v, int64_t *a, int64_t *len) {
  *a = c->n * v / c->active;
  *len = c->n * (v + 1) / c->active - *a;
  return *len < pieces ? *len : pieces;
}

/* Claims the next unstarted piece of share v of call c into [*a, *b) and returns its number,
 * or -1 when all are taken (or c is over). */
static int64_t claim(struct gp_cpu_team *t, const call *c, int v, int64_t *a, int64_t *b) {
  int64_t start, len;
  const int64_t count = share_of(c, t->pieces, v, &start, &len);
  const int64_t first = c->base + (int64_t)v * t->pieces;
  int64_t x = atomic_load_explicit(&t->next[v].next, memory_order_relaxed);
  while (x >= first && x < first + count) {
    if (atomic_compare_exchange_weak_explicit(&t->next[v].next, &x, x + 1, memory_order_acquire,
                                              memory_order_relaxed)) {
      const int64_t i = x - first;
      *a = start + len * i / count;
      *b = start + len * (i + 1) / count;
      return x;
    }
  }
  return -1;
}

static void run_piece(struct gp_cpu_team *t, const call *c, int w, int64_t x, int64_t a,
                      int64_t b) {
  current_worker = w;
  gp_status s = a < b ? c->fn(c->ctx, a, b, w) : GP_OK;
  current_worker = -1;
  if (s != GP_OK) {
    pthread_mutex_lock(&t->mu);
    if (x < t->err_share) {
      t->err_share = x;
      t->err = s;
      strncpy(t->msg, gp_error_message(), MSG_MAX - 1);
      t->msg[MSG_MAX - 1] = 0;
    }
    pthread_mutex_unlock(&t->mu);
  }
  if (atomic_fetch_sub_explicit(&t->left, 1, memory_order_acq_rel) == 1) {
    pthread_mutex_lock(&t->mu);
    pthread_cond_signal(&t->done);
    pthread_mutex_unlock(&t->mu);
  }
}

/* Worker w's part of call c: the pieces of its own share, then the others' not yet started. */
static void work(struct gp_cpu_team *t, const call *c, int w) {
  int64_t a, b, x;
  for (int i = 0; i < (t->takeover ? c->active : 1); i++) {
    const int v = (w + i) % c->active;
    while ((x = claim(t, c, v, &a, &b)) >= 0)
      run_piece(t, c, w, x, a, b);
  }
}

typedef struct helper_arg {
  struct gp_cpu_team *t;
  int w;
} helper_arg;

/* Whether a call after the one counted `seen` was published (0 when quitting). */
static int next_call(struct gp_cpu_team *t, uint64_t seen) {
  for (int i = 0; i < SPIN; i++) {
    if (atomic_load_explicit(&t->seq, memory_order_relaxed) != seen) return 1;
    if (atomic_load_explicit(&t->quit, memory_order_relaxed)) return 0;
    gp_cpu_relax();
  }
  pthread_mutex_lock(&t->mu);
  int more;
  while (!(more = atomic_load_explicit(&t->seq, memory_order_relaxed) != seen) &&
         !atomic_load_explicit(&t->quit, memory_order_relaxed))
    pthread_cond_wait(&t->go, &t->mu);
  pthread_mutex_unlock(&t->mu);
  return more;
}

/* A helper on the core of the caller that published c moves to another core it may run on.
 * Both threads wait by spinning, and Linux did not part two busy threads of one core for tens
 * of milliseconds (its balancer leaves a thread that ran within the last 0.5 ms where it is):
 * a layer benchmark's process then ran every op at one thread's speed on a quiet 2-core VM (10
 * processes of 12 for silu; bench/results/2026-11-29-layer-speed.md). Leaving the caller's
 * core out of the affinity mask moves the helper at once; the mask is put back at once, which
 * moves nothing, so pinned stages and neighbours keep their say. */
static void leave_callers_core(const call *c) {
  if (c->cpu < 0 || sched_getcpu() != c->cpu) return;
  cpu_set_t mask, other;
  if (pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) != 0 || CPU_COUNT(&mask) < 2)
    return;
  other = mask;
  CPU_CLR(c->cpu, &other);
  if (pthread_setaffinity_np(pthread_self(), sizeof other, &other) == 0)
    (void)pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
}

static void *helper(void *arg) {
  helper_arg a = *(helper_arg *)arg;
  free(arg);
  struct gp_cpu_team *t = a.t;
  uint64_t seen = 0;
  while (next_call(t, seen)) {
    call c;
    seen = snapshot(t, &c);
    if (a.w < c.active) {
      leave_callers_core(&c);
      work(t, &c, a.w);
    }
  }
  return NULL;
}

static void team_free(struct gp_cpu_team *t) {
  free(t->th);
  free(t->next);
  free(t);
}

/* Starts the helpers of be (threads - 1 of them). */
static gp_status team_start(gp_backend *be, struct gp_cpu_team **out) {
  int workers = be->threads;
  struct gp_cpu_team *t = calloc(1, sizeof *t);
  if (t) {
    t->th = calloc((size_t)workers, sizeof *t->th);
    t->next = aligned_alloc(64, (size_t)workers * sizeof *t->next);
  }
  if (!t || !t->th || !t->next) {
    if (t) team_free(t);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for the threads of a CPU backend");
  }
  for (int w = 0; w < workers; w++)
    atomic_init(&t->next[w].next, 0);
  t->takeover = gp_env_get(GP_ENV_CPU_TAKEOVER, 1);
  t->pieces = gp_cpu_pieces();
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->go, NULL);
  pthread_cond_init(&t->done, NULL);
  for (int w = 1; w < workers; w++) {
    helper_arg *a = malloc(sizeof *a);
    if (a) *a = (helper_arg){t, w};
    if (!a || pthread_create(&t->th[w], NULL, helper, a) != 0) {
      free(a);
      *out = t; /* the helpers started so far are joined by the release */
      return GP_ERR(GP_ERR_RUNTIME, "cannot start thread %d of %d of a CPU backend", w + 1,
                    workers);
    }
    t->helpers = w;
  }
  *out = t;
  return GP_OK;
}

void gp_cpu_team_release(gp_backend *be) {
  gp_cpu_impl *im = be->impl;
  struct gp_cpu_team *t = im ? im->team : NULL;
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  atomic_store(&t->quit, 1);
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->mu);
  for (int w = 1; w <= t->helpers; w++)
    pthread_join(t->th[w], NULL);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->go);
  pthread_cond_destroy(&t->done);
  team_free(t);
  im->team = NULL;
}

int gp_cpu_worker_index(void) {
  return current_worker >= 0 ? current_worker : 0;
}

int gp_cpu_in_task(void) {
  return current_worker >= 0;
}

int gp_cpu_workers(const gp_backend *be, int64_t n) {
  if (current_worker >= 0) return 1;
  return n < be->threads ? (n > 0 ? (int)n : 1) : be->threads;
}

gp_status gp_cpu_parallel(gp_backend *be, int64_t n, gp_cpu_task fn, void *ctx) {
  if (n <= 0) return GP_OK;
  if (current_worker >= 0) return fn(ctx, 0, n, current_worker); /* nested: inline */
  int active = gp_cpu_workers(be, n);
  if (active == 1) {
    current_worker = 0;
    gp_status s = fn(ctx, 0, n, 0);
    current_worker = -1;
    return s;
  }
  gp_cpu_impl *im = be->impl;
  /* bf16 operand buffers are made here, before the workers look them up */
  if (be->precision != GP_PREC_FP32) GP_TRY(gp_cpu_bf16_prepare(be));
  if (!im->team) {
    gp_status s = team_start(be, &im->team);
    if (s != GP_OK) {
      gp_cpu_team_release(be);
      return s;
    }
  }
  struct gp_cpu_team *t = im->team;
  /* The previous call is over: every piece it had is claimed and done. */
  call c = {fn,
            ctx,
            n,
            atomic_load_explicit(&t->base, memory_order_relaxed) + (int64_t)be->threads * t->pieces,
            active,
            sched_getcpu()};
  int64_t pieces = 0;
  for (int v = 0; v < active; v++) {
    int64_t a, len;
    pieces += share_of(&c, t->pieces, v, &a, &len);
    atomic_store_explicit(&t->next[v].next, c.base + (int64_t)v * t->pieces, memory_order_relaxed);
  }
  t->err_share = INT64_MAX;
  t->err = GP_OK;
  atomic_store_explicit(&t->left, pieces, memory_order_relaxed);
  publish(t, &c);
  pthread_mutex_lock(&t->mu); /* wakes the helpers that went to sleep */
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->mu);
  work(t, &c, 0);
  for (int i = 0; i < SPIN && atomic_load_explicit(&t->left, memory_order_acquire) > 0; i++)
    gp_cpu_relax();
  if (atomic_load_explicit(&t->left, memory_order_acquire) > 0) {
    pthread_mutex_lock(&t->mu);
    while (atomic_load_explicit(&t->left, memory_order_acquire) > 0)
      pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
  }
  if (t->err != GP_OK) return gp_error_set(t->err, __FILE__, __LINE__, "%s", t->msg);
  return GP_OK;
}

/* Pieces a share is cut into by default: with 4, 2 threads on a full-speed and a half-speed
 * core ran 1.1-1.3x faster than with whole shares, and on equal cores within the noise
 * (0.96-1.02x); 16 were not measurably better on either. */
#define PIECES 4

int gp_cpu_pieces(void) {
  static _Atomic int cached; /* 0 until read */
  int p = atomic_load_explicit(&cached, memory_order_relaxed);
  if (p == 0) {
    p = gp_env_get(GP_ENV_CPU_PIECES, PIECES);
    atomic_store_explicit(&cached, p, memory_order_relaxed);
  }
  return p;
}

int64_t gp_cpu_max_parts(const gp_backend *be) {
  return (int64_t)be->threads * gp_cpu_pieces();
}

typedef struct parts_job {
  gp_cpu_task fn;
  void *ctx;
  int64_t n, parts;
} parts_job;

static gp_status part_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  const parts_job *p = ctx;
  int64_t a = p->n * lo / p->parts, b = p->n * hi / p->parts;
  return a < b ? p->fn(p->ctx, a, b, worker) : GP_OK;
}

gp_status gp_cpu_parallel_for(gp_backend *be, int64_t n, int64_t grain, gp_cpu_task fn, void *ctx) {
  if (n <= 0) return GP_OK;
  int64_t parts = grain > 0 ? n / grain : n;
  if (gp_cpu_workers(be, parts) < 2)
    return gp_cpu_parallel(be, 1, part_task, &(parts_job){fn, ctx, n, 1});
  if (parts > gp_cpu_max_parts(be)) parts = gp_cpu_max_parts(be);
  parts_job p = {fn, ctx, n, parts};
  return gp_cpu_parallel(be, parts, part_task, &p);
}
