/* The loader: a reader thread lays out the next batches (which samples, in which order; for
 * streams also their encoded bytes) in a ring of `prefetch` jobs, and worker threads decode
 * them chunk by chunk; the caller takes jobs strictly in order. Every decision about order
 * is made by the reader from (seed, epoch) alone and every sample is decoded from (item,
 * epoch) alone, so the batches never depend on the number of threads or their timing.
 * With workers = 0 the caller does both steps itself. */
#include "data/loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "core/exec/pipeline.h"
#include "core/rng.h"
#include "data/source.h"

enum { J_FREE, J_FILLED, J_DONE };
/* A row of a job: decoded, bad (skipped), or only its label read (gp_loader_want). */
enum { ROW_GOOD, ROW_BAD, ROW_LABEL };

typedef struct job {
  int state;
  int64_t count;      /* items laid out */
  int64_t epoch, end; /* the caller's position after taking this job */
  int pass_end;       /* test: the pass is over (count is 0) */
  int64_t next_item, done_items;
  gp_item *items;
  uint8_t *bad; /* per item: ROW_* */
  uint8_t *bytes;
  size_t nbytes, cap;
  float *x;
  int32_t *y;
  gp_status st;
  char msg[1024];
} job;

struct gp_loader {
  gp_source *src;
  gp_split split;
  uint64_t seed;
  gp_loader_opts o;
  int64_t n_rep; /* random access: samples per epoch for this replica */
  /* The caller's position. */
  int64_t epoch, index, cons_seq;
  /* The reader's position (reader thread, or the caller when nothing runs). */
  int64_t r_epoch, r_index, r_seq;
  int64_t *perm, perm_epoch;
  int by_sample;   /* streams: keep every R-th record (fewer shards than replicas) */
  int64_t raw_k;   /* streams: records read in this epoch, before the replica filter */
  int src_end;     /* streams: the epoch's shards are exhausted */
  gp_record *sbuf; /* streams: the shuffle buffer */
  int64_t sbuf_n;
  gp_rng srng;
  gp_record rec;
  /* Threads and the job ring. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t reader, *workers;
  int running, stop, nworkers;
  int need_start; /* the position moved: lay out jobs from it again */
  job *jobs;
  int njobs;
  int64_t batch;                   /* the batch size the ring is laid out for */
  int want_images, want_r, want_R; /* gp_loader_want */
  gp_scratch *scratch;             /* one per worker, plus one for the caller */
  /* Statistics. */
  double wait_s;
  int64_t batches, samples, skipped;
  atomic_llong decoded;
  char first_skip[512];
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

gp_loader_opts gp_loader_opts_of(const gp_data_spec *spec) {
  gp_loader_opts o = {.workers = spec->workers,
                      .prefetch = spec->prefetch,
                      .shuffle_buffer = spec->shuffle_buffer,
                      .max_skips = spec->max_skips,
                      .replica = 0,
                      .replicas = 1};
  return o;
}

/* ---- the reader: which samples go into a job, in order ---- */

static gp_status ensure_perm(gp_loader *l) {
  int64_t n = l->src->n;
  if (l->perm_epoch == l->r_epoch) return GP_OK;
  if (!l->perm && !(l->perm = malloc((size_t)(n ? n : 1) * sizeof *l->perm)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a %lld-sample permutation", (long long)n);
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(l->seed, (uint64_t)l->r_epoch));
  for (int64_t i = 0; i < n; i++)
    l->perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1);
    int64_t t = l->perm[i];
    l->perm[i] = l->perm[j];
    l->perm[j] = t;
  }
  l->perm_epoch = l->r_epoch;
  return GP_OK;
}

static gp_status fill_random(gp_loader *l, job *j, int64_t b) {
  int64_t R = l->o.replicas, r = l->o.replica;
  if (l->split == GP_SPLIT_TRAIN) {
    if (l->r_index + b > l->n_rep) {
      l->r_epoch++;
      l->r_index = 0;
    }
    GP_TRY(ensure_perm(l));
    for (int64_t k = 0; k < b; k++) {
      int64_t ref = l->perm[(l->r_index + k) * R + r];
      j->items[k] = (gp_item){.sample = ref, .ref = ref};
    }
    j->count = b;
  } else {
    int64_t k = l->n_rep - l->r_index < b ? l->n_rep - l->r_index : b;
    for (int64_t i = 0; i < k; i++) {
      int64_t ref = (l->r_index + i) * R + r;
      j->items[i] = (gp_item){.sample = ref, .ref = ref};
    }
    j->count = k;
  }
  j->epoch = l->r_epoch;
  l->r_index += j->count;
  j->end = l->r_index;
  return GP_OK;
}

