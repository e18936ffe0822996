/* Interleaved schedules in the executor: each of the K devices holds V model chunks, each chunk
 * a stage of its own (thread, parameters, arenas, channels), and the chunks of a device take
 * turns in the order of the device's list, so that the device runs one action at a time. */
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
    pl->st[v].turn_at = calloc(2 * (size_t)M + 1, sizeof *pl->st[v].turn_at);
    if (!s->actions[v] || !pl->st[v].turn_at)
      return GP_ERR(GP_ERR_NOMEM, "out of memory for the interleaved schedule");
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
      pl->st[v].turn_at[j] = i;
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
    pl->st[v].turn_at[s->n_actions[v]] = -1;
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
  for (int v = 0; pl->st && v < pl->k; v++)
    free(pl->st[v].turn_at);
  gp_schedule_free(&pl->dev_sched);
}

void gp_pl_turns_reset(gp_pipeline *pl) {
  for (int d = 0; pl->turn && d < pl->devices; d++)
    atomic_store_explicit(&pl->turn[d], 0, memory_order_relaxed);
}

/* How long a chunk waiting for its turn yields its core, polling, before it sleeps. Most
 * actions of a device pass the turn from one chunk's thread to another's: a sleeping thread
 * woken on a core that is busy (another process, or the sibling going on to its own wait) took
 * milliseconds to run again on the loaded 2-core machine, where a yielding one takes the core as
 * soon as the sibling lets it go. Yielding costs the sibling nothing: it runs whenever it can. */
#define TURN_SPIN_S 50e-3

gp_status gp_pl_turn_wait(stage *st, int a) {
  gp_pipeline *pl = st->pl;
  if (pl->chunks < 2 || st->turn_at[a] < 0) return GP_OK;
  _Atomic int *turn = &pl->turn[st->index % pl->devices];
  const int want = st->turn_at[a];
  if (atomic_load_explicit(turn, memory_order_acquire) >= want) return GP_OK;
  const double until = now_s() + TURN_SPIN_S;
  for (int i = 1; atomic_load_explicit(turn, memory_order_acquire) < want; i++) {
    if (i % 64 == 0) { /* a failure elsewhere stops the wait (under the lock: pl->failed) */
      pthread_mutex_lock(&pl->mu);
      int failed = pl->failed;
      pthread_mutex_unlock(&pl->mu);
      if (failed || now_s() > until) break;
    }
    sched_yield();
  }
  if (atomic_load_explicit(turn, memory_order_acquire) >= want) return GP_OK;
  struct timespec dl;
  gp_deadline_in(pl->watchdog_s, &dl);
  gp_status s = GP_OK;
  pthread_mutex_lock(&pl->mu);
  while (atomic_load_explicit(turn, memory_order_acquire) < want && !pl->failed) {
    int rc = pthread_cond_timedwait(&st->arrived, &pl->mu, &dl);
    if (rc == ETIMEDOUT && atomic_load_explicit(turn, memory_order_acquire) < want && !pl->failed) {
      const gp_action *ac = &pl->sched.actions[st->index][a];
      s = GP_ERR(GP_ERR_RUNTIME,
                 "watchdog: stage %d (chunk %d of device %d) waited more than %.0f s for its "
                 "turn to run %s of micro-batch %d",
                 st->index, st->index / pl->devices, st->index % pl->devices, pl->watchdog_s,
                 gp_action_name(ac->kind), ac->micro);
      break;
    }
  }
  if (s == GP_OK && pl->failed) s = GP_ERR(GP_ERR_RUNTIME, "stopped because another stage failed");
  pthread_mutex_unlock(&pl->mu);
  return s;
}

void gp_pl_turn_pass(stage *st, int a) {
  gp_pipeline *pl = st->pl;
  if (pl->chunks < 2 || st->turn_at[a] < 0) return;
  const int d = st->index % pl->devices, next = st->turn_at[a] + 1;
  atomic_store_explicit(&pl->turn[d], next, memory_order_release);
  const int owner = next < pl->dev_sched.n_actions[d] ? pl->dev_owner[d][next] : -1;
  if (owner < 0 || owner == st->index) return;
  /* under the lock: a sibling that saw the old turn is inside its wait by now */
  pthread_mutex_lock(&pl->mu);
  pthread_cond_broadcast(&pl->st[owner].arrived);
  pthread_mutex_unlock(&pl->mu);
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
