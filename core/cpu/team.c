/* The threads of a CPU instance: be->threads - 1 helpers started on the first parallel call
 * (so they inherit the affinity of the thread that drives the instance, e.g. a pinned
 * pipeline stage), plus the calling thread. OpenBLAS runs single-threaded in each of them:
 * its own thread pool is process-global, so stages that each asked it for several threads
 * queued behind one another. Here every instance owns its cores.
 *
 * A call splits [0, n) into contiguous runs, one per thread, fixed by n and the thread count
 * alone, so what a call computes is the same run to run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/spin.h"

#define MSG_MAX 512
/* Waits spin this many pauses (tens of microseconds) before sleeping: the ops of a stage come
 * back to back, and a sleeping thread takes ~15 us to wake (measured on the 2-core VM), as
 * long as a micro-batch's whole convolution at small sizes. */
#define SPIN 4096

/* Each call: the caller writes the job (fn, ctx, n, active), resets `pending` to the number
 * of helpers and bumps `gen`; every helper, taking part or not, reads the job and then
 * counts `pending` down, so the job is not rewritten while any helper may still read it. */
struct gp_cpu_team {
  int helpers; /* threads started, workers 1..helpers */
  pthread_t *th;
  pthread_mutex_t mu; /* for sleeping only */
  pthread_cond_t go, done;
  _Atomic uint64_t gen;
  _Atomic int quit;
  _Atomic int pending;
  int active; /* workers taking part in this call, the caller included */
  gp_cpu_task fn;
  void *ctx;
  int64_t n;
  gp_status *st;
  char (*msg)[MSG_MAX];
};

/* The worker index of this thread while it runs a task, -1 outside: a nested call runs
 * inline on the same worker (its per-worker buffers stay its own). */
static _Thread_local int current_worker = -1;

static void run_share(struct gp_cpu_team *t, int w, gp_cpu_task fn, void *ctx, int64_t n,
                      int active) {
  int64_t lo = n * w / active, hi = n * (w + 1) / active;
  current_worker = w;
  gp_status s = lo < hi ? fn(ctx, lo, hi, w) : GP_OK;
  current_worker = -1;
  t->st[w] = s;
  if (s != GP_OK) {
    strncpy(t->msg[w], gp_error_message(), MSG_MAX - 1);
    t->msg[w][MSG_MAX - 1] = 0;
  }
}

typedef struct helper_arg {
  struct gp_cpu_team *t;
  int w;
} helper_arg;

/* The next generation after `seen`, or `seen` when quitting. */
static uint64_t next_call(struct gp_cpu_team *t, uint64_t seen) {
  uint64_t g = seen;
  for (int i = 0; i < SPIN; i++) {
    if ((g = atomic_load_explicit(&t->gen, memory_order_acquire)) != seen) return g;
    if (atomic_load_explicit(&t->quit, memory_order_relaxed)) return seen;
    gp_cpu_relax();
  }
  pthread_mutex_lock(&t->mu);
  while ((g = atomic_load_explicit(&t->gen, memory_order_acquire)) == seen &&
         !atomic_load_explicit(&t->quit, memory_order_relaxed))
    pthread_cond_wait(&t->go, &t->mu);
  pthread_mutex_unlock(&t->mu);
  return g;
}

static void *helper(void *arg) {
  helper_arg a = *(helper_arg *)arg;
  free(arg);
  struct gp_cpu_team *t = a.t;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = next_call(t, seen);
    if (g == seen) break; /* quit */
    seen = g;
    if (a.w < t->active) run_share(t, a.w, t->fn, t->ctx, t->n, t->active);
    if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&t->mu);
      pthread_cond_signal(&t->done);
      pthread_mutex_unlock(&t->mu);
    }
  }
  return NULL;
}

static void team_free(struct gp_cpu_team *t) {
  free(t->th);
  free(t->st);
  free(t->msg);
  free(t);
}

/* Starts the helpers of be (threads - 1 of them). */
static gp_status team_start(gp_backend *be, struct gp_cpu_team **out) {
  int workers = be->threads;
  struct gp_cpu_team *t = calloc(1, sizeof *t);
  if (t) {
    t->th = calloc((size_t)workers, sizeof *t->th);
    t->st = calloc((size_t)workers, sizeof *t->st);
    t->msg = calloc((size_t)workers, sizeof *t->msg);
  }
  if (!t || !t->th || !t->st || !t->msg) {
    if (t) team_free(t);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for the threads of a CPU backend");
  }
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
  if (be->precision == GP_PREC_BF16) GP_TRY(gp_cpu_bf16_prepare(be));
  if (!im->team) {
    gp_status s = team_start(be, &im->team);
    if (s != GP_OK) {
      gp_cpu_team_release(be);
      return s;
    }
  }
  struct gp_cpu_team *t = im->team;
  t->fn = fn;
  t->ctx = ctx;
  t->n = n;
  t->active = active;
  atomic_store_explicit(&t->pending, t->helpers, memory_order_relaxed);
  atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
  pthread_mutex_lock(&t->mu); /* wakes the helpers that went to sleep */
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->mu);
  run_share(t, 0, fn, ctx, n, active);
  for (int i = 0; i < SPIN && atomic_load_explicit(&t->pending, memory_order_acquire) > 0; i++)
    gp_cpu_relax();
  if (atomic_load_explicit(&t->pending, memory_order_acquire) > 0) {
    pthread_mutex_lock(&t->mu);
    while (atomic_load_explicit(&t->pending, memory_order_acquire) > 0)
      pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
  }
  for (int w = 0; w < active; w++)
    if (t->st[w] != GP_OK) {
      if (w > 0) gp_error_set(t->st[w], __FILE__, __LINE__, "%s", t->msg[w]);
      return t->st[w];
    }
  return GP_OK;
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
  if (parts > be->threads) parts = be->threads;
  parts_job p = {fn, ctx, n, parts};
  return gp_cpu_parallel(be, parts, part_task, &p);
}