static void swap_rec(gp_record *a, gp_record *b) {
  gp_record t = *a;
  *a = *b;
  *b = t;
}

static gp_status stream_begin(gp_loader *l) {
  l->raw_k = 0;
  l->src_end = 0;
  l->sbuf_n = 0;
  gp_rng_seed(&l->srng,
              gp_hash_combine(gp_hash_str(l->seed, "shuffle-buffer"), (uint64_t)l->r_epoch));
  return l->src->epoch_begin(l->src, l->r_epoch, l->o.replica, l->o.replicas, &l->by_sample);
}

/* The next record of this replica in shard order; read errors become counted skips of the
 * rest of the shard while max_skips allows. */
static gp_status stream_raw(gp_loader *l, gp_record *r, int *end) {
  for (;;) {
    *end = 0;
    if (l->src_end) {
      *end = 1;
      return GP_OK;
    }
    gp_status s = l->src->next(l->src, r, end);
    if (s != GP_OK) {
      pthread_mutex_lock(&l->mu);
      int skip = l->skipped < l->o.max_skips;
      if (skip && l->skipped++ == 0)
        snprintf(l->first_skip, sizeof l->first_skip, "%s", gp_error_message());
      pthread_mutex_unlock(&l->mu);
      if (!skip && l->o.max_skips > 0) {
        char m[sizeof l->first_skip];
        snprintf(m, sizeof m, "%s", gp_error_message());
        return GP_ERR(s, "%s (more than max_skips = %lld bad samples)", m,
                      (long long)l->o.max_skips);
      }
      if (!skip) return s;
      l->src->skip_shard(l->src);
      continue;
    }
    if (*end) {
      l->src_end = 1;
      return GP_OK;
    }
    int64_t k = l->raw_k++;
    if (!l->by_sample || k % l->o.replicas == l->o.replica) return GP_OK;
  }
}

/* The next record in this epoch's order into l->rec: the train split draws from a shuffle
 * buffer refilled from the stream, the test split reads in order. */
static gp_status stream_take(gp_loader *l, int *end) {
  if (l->split != GP_SPLIT_TRAIN || l->o.shuffle_buffer <= 1) return stream_raw(l, &l->rec, end);
  while (l->sbuf_n < l->o.shuffle_buffer && !l->src_end) {
    int e;
    GP_TRY(stream_raw(l, &l->sbuf[l->sbuf_n], &e));
    if (!e) l->sbuf_n++;
  }
  *end = l->sbuf_n == 0;
  if (*end) return GP_OK;
  int64_t k = (int64_t)gp_rng_below(&l->srng, (uint64_t)l->sbuf_n);
  swap_rec(&l->rec, &l->sbuf[k]);
  int e = 1;
  if (!l->src_end) GP_TRY(stream_raw(l, &l->sbuf[k], &e));
  if (e) swap_rec(&l->sbuf[k], &l->sbuf[--l->sbuf_n]);
  return GP_OK;
}

static gp_status job_bytes(job *j, size_t more) {
  if (j->nbytes + more <= j->cap && j->bytes) return GP_OK; /* a buffer even for empty ones */
  size_t cap = j->cap ? j->cap : 1 << 20;
  while (cap < j->nbytes + more)
    cap *= 2;
  uint8_t *p = realloc(j->bytes, cap);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory for a batch of encoded samples");
  j->bytes = p;
  j->cap = cap;
  return GP_OK;
}

