/* Interleaved schedules in the executor: each of the K devices holds V model chunks, each chunk
 * a stage of its own (thread, parameters, arenas, channels, step), and the thread of a device's
 * first chunk runs all its chunks' forwards and backwards in the order of the device's list
 * (stage.c's run_device), so that the device runs one action at a time. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec/internal.h"

/* The chunk stages' own lists: the device's actions of each chunk in the device's order, then
 * its step (outside the turns: the steps meet in collectives). */
static gp_status derive(gp_pipeline *pl) {
  const gp_schedule *ds = &pl->dev_sched;
  const int K = pl->devices, V = pl->chunks, M = pl->micro;
  gp_schedule *s = &pl->sched;
  memset(s, 0, sizeof *s);
  s->kind = GP_SCHED_INTERLEAVED;
  s->remat = GP_REMAT_NEVER;
  s->stages = K * V;
  s->micro = M;
  s->n_actions = calloc((size_t)s->stages, sizeof *s->n_actions);
  s->actions = calloc((size_t)s->stages, sizeof *s->actions);
  s->slots = calloc((size_t)s->stages, sizeof *s->slots);
  pl->dev_owner = calloc((size_t)K, sizeof *pl->dev_owner);
  pl->dev_at = calloc((size_t)K, sizeof *pl->dev_at);
  pl->rep_dur = calloc((size_t)K, sizeof *pl->rep_dur);
  pl->rep_rdur = calloc((size_t)K, sizeof *pl->rep_rdur);
  pl->turn = calloc((size_t)K, sizeof *pl->turn);
  if (!s->n_actions || !s->actions || !s->slots || !pl->dev_owner || !pl->dev_at || !pl->rep_dur ||
      !pl->rep_rdur || !pl->turn)
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the interleaved schedule");
  for (int v = 0; v < s->stages; v++) {
    s->actions[v] = calloc(2 * (size_t)M + 1, sizeof *s->actions[v]);
    if (!s->actions[v]) return GP_ERR(GP_ERR_NOMEM, "out of memory for the interleaved schedule");
  }
  for (int d = 0; d < K; d++) {
    const int n = ds->n_actions[d];
    pl->dev_owner[d] = calloc((size_t)n, sizeof *pl->dev_owner[d]);
    pl->dev_at[d] = calloc((size_t)n, sizeof *pl->dev_at[d]);
    pl->rep_dur[d] = calloc((size_t)n, sizeof *pl->rep_dur[d]);
    pl->rep_rdur[d] = calloc((size_t)n, sizeof *pl->rep_rdur[d]);
    if (!pl->dev_owner[d] || !pl->dev_at[d] || !pl->rep_dur[d] || !pl->rep_rdur[d])
      return GP_ERR(GP_ERR_NOMEM, "out of memory for the interleaved schedule");
    for (int i = 0; i < n; i++) {
      const gp_action *a = &ds->actions[d][i];
      if (a->kind == GP_A_STEP) { /* every chunk's own, below */
        pl->dev_owner[d][i] = -1;
        continue;
      }
      const int v = a->chunk * K + d, j = s->n_actions[v]++;
      if (j >= 2 * M) return GP_ERR(GP_ERR_RUNTIME, "internal: chunk %d has too many actions", v);
      s->actions[v][j] = (gp_action){.kind = a->kind, .micro = a->micro};
      pl->dev_owner[d][i] = v;
      pl->dev_at[d][i] = j;
    }
  }
  for (int v = 0; v < s->stages; v++) {
    int cur = 0, peak = 0;
    for (int j = 0; j < s->n_actions[v]; j++) {
      cur += s->actions[v][j].kind == GP_A_FORWARD ? 1 : -1;
      if (cur > peak) peak = cur;
    }
    s->slots[v] = peak > 0 ? peak : 1;
    s->actions[v][s->n_actions[v]++] = (gp_action){.kind = GP_A_STEP};
  }
  return GP_OK;
}

gp_status gp_pl_chunks_init(gp_pipeline *pl) {
  GP_TRY(gp_schedule_build_interleaved(pl->devices, pl->micro, pl->chunks, &pl->dev_sched));
  GP_TRY(gp_schedule_validate(&pl->dev_sched));
  GP_TRY(derive(pl));
  /* each chunk's list keeps the device order, which the device's validated list proves
   * complete; checked again as lists of their own */
  return gp_schedule_validate(&pl->sched);
}

void gp_pl_chunks_free(gp_pipeline *pl) {
  for (int d = 0; d < pl->devices; d++) {
    if (pl->dev_owner) free(pl->dev_owner[d]);
    if (pl->dev_at) free(pl->dev_at[d]);
    if (pl->rep_dur) free(pl->rep_dur[d]);
    if (pl->rep_rdur) free(pl->rep_rdur[d]);
  }
  free(pl->dev_owner);
  free(pl->dev_at);
  free(pl->rep_dur);
  free(pl->rep_rdur);
  free((void *)pl->turn);
  gp_schedule_free(&pl->dev_sched);
}