static gp_status fill_stream(gp_loader *l, job *j, int64_t b) {
  int64_t started = l->r_index;
  for (;;) {
    j->nbytes = 0;
    j->count = 0;
    int end = 0;
    while (j->count < b) {
      GP_TRY(stream_take(l, &end));
      if (end) break;
      gp_item *it = &j->items[j->count];
      GP_TRY(job_bytes(j, l->rec.len));
      memcpy(j->bytes + j->nbytes, l->rec.bytes, l->rec.len);
      *it = (gp_item){.sample = l->r_index + j->count,
                      .off = j->nbytes,
                      .len = l->rec.len,
                      .label = l->rec.label};
      snprintf(it->where, sizeof it->where, "%s", l->rec.where);
      j->nbytes += l->rec.len;
      j->count++;
    }
    if (!end || l->split != GP_SPLIT_TRAIN) break;
    /* A train epoch ends: drop the partial batch and start the next one. */
    if (started == 0 && l->r_index == 0)
      return GP_ERR(GP_ERR_DATA, "%s: the training shards (%s) hold fewer than one batch of %lld",
                    l->src->name, l->src->where ? l->src->where : "?", (long long)b);
    l->r_epoch++;
    l->r_index = started = 0;
    GP_TRY(stream_begin(l));
  }
  j->epoch = l->r_epoch;
  l->r_index += j->count;
  j->end = l->r_index;
  return GP_OK;
}

/* Lays out the job for the reader's position. A finished test pass gives an empty job
 * marked pass_end; the position moves to the next pass. */
static gp_status fill_job(gp_loader *l, job *j) {
  j->count = 0;
  j->pass_end = 0;
  j->next_item = j->done_items = 0;
  j->st = GP_OK;
  j->msg[0] = 0;
  gp_status s = l->src->stream ? fill_stream(l, j, l->batch) : fill_random(l, j, l->batch);
  if (s == GP_OK && l->split == GP_SPLIT_TEST && j->count == 0) {
    j->pass_end = 1;
    j->epoch = ++l->r_epoch;
    j->end = l->r_index = 0;
    if (l->src->stream) s = stream_begin(l);
  }
  if (s != GP_OK) {
    j->st = s;
    snprintf(j->msg, sizeof j->msg, "%s", gp_error_message());
  }
  return s;
}

/* ---- the workers: decoding ---- */

/* The rows of j the caller reads the images of: [*lo, *hi). */
static void rows_read(const gp_loader *l, const job *j, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  if (l->want_images) gp_batch_share(j->count, l->want_r, l->want_R, lo, hi);
}

/* Row i of j: the sample decoded (image 1), or its label alone; a bad one is counted and
 * marked, or the job's error past max_skips. */
static void read_row(gp_loader *l, job *j, int64_t i, int image, gp_scratch *sc) {
  const gp_item *it = &j->items[i];
  gp_status s;
  if (image || !l->src->label) {
    s = l->src->decode(l->src, it, j->bytes + it->off, j->epoch, sc, j->x + i * l->src->numel,
                       &j->y[i]);
    atomic_fetch_add_explicit(&l->decoded, 1, memory_order_relaxed);
    j->bad[i] = ROW_GOOD;
  } else {
    s = l->src->label(l->src, it, &j->y[i]);
    j->bad[i] = ROW_LABEL;
  }
  if (s == GP_OK) return;
  j->bad[i] = ROW_BAD;
  pthread_mutex_lock(&l->mu);
  if (l->skipped < l->o.max_skips) {
    if (l->skipped++ == 0) snprintf(l->first_skip, sizeof l->first_skip, "%s", gp_error_message());
  } else if (j->st == GP_OK) {
    j->st = s;
    if (l->o.max_skips > 0)
      snprintf(j->msg, sizeof j->msg, "%.900s (more than max_skips = %lld bad samples)",
               gp_error_message(), (long long)l->o.max_skips);
    else
      snprintf(j->msg, sizeof j->msg, "%s", gp_error_message());
  }
  pthread_mutex_unlock(&l->mu);
}

static void decode_range(gp_loader *l, job *j, int64_t a, int64_t b, gp_scratch *sc) {
  int64_t lo, hi;
  rows_read(l, j, &lo, &hi);
  for (int64_t i = a; i < b; i++)
    read_row(l, j, i, i >= lo && i < hi, sc);
}

/* Whether row k can stand in for a bad row (its image too when `image`: a row only labelled
 * is decoded now, as the whole batch's decode would have). */
static int stand_in(gp_loader *l, job *j, int64_t k, int image, gp_scratch *sc) {
  if (image && j->bad[k] == ROW_LABEL) read_row(l, j, k, 1, sc);
  return j->bad[k] != ROW_BAD;
}

/* A skipped sample takes the place of the nearest good one before it, or else of the first
 * good one after it (the image only in the rows read). Not under l->mu. */
static void fill_holes(gp_loader *l, job *j, gp_scratch *sc) {
  int64_t numel = l->src->numel, lo, hi;
  rows_read(l, j, &lo, &hi);
  for (int64_t i = 0; i < j->count; i++) {
    if (j->bad[i] != ROW_BAD) continue;
    int image = i >= lo && i < hi;
    int64_t g = -1;
    for (int64_t k = i - 1; k >= 0 && g < 0; k--)
      if (stand_in(l, j, k, image, sc)) g = k;
    for (int64_t k = i + 1; k < j->count && g < 0; k++)
      if (stand_in(l, j, k, image, sc)) g = k;
    if (g < 0) {
      pthread_mutex_lock(&l->mu);
      if (j->st == GP_OK) {
        j->st = GP_ERR_DATA;
        snprintf(j->msg, sizeof j->msg, "every sample of a batch was bad (first skipped: %s)",
                 l->first_skip);
      }
      pthread_mutex_unlock(&l->mu);
      return;
    }
    if (image) memcpy(j->x + i * numel, j->x + g * numel, (size_t)numel * sizeof(float));
    j->y[i] = j->y[g];
  }
}

static int64_t chunk_of(const gp_loader *l, const job *j) {
  int64_t c = j->count / (4 * (l->nworkers ? l->nworkers : 1));
  return c < 1 ? 1 : c > 64 ? 64 : c;
}