void gp_pl_turns_reset(gp_pipeline *pl) {
  for (int d = 0; pl->turn && d < pl->devices; d++)
    atomic_store_explicit(&pl->turn[d], 0, memory_order_relaxed);
}

/* Waits until the device's phase is at least want: yielding the core at first, then under the
 * watchdog (a device's first chunk waiting for the others to be ready, briefly) where `yield`,
 * else asleep until woken (the others waiting for the whole forward and backward phase, or a
 * failure). */
static gp_status wait_phase(stage *st, int want, int yield) {
  gp_pipeline *pl = st->pl;
  _Atomic int *phase = &pl->turn[st->index % pl->devices];
  for (int i = 0; yield && i < 1000 && atomic_load_explicit(phase, memory_order_acquire) < want;
       i++)
    sched_yield();
  if (atomic_load_explicit(phase, memory_order_acquire) >= want) return GP_OK;
  struct timespec dl;
  gp_deadline_in(pl->watchdog_s, &dl);
  gp_status s = GP_OK;
  pthread_mutex_lock(&pl->mu);
  while (atomic_load_explicit(phase, memory_order_acquire) < want && !pl->failed) {
    /* the others sleep on the pipeline's condition variable, not their stage's: the channels
     * wake one waiter of that, which must be the first chunk's thread running their actions */
    if (!yield) { /* a whole step's F and B may pass the watchdog: the runner's waits have it */
      pthread_cond_wait(&pl->cv, &pl->mu);
      continue;
    }
    int rc = pthread_cond_timedwait(&st->arrived, &pl->mu, &dl);
    if (rc == ETIMEDOUT && atomic_load_explicit(phase, memory_order_acquire) < want &&
        !pl->failed) {
      s = GP_ERR(GP_ERR_RUNTIME,
                 "watchdog: stage %d (chunk 0 of device %d) waited more than %.0f s for the "
                 "device's other chunks",
                 st->index, st->index % pl->devices, pl->watchdog_s);
      break;
    }
  }
  if (s == GP_OK && pl->failed) s = GP_ERR(GP_ERR_RUNTIME, "stopped because another stage failed");
  pthread_mutex_unlock(&pl->mu);
  return s;
}

/* Raises the device's phase and wakes the stages that wait on it. */
static void raise_phase(stage *st, int done) {
  gp_pipeline *pl = st->pl;
  const int d = st->index % pl->devices;
  pthread_mutex_lock(&pl->mu); /* a stage that saw the old value is inside its wait by now */
  if (done) {
    atomic_store_explicit(&pl->turn[d], pl->chunks, memory_order_release);
    pthread_cond_broadcast(&pl->cv); /* the device's other chunks */
  } else {
    atomic_fetch_add_explicit(&pl->turn[d], 1, memory_order_acq_rel);
    pthread_cond_broadcast(&pl->st[d].arrived); /* its first chunk */
  }
  pthread_mutex_unlock(&pl->mu);
}

gp_status gp_pl_device_ready(stage *st) {
  gp_pipeline *pl = st->pl;
  if (st->index < pl->devices) return wait_phase(st, pl->chunks - 1, 1);
  raise_phase(st, 0);
  return wait_phase(st, pl->chunks, 0);
}

void gp_pl_device_done(stage *st) {
  raise_phase(st, 1);
}

void gp_pl_replay_chunks(gp_pipeline *pl) {
  const gp_schedule *ds = &pl->dev_sched;
  const double *dur[GP_MAX_DEVICES], *rdur[GP_MAX_DEVICES];
  for (int d = 0; d < pl->devices; d++) {
    for (int i = 0; i < ds->n_actions[d]; i++) {
      const int v = pl->dev_owner[d][i];
      double t = 0;
      if (v >= 0) {
        t = pl->st[v].rec.act_s[pl->dev_at[d][i]];
        pl->rep_rdur[d][i] = pl->st[v].rec.rec_s[pl->dev_at[d][i]];
      } else { /* the device's step: its chunks' steps, one after another on its cores */
        for (int c = 0; c < pl->chunks; c++) {
          const stage *cs = &pl->st[c * pl->devices + d];
          t += cs->rec.act_s[pl->sched.n_actions[cs->index] - 1];
        }
        pl->rep_rdur[d][i] = 0;
      }
      pl->rep_dur[d][i] = t;
    }
    dur[d] = pl->rep_dur[d];
    rdur[d] = pl->rep_rdur[d];
  }
  double span, busy;
  if (gp_schedule_replay(ds, dur, rdur, &span, &busy) != GP_OK) pl->replay_lost = 1;
  pl->replay_span_s += span;
  pl->replay_busy_s += busy;
}