static void *worker_main(void *arg) {
  gp_loader *l = ((void **)arg)[0];
  gp_scratch *sc = ((void **)arg)[1];
  free(arg);
  pthread_mutex_lock(&l->mu);
  for (;;) {
    job *j = NULL;
    for (int64_t s = l->cons_seq; !l->stop && s < l->r_seq; s++) {
      job *c = &l->jobs[s % l->njobs];
      if (c->state == J_FILLED && c->next_item < c->count) {
        j = c;
        break;
      }
    }
    if (l->stop) break;
    if (!j) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    int64_t a = j->next_item, b = a + chunk_of(l, j);
    if (b > j->count) b = j->count;
    j->next_item = b;
    pthread_mutex_unlock(&l->mu);
    decode_range(l, j, a, b, sc);
    pthread_mutex_lock(&l->mu);
    j->done_items += b - a;
    if (j->done_items == j->count) { /* every item taken: no other worker touches j */
      pthread_mutex_unlock(&l->mu);
      fill_holes(l, j, sc);
      pthread_mutex_lock(&l->mu);
      j->state = J_DONE;
      pthread_cond_broadcast(&l->cv);
    }
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static void *reader_main(void *arg) {
  gp_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    job *j = &l->jobs[l->r_seq % l->njobs];
    while (!l->stop && j->state != J_FREE)
      pthread_cond_wait(&l->cv, &l->mu);
    if (l->stop) break;
    pthread_mutex_unlock(&l->mu);
    gp_status s = fill_job(l, j);
    pthread_mutex_lock(&l->mu);
    l->r_seq++;
    j->state = s != GP_OK || j->count == 0 ? J_DONE : J_FILLED;
    pthread_cond_broadcast(&l->cv);
    /* After an error or the end of a test pass, wait to be restarted. */
    if (s != GP_OK || j->pass_end) break;
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- starting and stopping ---- */

static void shutdown_threads(gp_loader *l) {
  if (!l->running) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->reader, NULL);
  for (int i = 0; i < l->nworkers; i++)
    pthread_join(l->workers[i], NULL);
  l->running = 0;
  l->stop = 0;
}

static void free_jobs(gp_loader *l) {
  for (int i = 0; i < l->njobs; i++) {
    free(l->jobs[i].items);
    free(l->jobs[i].bad);
    free(l->jobs[i].bytes);
    free(l->jobs[i].x);
    free(l->jobs[i].y);
  }
  free(l->jobs);
  l->jobs = NULL;
  l->njobs = 0;
}

static gp_status alloc_jobs(gp_loader *l, int64_t b) {
  free_jobs(l);
  int n = l->nworkers ? (l->o.prefetch > 0 ? l->o.prefetch : 3) : 1;
  if (!(l->jobs = calloc((size_t)n, sizeof *l->jobs))) goto nomem;
  l->njobs = n;
  for (int i = 0; i < n; i++) {
    job *j = &l->jobs[i];
    j->items = malloc((size_t)b * sizeof *j->items);
    j->bad = malloc((size_t)b);
    j->x = malloc((size_t)(b * l->src->numel) * sizeof(float));
    j->y = malloc((size_t)b * sizeof(int32_t));
    if (!j->items || !j->bad || !j->x || !j->y) goto nomem;
  }
  l->batch = b;
  return GP_OK;
nomem:
  free_jobs(l);
  return GP_ERR(GP_ERR_NOMEM, "out of memory for %d prefetched batches of %lld samples",
                l->nworkers ? l->o.prefetch : 1, (long long)b);
}

/* Puts the reader at the caller's position and starts the threads. */
static gp_status start(gp_loader *l, int64_t b) {
  shutdown_threads(l);
  if (b != l->batch || !l->jobs) GP_TRY(alloc_jobs(l, b));
  l->need_start = 0;
  for (int i = 0; i < l->njobs; i++)
    l->jobs[i].state = J_FREE;
  l->r_epoch = l->epoch;
  l->r_index = 0;
  l->r_seq = l->cons_seq = 0;
  if (l->src->stream) {
    /* Replay the epoch's order up to the position, reading but not decoding. */
    GP_TRY(stream_begin(l));
    for (int64_t k = 0; k < l->index; k++) {
      int end;
      GP_TRY(stream_take(l, &end));
      if (end)
        return GP_ERR(GP_ERR_DATA, "%s: cannot resume at sample %lld of epoch %lld: it has %lld",
                      l->src->name, (long long)l->index, (long long)l->epoch, (long long)k);
    }
  }
  l->r_index = l->index;
  if (!l->nworkers) return GP_OK;
  l->running = 1;
  if (pthread_create(&l->reader, NULL, reader_main, l) != 0) {
    l->running = 0;
    return GP_ERR(GP_ERR_RUNTIME, "cannot start the data reader thread");
  }
  for (int i = 0; i < l->nworkers; i++) {
    void **arg = malloc(2 * sizeof *arg);
    if (arg) {
      arg[0] = l;
      arg[1] = &l->scratch[i + 1];
    }
    if (!arg || pthread_create(&l->workers[i], NULL, worker_main, arg) != 0) {
      free(arg);
      int started = i;
      l->nworkers = started;
      shutdown_threads(l);
      return GP_ERR(GP_ERR_RUNTIME, "cannot start data worker thread %d", started);
    }
  }
  return GP_OK;
}

/* ---- the API ---- */

static gp_status loader_new(gp_source *src, gp_split split, uint64_t seed, const gp_loader_opts *o,
                            gp_loader **out) {
  *out = NULL;
  gp_loader_opts opts = *o;
  if (opts.replicas < 1 || opts.replica < 0 || opts.replica >= opts.replicas) {
    src->free(src);
    return GP_ERR(GP_ERR_USAGE, "data replica %d of %d: need 0 <= replica < replicas", opts.replica,
                  opts.replicas);
  }
  if (opts.workers < 0) {
    int cores = gp_cpu_cores();
    opts.workers = !src->heavy ? 1 : cores / 2 > 1 ? cores / 2 : 1;
  }
  if (opts.shuffle_buffer <= 0) opts.shuffle_buffer = 2048;
  gp_loader *l = calloc(1, sizeof *l);
  int nsc = opts.workers + 1;
  if (l) {
    l->scratch = calloc((size_t)nsc, sizeof *l->scratch);
    l->workers = calloc((size_t)(opts.workers ? opts.workers : 1), sizeof *l->workers);
    l->sbuf = src->stream && split == GP_SPLIT_TRAIN
                  ? calloc((size_t)opts.shuffle_buffer, sizeof *l->sbuf)
                  : NULL;
  }
  if (!l || !l->scratch || !l->workers || (src->stream && split == GP_SPLIT_TRAIN && !l->sbuf)) {
    if (l) {
      free(l->scratch);
      free(l->workers);
      free(l->sbuf);
      free(l);
    }
    src->free(src);
    return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data loader");
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->src = src;
  l->split = split;
  l->seed = seed;
  l->o = opts;
  l->nworkers = opts.workers;
  l->perm_epoch = -1;
  l->want_images = l->want_R = 1;
  l->n_rep = src->n >= 0 ? src->n / opts.replicas : -1;
  *out = l;
  return GP_OK;
}

gp_status gp_loader_open(const gp_data_spec *spec, gp_split split, uint64_t seed,
                         const gp_loader_opts *opts, gp_loader **out) {
  *out = NULL;
  if (split != GP_SPLIT_TRAIN && split != GP_SPLIT_TEST)
    return GP_ERR(GP_ERR_USAGE, "unknown data split %d", (int)split);
  gp_loader_opts o = opts ? *opts : gp_loader_opts_of(spec);
  gp_source *src = NULL;
  switch (spec->dataset) {
  case GP_DATA_FASHION_MNIST:
  case GP_DATA_MNIST:
  case GP_DATA_CIFAR10:
  case GP_DATA_CIFAR100:
    GP_TRY(gp_source_open_mem(spec, split, seed, &src));
    break;
  case GP_DATA_IMAGENET:
    GP_TRY(gp_source_open_imagenet(spec, split, seed, &src));
    break;
  case GP_DATA_TRANSLATION:
    return GP_ERR(GP_ERR_UNSUPPORTED,
                  "dataset translation is read by the token-batch reader (data/tokens.h), "
                  "not this image loader");
  default:
    /* Synthetic data takes its sample shape from the model, not from the data section. */
    return GP_ERR(GP_ERR_USAGE, "this dataset is not opened from a data section");
  }
  return loader_new(src, split, seed, &o, out);
}

gp_status gp_loader_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, const gp_loader_opts *opts,
                                   gp_loader **out) {
  *out = NULL;
  if (split != GP_SPLIT_TRAIN && split != GP_SPLIT_TEST)
    return GP_ERR(GP_ERR_USAGE, "unknown data split %d", (int)split);
  gp_loader_opts o = opts ? *opts : (gp_loader_opts){.workers = 0, .replicas = 1};
  gp_source *src = NULL;
  GP_TRY(gp_source_open_synthetic(sample, classes, samples, split, seed, &src));
  return loader_new(src, split, seed, &o, out);
}

void gp_loader_free(gp_loader *l) {
  if (!l) return;
  shutdown_threads(l);
  free_jobs(l);
  for (int i = 0; i < l->o.workers + 1; i++)
    if (l->scratch[i].free_fn) l->scratch[i].free_fn(&l->scratch[i]);
  if (l->sbuf)
    for (int64_t i = 0; i < l->o.shuffle_buffer; i++)
      gp_record_free(&l->sbuf[i]);
  gp_record_free(&l->rec);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  l->src->free(l->src);
  free(l->sbuf);
  free(l->scratch);
  free(l->workers);
  free(l->perm);
  free(l);
}

int64_t gp_loader_samples(const gp_loader *l) {
  if (l->n_rep >= 0) return l->n_rep;
  return l->src->n_hint > 0 ? l->src->n_hint / l->o.replicas : -1;
}

gp_shape gp_loader_sample_shape(const gp_loader *l) {
  return l->src->sample;
}

int64_t gp_loader_classes(const gp_loader *l) {
  return l->src->classes;
}

const char *gp_loader_name(const gp_loader *l) {
  return l->src->name;
}

const char *gp_loader_where(const gp_loader *l) {
  return l->src->where;
}

gp_status gp_loader_next(gp_loader *l, int64_t max_batch, float *x, int32_t *y, int64_t *got) {
  *got = 0;
  if (max_batch < 1)
    return GP_ERR(GP_ERR_USAGE, "batch size %lld must be >= 1", (long long)max_batch);
  if (l->split == GP_SPLIT_TRAIN && l->n_rep >= 0 && max_batch > l->n_rep)
    return GP_ERR(GP_ERR_SPEC, "batch size %lld is larger than the %lld training samples",
                  (long long)max_batch, (long long)l->n_rep);
  if (max_batch != l->batch || !l->jobs || l->need_start || (l->nworkers && !l->running))
    GP_TRY(start(l, max_batch));
  job *j;
  if (!l->nworkers) {
    j = &l->jobs[0];
    if (fill_job(l, j) == GP_OK) {
      decode_range(l, j, 0, j->count, &l->scratch[0]);
      fill_holes(l, j, &l->scratch[0]);
    }
  } else {
    j = &l->jobs[l->cons_seq % l->njobs];
    double t0 = now_s();
    pthread_mutex_lock(&l->mu);
    while (j->state != J_DONE)
      pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    l->wait_s += now_s() - t0;
  }
  if (j->st != GP_OK) {
    gp_status st = j->st;
    shutdown_threads(l);
    l->need_start = 1; /* the next call starts over from the position */
    return GP_ERR(st, "%s", j->msg);
  }
  int64_t lo, hi, numel = l->src->numel;
  rows_read(l, j, &lo, &hi);
  if (hi > lo)
    memcpy(x + lo * numel, j->x + lo * numel, (size_t)((hi - lo) * numel) * sizeof(float));
  memcpy(y, j->y, (size_t)j->count * sizeof(int32_t));
  *got = j->count;
  l->epoch = j->epoch;
  l->index = j->end;
  l->batches++;
  l->samples += j->count;
  if (l->nworkers) {
    int pass_end = j->pass_end;
    pthread_mutex_lock(&l->mu);
    j->state = J_FREE;
    l->cons_seq++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (pass_end) shutdown_threads(l); /* the next call starts the next pass */
  }
  return GP_OK;
}

void gp_loader_tell(const gp_loader *l, int64_t *epoch, int64_t *index) {
  *epoch = l->epoch;
  *index = l->index;
}

gp_status gp_loader_seek(gp_loader *l, int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0 || (l->n_rep >= 0 && index > l->n_rep))
    return GP_ERR(GP_ERR_DATA,
                  "cannot resume data at epoch %lld, sample %lld: the split has "
                  "%lld samples",
                  (long long)epoch, (long long)index, (long long)l->n_rep);
  shutdown_threads(l);
  l->epoch = epoch;
  l->index = index;
  l->need_start = 1;
  return GP_OK;
}

gp_status gp_loader_want(gp_loader *l, int images, int replica, int replicas) {
  if (replicas < 1 || replica < 0 || replica >= replicas)
    return GP_ERR(GP_ERR_USAGE, "replica %d of %d: expected 0 <= replica < replicas", replica,
                  replicas);
  shutdown_threads(l); /* the batches prepared read what was wanted before: prepared again */
  l->want_images = images != 0;
  l->want_r = replica;
  l->want_R = replicas;
  l->need_start = 1;
  return GP_OK;
}

void gp_loader_stats_get(const gp_loader *l, gp_loader_stats *out) {
  memset(out, 0, sizeof *out);
  out->workers = l->nworkers;
  out->wait_s = l->wait_s;
  out->batches = l->batches;
  out->samples = l->samples;
  out->skipped = l->skipped;
  out->decoded = atomic_load_explicit(&l->decoded, memory_order_relaxed);
  snprintf(out->first_skip, sizeof out->first_skip, "%s", l->first_skip);
}

void gp_record_free(gp_record *r) {
  free(r->bytes);
  memset(r, 0, sizeof *r);
}

gp_status gp_record_reserve(gp_record *r, size_t n) {
  if (n <= r->cap && r->bytes) return GP_OK; /* empty records have a buffer too (memcpy) */
  size_t cap = r->cap ? r->cap : 4096;
  while (cap < n)
    cap *= 2;
  uint8_t *p = realloc(r->bytes, cap);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory for a %zu-byte record", n);
  r->bytes = p;
  r->cap = cap;
  return GP_OK;
}
