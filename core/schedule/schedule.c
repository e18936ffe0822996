/* Pipeline schedules as data: builds the per-stage action lists (GPipe fill-drain, 1F1B; the
 * zero-bubble lists come from zerobubble.c),
 * proves them deadlock-free by a dependency simulation, and times them with an event model. */
#include "core/schedule/schedule.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/schedule/lists.h"

static const char *const letters[GP_A_KINDS] = {"F", "B", "W", "S", "R", "T"};
static const char *const names[GP_A_KINDS] = {"forward", "backward",  "weight",
                                              "step",    "recompute", "transfer"};
_Static_assert(sizeof letters / sizeof *letters == GP_A_KINDS, "a letter per action kind");
_Static_assert(sizeof names / sizeof *names == GP_A_KINDS, "a name per action kind");

const char *gp_action_letter(gp_action_kind k) {
  return k >= 0 && k < GP_A_KINDS ? letters[k] : "?";
}

const char *gp_action_name(gp_action_kind k) {
  return k >= 0 && k < GP_A_KINDS ? names[k] : "?";
}

/* Beyond these a schedule is a typo, not a plan: 2^20 stages or micro-batches, and a list total
 * that keeps the per-stage arrays well inside memory. */
#define GP_SCHED_MAX_DIM (1 << 20)
#define GP_SCHED_MAX_CELLS (1LL << 26)

/* V, the model chunks each stage (device) holds (interleaved schedules; 1 for the others), and
 * the virtual stage of an action: chunk c of stage s is v = c K + s, so the model runs through
 * stages 0..K-1 V times. */
static int chunks_of(const gp_schedule *sc) {
  return sc->chunks > 1 ? sc->chunks : 1;
}
static int vstage(const gp_schedule *sc, int s, const gp_action *a) {
  return a->chunk * sc->stages + s;
}

/* Whether a stage's list splits its backwards: a W for every micro-batch (zero-bubble). */
static int list_has_w(const gp_action *a, int n) {
  for (int i = 0; i < n; i++)
    if (a[i].kind == GP_A_WEIGHT) return 1;
  return 0;
}

/* Micro-batches forwarded and not yet backwarded, at most, walking the list in order (until
 * their W, where the list defers it: W still reads the activations). */
static int list_peak_in_flight(const gp_action *a, int n) {
  int cur = 0, peak = 0, w = list_has_w(a, n);
  for (int i = 0; i < n; i++) {
    if (a[i].kind == GP_A_FORWARD && ++cur > peak) peak = cur;
    if (a[i].kind == (w ? GP_A_WEIGHT : GP_A_BACKWARD)) cur--;
  }
  return peak;
}

/* except_last keeps the activations of the micro-batch a stage backwards first: under GPipe
 * the last one, whose backward follows its forward (torchgpipe's rule); under 1F1B the first,
 * which only forwards (their activations dropped) run beside. Keeping 1F1B's last instead put
 * its activations beside each recompute of the backwards before it: two sets, as many as
 * `never` holds at K - s = 2. */
static int wants_recompute(gp_schedule_kind kind, gp_remat remat, int m, int micro) {
  int kept = kind == GP_SCHED_1F1B ? 0 : micro - 1;
  return remat == GP_REMAT_ALWAYS || (remat == GP_REMAT_EXCEPT_LAST && m != kept);
}

static void put(gp_action *list, int *n, gp_action_kind kind, int m, int rc) {
  list[*n] = (gp_action){.kind = kind, .micro = m, .recompute = rc};
  (*n)++;
}

static int fill_stage(gp_schedule_kind kind, gp_remat remat, int stages, int micro, int s,
                      gp_action *list) {
  int n = 0;
  if (kind == GP_SCHED_GPIPE) {
    for (int m = 0; m < micro; m++)
      put(list, &n, GP_A_FORWARD, m, wants_recompute(kind, remat, m, micro));
    /* reverse order, as torchgpipe: the last forward's activations are the freshest */
    for (int m = micro - 1; m >= 0; m--)
      put(list, &n, GP_A_BACKWARD, m, wants_recompute(kind, remat, m, micro));
  } else {
    /* PipeDream-flush: stage s forwards K - s - 1 micro-batches ahead, which is exactly what
     * it takes for the first gradient to come back when it runs its next forward */
    int warm = stages - s - 1 < micro ? stages - s - 1 : micro;
    int nf = 0, nb = 0;
    while (nf < warm) {
      put(list, &n, GP_A_FORWARD, nf, wants_recompute(kind, remat, nf, micro));
      nf++;
    }
    while (nf < micro) {
      put(list, &n, GP_A_FORWARD, nf, wants_recompute(kind, remat, nf, micro));
      nf++;
      put(list, &n, GP_A_BACKWARD, nb, wants_recompute(kind, remat, nb, micro));
      nb++;
    }
    while (nb < micro) {
      put(list, &n, GP_A_BACKWARD, nb, wants_recompute(kind, remat, nb, micro));
      nb++;
    }
  }
  put(list, &n, GP_A_STEP, 0, 0);
  return n;
}

/* The schedule's frame: its shape and per-stage arrays, each list with room for `room`
 * actions. */
static gp_status frame(gp_schedule *out, gp_schedule_kind kind, gp_remat remat, int stages,
                       int micro, int chunks, size_t room) {
  out->kind = kind;
  out->remat = remat;
  out->stages = stages;
  out->micro = micro;
  out->chunks = chunks;
  out->n_actions = calloc((size_t)stages, sizeof *out->n_actions);
  out->actions = calloc((size_t)stages, sizeof *out->actions);
  out->slots = calloc((size_t)stages, sizeof *out->slots);
  int ok = out->n_actions && out->actions && out->slots;
  for (int s = 0; ok && s < stages; s++)
    ok = (out->actions[s] = malloc(sizeof(gp_action) * room)) != NULL;
  if (ok) return GP_OK;
  gp_schedule_free(out);
  return GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for %d stages x %d micro-batches", stages,
                micro);
}

gp_status gp_schedule_build(gp_schedule_kind kind, gp_remat remat, int stages, int micro,
                            gp_schedule *out) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "schedule: no output given");
  memset(out, 0, sizeof *out);
  const int zb = kind == GP_SCHED_ZB_H1 || kind == GP_SCHED_ZB_H2;
  if (kind != GP_SCHED_GPIPE && kind != GP_SCHED_1F1B && !zb)
    return GP_ERR(GP_ERR_USAGE, "schedule: unknown schedule kind %d", (int)kind);
  if (zb && remat != GP_REMAT_NEVER && remat != GP_REMAT_AUTO)
    return GP_ERR(GP_ERR_USAGE, "schedule: the zero-bubble lists re-materialize nothing yet");
  if (remat != GP_REMAT_ALWAYS && remat != GP_REMAT_EXCEPT_LAST && remat != GP_REMAT_NEVER &&
      remat != GP_REMAT_AUTO)
    return GP_ERR(GP_ERR_USAGE, "schedule: unknown re-materialization mode %d", (int)remat);
  if (stages < 1 || stages > GP_SCHED_MAX_DIM)
    return GP_ERR(GP_ERR_USAGE, "schedule: stages must be in 1..%d, got %d", GP_SCHED_MAX_DIM,
                  stages);
  if (micro < 1 || micro > GP_SCHED_MAX_DIM)
    return GP_ERR(GP_ERR_USAGE, "schedule: micro-batches must be in 1..%d, got %d",
                  GP_SCHED_MAX_DIM, micro);
  if ((long long)stages * micro > GP_SCHED_MAX_CELLS)
    return GP_ERR(GP_ERR_USAGE, "schedule: %d stages x %d micro-batches is more than %lld", stages,
                  micro, GP_SCHED_MAX_CELLS);
  GP_TRY(frame(out, kind, remat, stages, micro, 1, (zb ? 3 : 2) * (size_t)micro + 1));
  if (zb) {
    gp_status st = gp_zb_fill(kind, stages, micro, out->actions, out->n_actions);
    if (st != GP_OK) {
      gp_schedule_free(out);
      return st;
    }
  }
  for (int s = 0; s < stages; s++) {
    if (!zb) out->n_actions[s] = fill_stage(kind, remat, stages, micro, s, out->actions[s]);
    out->slots[s] = list_peak_in_flight(out->actions[s], out->n_actions[s]);
    /* except_last recomputes where that saves memory: a stage that holds one micro-batch at a
     * time (1F1B's last, each backward right after its forward) would rebuild the only
     * activations it holds, paying a forward for nothing. (`always` is asked for by name.) */
    if (remat == GP_REMAT_EXCEPT_LAST && out->slots[s] <= 1)
      for (int a = 0; a < out->n_actions[s]; a++)
        out->actions[s][a].recompute = 0;
  }
  return GP_OK;
}

gp_status gp_schedule_build_drops(gp_schedule_kind kind, int stages, int micro, const int *drop,
                                  gp_schedule *out) {
  GP_TRY(gp_schedule_build(kind, GP_REMAT_AUTO, stages, micro, out));
  for (int s = 0; s < stages && drop; s++) {
    int d = drop[s], P = out->slots[s];
    const char *why = d < 0 ? "is negative"
                      : d > 0 && (kind == GP_SCHED_ZB_H1 || kind == GP_SCHED_ZB_H2)
                          ? "is not 0 in a zero-bubble list"
                      : d > P ? "is more than the slots"
                              : NULL;
    if (why) {
      gp_schedule_free(out);
      return GP_ERR(GP_ERR_USAGE, "schedule: stage %d's %d dropping slots (of %d) %s", s, d, P,
                    why);
    }
    /* one micro-batch in flight at most: dropping it would rebuild the only activations held */
    if (P <= 1) continue;
    for (int a = 0; a < out->n_actions[s]; a++) {
      gp_action *ac = &out->actions[s][a];
      if (ac->kind == GP_A_FORWARD || ac->kind == GP_A_BACKWARD) ac->recompute = ac->micro % P < d;
    }
  }
  return GP_OK;
}

gp_status gp_schedule_build_interleaved(int stages, int micro, int chunks, gp_schedule *out) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "schedule: no output given");
  memset(out, 0, sizeof *out);
  if (stages < 1 || stages > GP_SCHED_MAX_DIM || micro < 1 || micro > GP_SCHED_MAX_DIM ||
      chunks < 2 || chunks > GP_SCHED_MAX_DIM ||
      (long long)stages * micro * chunks > GP_SCHED_MAX_CELLS)
    return GP_ERR(GP_ERR_USAGE,
                  "schedule: interleaved: %d stages x %d micro-batches x %d chunks (chunks >= 2)",
                  stages, micro, chunks);
  if (micro % stages)
    return GP_ERR(GP_ERR_USAGE,
                  "schedule: interleaved 1F1B takes micro-batches in groups of the stages: %d "
                  "micro-batches for %d stages (use %d or %d)",
                  micro, stages, micro / stages * stages > 0 ? micro / stages * stages : stages,
                  (micro / stages + 1) * stages);
  GP_TRY(frame(out, GP_SCHED_INTERLEAVED, GP_REMAT_NEVER, stages, micro, chunks,
               2 * (size_t)micro * (size_t)chunks + 1));
  gp_interleaved_fill(stages, micro, chunks, out->actions, out->n_actions);
  for (int s = 0; s < stages; s++)
    out->slots[s] = list_peak_in_flight(out->actions[s], out->n_actions[s]);
  return GP_OK;
}

void gp_schedule_free(gp_schedule *s) {
  if (!s) return;
  if (s->actions)
    for (int i = 0; i < s->stages; i++)
      free(s->actions[i]);
  free(s->actions);
  free(s->n_actions);
  free(s->slots);
  memset(s, 0, sizeof *s);
}

/* ---- checking the lists ---------------------------------------------------------------- */

/* One stage's list on its own: every forward and backward once, micro indices in range, each
 * backward after its own forward with the same recompute flag, one step, last. seen: 2*micro. */
static gp_status check_stage(const gp_schedule *sc, int s, int *seen) {
  int M = sc->micro, n = sc->n_actions[s];
  const gp_action *a = sc->actions[s];
  if (n < 1 || !a) return GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d has no actions", s);
  const int V = chunks_of(sc);
  memset(seen, 0xff, sizeof(int) * 3 * (size_t)M * (size_t)V); /* -1: unseen, else the action */
  const int w = list_has_w(a, n);
  for (int i = 0; i < n; i++) {
    if (a[i].kind == GP_A_STEP) {
      if (i != n - 1)
        return GP_ERR(GP_ERR_RUNTIME,
                      "schedule: stage %d: step at action %d is not last (%d actions)", s, i, n);
      continue;
    }
    if (a[i].kind != GP_A_FORWARD && a[i].kind != GP_A_BACKWARD && a[i].kind != GP_A_WEIGHT)
      return a[i].kind >= 0 && a[i].kind < GP_A_KINDS
                 ? GP_ERR(GP_ERR_RUNTIME,
                          "schedule: stage %d: action %d is a %s, which no schedule here runs", s,
                          i, gp_action_name(a[i].kind))
                 : GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d: action %d has unknown kind %d", s, i,
                          (int)a[i].kind);
    int m = a[i].micro, bw = a[i].kind == GP_A_BACKWARD ? 1 : a[i].kind == GP_A_WEIGHT ? 2 : 0;
    const char *what = gp_action_name(a[i].kind);
    if (m < 0 || m >= M)
      return GP_ERR(GP_ERR_RUNTIME,
                    "schedule: stage %d: action %d %s(%d): micro-batch out of range 0..%d", s, i,
                    what, m, M - 1);
    if (a[i].chunk < 0 || a[i].chunk >= V)
      return GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d: action %d %s(%d): chunk %d of %d", s, i,
                    what, m, a[i].chunk, V);
    m += a[i].chunk * M; /* seen[] is per chunk and micro-batch; messages name the micro-batch */
    if (seen[3 * m + bw] >= 0)
      return GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d: %s(%d) appears twice (actions %d and %d)",
                    s, what, a[i].micro, seen[3 * m + bw], i);
    seen[3 * m + bw] = i;
    if (bw == 2) {
      if (seen[3 * m + 1] < 0)
        return GP_ERR(GP_ERR_RUNTIME,
                      "schedule: stage %d: weight(%d) at action %d before its backward", s,
                      a[i].micro, i);
      if (a[i].recompute)
        return GP_ERR(GP_ERR_RUNTIME,
                      "schedule: stage %d: weight(%d) marked to recompute (only a backward does)",
                      s, a[i].micro);
      continue;
    }
    if (bw && seen[3 * m] < 0)
      return GP_ERR(GP_ERR_RUNTIME,
                    "schedule: stage %d: backward(%d) at action %d before its forward", s,
                    a[i].micro, i);
    if (bw && !a[seen[3 * m]].recompute != !a[i].recompute)
      return GP_ERR(GP_ERR_RUNTIME,
                    "schedule: stage %d: forward(%d) and backward(%d) disagree on recompute", s,
                    a[i].micro, a[i].micro);
  }
  if (a[n - 1].kind != GP_A_STEP)
    return GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d: the last action is not the step", s);
  /* W for every micro-batch or for none: a stage splits all its backwards or none */
  for (int m = 0; m < M * V; m++)
    for (int bw = 0; bw < 2 + w; bw++)
      if (seen[3 * m + bw] < 0)
        return GP_ERR(GP_ERR_RUNTIME, "schedule: stage %d: %s(%d)%s is missing", s,
                      gp_action_name(bw == 0   ? GP_A_FORWARD
                                     : bw == 1 ? GP_A_BACKWARD
                                               : GP_A_WEIGHT),
                      m % M, V > 1 ? " of a chunk" : "");
  return GP_OK;
}

static gp_status check_shape(const gp_schedule *sc) {
  if (!sc) return GP_ERR(GP_ERR_USAGE, "schedule: none given");
  if (sc->stages < 1 || sc->stages > GP_SCHED_MAX_DIM || sc->micro < 1 ||
      sc->micro > GP_SCHED_MAX_DIM || (long long)sc->stages * sc->micro > GP_SCHED_MAX_CELLS)
    return GP_ERR(GP_ERR_RUNTIME, "schedule: bad shape: %d stages x %d micro-batches", sc->stages,
                  sc->micro);
  if (!sc->n_actions || !sc->actions)
    return GP_ERR(GP_ERR_RUNTIME, "schedule: action lists missing");
  if (sc->chunks > 1 && (long long)sc->stages * sc->chunks * sc->micro > GP_SCHED_MAX_CELLS)
    return GP_ERR(GP_ERR_RUNTIME, "schedule: bad shape: %d chunks", sc->chunks);
  int *seen = malloc(sizeof(int) * 3 * (size_t)sc->micro * (size_t)chunks_of(sc));
  if (!seen) return GP_ERR(GP_ERR_NOMEM, "schedule: out of memory");
  gp_status st = GP_OK;
  for (int s = 0; s < sc->stages && st == GP_OK; s++)
    st = check_stage(sc, s, seen);
  free(seen);
  return st;
}

/* The dependency simulation shared by validate (cost == NULL) and simulate: every stage runs
 * its next action as soon as that action's inputs exist. Since each stage is sequential and
 * the inputs are fixed by the dependencies, the order in which stages are visited changes
 * nothing; times, when asked for, are the longest paths of the dependency graph. */
typedef struct walk {
  const gp_schedule *sc;
  const gp_stage_cost *cost;
  const double *const *dur, *const *rdur; /* replay: each action's own time (cost is NULL) */
  unsigned char *fdone, *bdone, *wdone;   /* [s * M + m] */
  unsigned char *has_w;                   /* per stage: its backwards are split (B, then W) */
  double *fend, *bend;                    /* end times, [s * M + m] (timing only) */
  double *free_at, *busy;                 /* per stage (timing only) */
  int *pos;                               /* per stage: index of the next action */
  gp_sim_events *ev;                      /* when asked for: every timed action (timing only) */
  const gp_sim_share *share;              /* stages sharing devices (NULL: a device each) */
  double **slot_free;                     /* per device of share: when each slot is free */
  unsigned char *turns; /* per stage: its device has fewer slots than stages (they take turns) */
  const gp_walk_from *from; /* NULL: every stage starts free at 0 */
} walk;

/* Whether stage s's next action can run; if not, why (written to why). */
static int ready(const walk *w, int s, char *why, size_t nwhy) {
  const gp_schedule *sc = w->sc;
  int M = sc->micro, K = sc->stages, VS = K * chunks_of(sc);
  const gp_action *a = &sc->actions[s][w->pos[s]];
  int m = a->micro, v = vstage(sc, s, a);
  if (a->kind == GP_A_FORWARD) {
    if (v == 0 || w->fdone[(v - 1) * M + m]) return 1;
    snprintf(why, nwhy, "forward(%d) on stage %d", m, (v - 1) % K);
    return 0;
  }
  if (a->kind == GP_A_BACKWARD) {
    if (!w->fdone[v * M + m]) {
      snprintf(why, nwhy, "its own forward(%d)", m);
      return 0;
    }
    if (v == VS - 1 || w->bdone[(v + 1) * M + m]) return 1;
    snprintf(why, nwhy, "backward(%d) on stage %d", m, (v + 1) % K);
    return 0;
  }
  if (a->kind == GP_A_WEIGHT) {
    if (w->bdone[v * M + m]) return 1;
    snprintf(why, nwhy, "its own backward(%d)", m);
    return 0;
  }
  for (int c = s; c < VS; c += K) /* the step: after every chunk's backwards (and Ws) */
    for (int k = 0; k < M; k++)
      if (!w->bdone[c * M + k] || (w->has_w[s] && !w->wdone[c * M + k])) {
        snprintf(why, nwhy, "its own %s(%d)", w->bdone[c * M + k] ? "weight" : "backward", k);
        return 0;
      }
  return 1;
}

/* When stage s's next action (known to be ready) would run: its recompute from *rstart, the
 * action from *start for *dur; *slot: the slot of its stage's device it takes (-1: no
 * sharing). A shared device's slot is held from the recompute to the action's end. */
typedef struct timing {
  double rstart, start, dur, recompute;
  int slot;
} timing;

static timing time_one(const walk *w, int s) {
  const gp_schedule *sc = w->sc;
  int M = sc->micro, VS = sc->stages * chunks_of(sc);
  const int at = w->pos[s];
  const gp_action *a = &sc->actions[s][at];
  int m = a->micro, v = vstage(sc, s, a);
  static const gp_stage_cost none; /* a replay's hand-offs are instant */
  const gp_stage_cost *c = w->cost ? &w->cost[v] : &none;
  timing t = {.slot = -1};
  /* A re-materializing backward recomputes first, as soon as the stage is free (its own
   * forward has ended), and only then waits for the gradient, as the pipeline's stages do:
   * the recompute fills time the stage would otherwise idle. */
  double ready = w->free_at[s], arrive = 0;
  if (w->share && w->turns[s]) {
    int d = w->share->device[s];
    const double *f = w->slot_free[d];
    t.slot = 0;
    for (int k = 1; k < w->share->slots[d]; k++)
      if (f[k] < f[t.slot]) t.slot = k;
    if (f[t.slot] > ready) ready = f[t.slot];
  }
  t.rstart = ready;
  if (a->kind == GP_A_FORWARD) {
    if (v > 0) arrive = w->fend[(v - 1) * M + m] + (w->cost ? w->cost[v - 1].send : 0);
  } else if (a->kind == GP_A_BACKWARD) {
    if (a->recompute) t.recompute = w->dur ? w->rdur[s][at] : c->fwd;
    ready += t.recompute;
    /* the gradient crosses the same boundary as the activation, so it costs the same send */
    if (v < VS - 1) arrive = w->bend[(v + 1) * M + m] + c->send;
  }
  t.start = ready > arrive ? ready : arrive;
  /* a split backward: B is the whole but its W half */
  t.dur = w->dur                     ? w->dur[s][at]
          : a->kind == GP_A_FORWARD  ? c->fwd
          : a->kind == GP_A_BACKWARD ? c->bwd - (w->has_w[s] ? c->wgt : 0.0)
          : a->kind == GP_A_WEIGHT   ? c->wgt
                                     : c->step;
  return t;
}

/* Runs stage s's next action (already known to be ready). */
static void run_one(walk *w, int s) {
  const gp_schedule *sc = w->sc;
  int M = sc->micro;
  const gp_action *a = &sc->actions[s][w->pos[s]];
  int m = a->micro, i = vstage(sc, s, a) * M + m;
  if (!w->cost && !w->dur) {
    w->pos[s]++;
    if (a->kind == GP_A_FORWARD) w->fdone[i] = 1;
    if (a->kind == GP_A_BACKWARD) w->bdone[i] = 1;
    if (a->kind == GP_A_WEIGHT) w->wdone[i] = 1;
    return;
  }
  const timing t = time_one(w, s);
  w->pos[s]++;
  if (a->kind == GP_A_FORWARD) w->fdone[i] = 1;
  if (a->kind == GP_A_BACKWARD) w->bdone[i] = 1;
  if (a->kind == GP_A_WEIGHT) w->wdone[i] = 1;
  const double end = t.start + t.dur;
  w->free_at[s] = end;
  if (t.slot >= 0) w->slot_free[w->share->device[s]][t.slot] = end;
  w->busy[s] += t.recompute + t.dur;
  if (a->kind == GP_A_FORWARD) w->fend[i] = end;
  if (a->kind == GP_A_BACKWARD) w->bend[i] = end;
  if (w->ev && a->kind != GP_A_STEP) {
    const int rc = a->kind == GP_A_BACKWARD && a->recompute;
    w->ev->event[s][w->ev->n[s]++] = (gp_sim_event){.kind = a->kind,
                                                    .micro = m,
                                                    .chunk = a->chunk,
                                                    .recompute = a->recompute,
                                                    .rstart = rc ? t.rstart : t.start,
                                                    .rend = rc ? t.rstart + t.recompute : t.start,
                                                    .start = t.start,
                                                    .end = end};
  }
}

static gp_status deadlock(const walk *w) {
  char msg[1024], why[96];
  int len = snprintf(msg, sizeof msg, "schedule deadlocks:"), listed = 0, stuck = 0;
  for (int s = 0; s < w->sc->stages; s++) {
    if (w->pos[s] >= w->sc->n_actions[s]) continue;
    stuck++;
    if (listed == 8 || len >= (int)sizeof msg - 1) continue; /* the first few say enough */
    const gp_action *a = &w->sc->actions[s][w->pos[s]];
    ready(w, s, why, sizeof why);
    char act[32];
    if (a->kind == GP_A_STEP)
      snprintf(act, sizeof act, "step");
    else
      snprintf(act, sizeof act, "%s(%d)", gp_action_name(a->kind), a->micro);
    len += snprintf(msg + len, sizeof msg - (size_t)len, "%s stage %d at action %d %s waits for %s",
                    listed ? ";" : "", s, w->pos[s], act, why);
    listed++;
  }
  if (stuck > listed && len < (int)sizeof msg - 1)
    snprintf(msg + len, sizeof msg - (size_t)len, "; and %d more stages", stuck - listed);
  return GP_ERR(GP_ERR_RUNTIME, "%s", msg);
}

/* Stages sharing devices: the next action to run is, of all the ready ones, the one that can
 * start first (ties to the lower stage), so a shared device's slots go in time order. */
static int pick_first(const walk *w) {
  int best = -1;
  double first = 0;
  char why[96];
  for (int s = 0; s < w->sc->stages; s++) {
    if (w->pos[s] >= w->sc->n_actions[s] || !ready(w, s, why, sizeof why)) continue;
    const timing t1 = time_one(w, s);
    double t = t1.recompute > 0 ? t1.rstart : t1.start; /* when it takes its slot */
    if (best < 0 || t < first) best = s, first = t;
  }
  return best;
}

static gp_status walk_run(const gp_schedule *sc, const gp_stage_cost *cost,
                          const double *const *dur, const double *const *rdur,
                          const gp_sim_share *share, gp_sim_events *ev, const gp_walk_from *from,
                          walk *w) {
  size_t K = (size_t)sc->stages, cells = K * (size_t)chunks_of(sc) * (size_t)sc->micro;
  memset(w, 0, sizeof *w);
  w->sc = sc;
  w->from = cost ? from : NULL;
  w->cost = cost;
  w->dur = dur;
  w->rdur = rdur;
  w->ev = cost ? ev : NULL;
  w->fdone = calloc(cells, 1);
  w->bdone = calloc(cells, 1);
  w->wdone = calloc(cells, 1);
  w->has_w = calloc(K, 1);
  w->pos = calloc(K, sizeof *w->pos);
  int ok = w->fdone && w->bdone && w->wdone && w->has_w && w->pos;
  for (size_t s = 0; ok && s < K; s++)
    w->has_w[s] = (unsigned char)list_has_w(sc->actions[s], sc->n_actions[s]);
  if (cost || dur) {
    w->fend = calloc(cells, sizeof *w->fend);
    w->bend = calloc(cells, sizeof *w->bend);
    w->free_at = calloc(K, sizeof *w->free_at);
    w->busy = calloc(K, sizeof *w->busy);
    ok = ok && w->fend && w->bend && w->free_at && w->busy;
  }
  if (ok && share && (cost || dur)) {
    /* a device with a slot for each of its stages is as good as a device each */
    int *on = calloc((size_t)share->devices, sizeof *on), any = 0;
    w->turns = calloc(K, 1);
    ok = on && w->turns;
    for (size_t s = 0; ok && s < K; s++)
      on[share->device[s]]++;
    for (size_t s = 0; ok && s < K; s++)
      any |= w->turns[s] = on[share->device[s]] > share->slots[share->device[s]];
    free(on);
    if (ok && any) {
      w->share = share;
      ok = (w->slot_free = calloc((size_t)share->devices, sizeof *w->slot_free)) != NULL;
      for (int d = 0; ok && d < share->devices; d++)
        ok = (w->slot_free[d] = calloc((size_t)share->slots[d], sizeof **w->slot_free)) != NULL;
    }
  }
  if (!ok) return GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for the dependency simulation");
  if (w->from) { /* a step that starts where the last one left the stages (overlap.c) */
    memcpy(w->free_at, w->from->free_at, K * sizeof *w->free_at);
    for (int m = 0; m < w->from->pre; m++)
      w->fdone[m] = 1, w->fend[m] = w->from->pre_end[m];
    w->pos[0] = w->from->pre;
  }
  if (w->share) {
    for (int s; (s = pick_first(w)) >= 0;)
      run_one(w, s);
    for (int s = 0; s < sc->stages; s++)
      if (w->pos[s] < sc->n_actions[s]) return deadlock(w);
    return GP_OK;
  }
  char why[96];
  for (int moved = 1, left = 1; left;) {
    if (!moved) return deadlock(w);
    moved = left = 0;
    for (int s = 0; s < sc->stages; s++) {
      while (w->pos[s] < sc->n_actions[s] && ready(w, s, why, sizeof why)) {
        run_one(w, s);
        moved = 1;
      }
      if (w->pos[s] < sc->n_actions[s]) left = 1;
    }
  }
  return GP_OK;
}

static void walk_free(walk *w) {
  free(w->fdone);
  free(w->bdone);
  free(w->wdone);
  free(w->has_w);
  free(w->fend);
  free(w->bend);
  free(w->free_at);
  free(w->busy);
  free(w->pos);
  for (int d = 0; w->slot_free && d < w->share->devices; d++)
    free(w->slot_free[d]);
  free(w->slot_free);
  free(w->turns);
}

gp_status gp_schedule_validate(const gp_schedule *s) {
  GP_TRY(check_shape(s));
  walk w;
  gp_status st = walk_run(s, NULL, NULL, NULL, NULL, NULL, NULL, &w);
  walk_free(&w);
  return st;
}

/* ---- timing and memory ----------------------------------------------------------------- */

/* Activation bytes on stage s, walking its list: a stage runs one action at a time, so the
 * list order is the time order and the peak needs no clock. held: V x M entries. A split
 * backward frees at its W, and from its B holds the output gradients W reads (w_bytes). */
static double stage_peak_bytes(const gp_schedule *sc, int s, const gp_stage_cost *cost,
                               double *held) {
  const gp_action *a = sc->actions[s];
  const int n = sc->n_actions[s], split = list_has_w(a, n);
  double cur = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    if (a[i].kind == GP_A_STEP) continue;
    const gp_stage_cost *c = &cost[vstage(sc, s, &a[i])];
    int m = a[i].chunk * sc->micro + a[i].micro;
    if (a[i].kind == GP_A_FORWARD) {
      held[m] = a[i].recompute ? c->input_bytes : c->act_bytes;
      cur += held[m];
    } else if (a[i].kind == GP_A_BACKWARD) {
      if (a[i].recompute) cur += c->act_bytes; /* the re-materialized activations */
      if (cur > peak) peak = cur;
      if (split) { /* the recomputed set, if any, stays for W in place of the kept input */
        if (a[i].recompute) cur -= held[m], held[m] = c->act_bytes;
        cur += c->w_bytes;
        held[m] += c->w_bytes;
      } else {
        cur -= held[m] + (a[i].recompute ? c->act_bytes : 0);
      }
    } else if (a[i].kind == GP_A_WEIGHT) {
      cur -= held[m];
    }
    if (cur > peak) peak = cur;
  }
  return peak;
}

/* events, when not NULL, has its per-stage arrays allocated (n_actions entries) and zeroed n. */
static gp_status simulate(const gp_schedule *s, const gp_stage_cost *cost,
                          const gp_sim_share *share, gp_sim_result *out, gp_sim_events *events) {
  if (!out) return GP_ERR(GP_ERR_USAGE, "schedule: no output given");
  memset(out, 0, sizeof *out);
  if (!cost) return GP_ERR(GP_ERR_USAGE, "schedule: no stage costs given");
  GP_TRY(check_shape(s));
  for (int k = 0; k < s->stages * chunks_of(s); k++) { /* a cost per virtual stage */
    const gp_stage_cost *c = &cost[k];
    double v[8] = {c->fwd,         c->bwd,  c->send, c->act_bytes,
                   c->input_bytes, c->step, c->wgt,  c->w_bytes};
    for (int i = 0; i < 8; i++)
      if (!isfinite(v[i]) || v[i] < 0)
        return GP_ERR(GP_ERR_USAGE, "schedule: stage %d: costs must be finite and >= 0", k);
    if (c->wgt > c->bwd)
      return GP_ERR(GP_ERR_USAGE, "schedule: stage %d: W (%g) is part of the backward (%g)", k,
                    c->wgt, c->bwd);
  }
  walk w;
  gp_status st = walk_run(s, cost, NULL, NULL, share, events, NULL, &w);
  double *held =
      st == GP_OK ? malloc(sizeof(double) * (size_t)s->micro * (size_t)chunks_of(s)) : NULL;
  out->stage = st == GP_OK ? calloc((size_t)s->stages, sizeof *out->stage) : NULL;
  if (st == GP_OK && (!held || !out->stage))
    st = GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for the simulation");
  if (st == GP_OK) {
    double total = 0;
    for (int k = 0; k < s->stages; k++) {
      gp_sim_stage *r = &out->stage[k];
      r->busy = w.busy[k];
      r->peak_in_flight = list_peak_in_flight(s->actions[k], s->n_actions[k]);
      r->peak_bytes = stage_peak_bytes(s, k, cost, held);
      total += w.busy[k];
      if (w.free_at[k] > out->makespan) out->makespan = w.free_at[k];
    }
    /* a pipeline that costs nothing has nothing idle either */
    out->bubble = out->makespan > 0 ? 1.0 - total / (s->stages * out->makespan) : 0.0;
  }
  free(held);
  walk_free(&w);
  if (st != GP_OK) gp_sim_result_free(out);
  return st;
}

gp_status gp_schedule_simulate(const gp_schedule *s, const gp_stage_cost *cost,
                               gp_sim_result *out) {
  return simulate(s, cost, NULL, out, NULL);
}

static gp_status check_share(const gp_schedule *s, const gp_sim_share *sh) {
  if (!sh->device || !sh->slots || sh->devices < 1)
    return GP_ERR(GP_ERR_USAGE, "schedule: a device sharing without devices");
  for (int d = 0; d < sh->devices; d++)
    if (sh->slots[d] < 1)
      return GP_ERR(GP_ERR_USAGE, "schedule: device %d runs %d actions at once (needs 1 or more)",
                    d, sh->slots[d]);
  for (int k = 0; k < s->stages; k++)
    if (sh->device[k] < 0 || sh->device[k] >= sh->devices)
      return GP_ERR(GP_ERR_USAGE, "schedule: stage %d is on device %d of %d", k, sh->device[k],
                    sh->devices);
  return GP_OK;
}

gp_status gp_schedule_simulate_shared(const gp_schedule *s, const gp_stage_cost *cost,
                                      const gp_sim_share *share, gp_sim_result *out,
                                      gp_sim_events *events) {
  if (!events) return GP_ERR(GP_ERR_USAGE, "schedule: no event output given");
  memset(events, 0, sizeof *events);
  if (out) memset(out, 0, sizeof *out);
  GP_TRY(check_shape(s));
  if (share) GP_TRY(check_share(s, share));
  events->stages = s->stages;
  size_t K = s->stages > 0 ? (size_t)s->stages : 1; /* check_shape made sure; said for gcc */
  events->n = calloc(K, sizeof *events->n);
  events->event = calloc(K, sizeof *events->event);
  int ok = events->n && events->event;
  for (int k = 0; ok && k < s->stages; k++)
    ok = (events->event[k] = malloc(sizeof(gp_sim_event) * (size_t)s->n_actions[k])) != NULL;
  gp_status st = ok ? simulate(s, cost, share, out, events)
                    : GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for the timeline");
  if (st != GP_OK) gp_sim_events_free(events);
  return st;
}

gp_status gp_schedule_simulate_events(const gp_schedule *s, const gp_stage_cost *cost,
                                      gp_sim_result *out, gp_sim_events *events) {
  return gp_schedule_simulate_shared(s, cost, NULL, out, events);
}

gp_status gp_schedule_walk_from(const gp_schedule *s, const gp_stage_cost *cost,
                                const gp_walk_from *from, double *end) {
  walk w;
  memset(&w, 0, sizeof w);
  gp_status st = check_shape(s);
  if (st == GP_OK) st = walk_run(s, cost, NULL, NULL, NULL, NULL, from, &w);
  for (int k = 0; st == GP_OK && k < s->stages; k++)
    end[k] = w.free_at[k];
  walk_free(&w);
  return st;
}

gp_status gp_schedule_replay(const gp_schedule *s, const double *const *dur,
                             const double *const *rdur, double *makespan, double *busy) {
  *makespan = *busy = 0;
  if (!dur || !rdur) return GP_ERR(GP_ERR_USAGE, "schedule: no action times given");
  GP_TRY(check_shape(s));
  for (int k = 0; k < s->stages; k++)
    for (int a = 0; a < s->n_actions[k]; a++) {
      const double r = s->actions[k][a].kind == GP_A_BACKWARD ? rdur[k][a] : 0;
      if (!isfinite(dur[k][a]) || dur[k][a] < 0 || !isfinite(r) || r < 0)
        return GP_ERR(GP_ERR_USAGE, "schedule: stage %d: action times must be finite and >= 0", k);
    }
  walk w;
  gp_status st = walk_run(s, NULL, dur, rdur, NULL, NULL, NULL, &w);
  for (int k = 0; st == GP_OK && k < s->stages; k++) {
    *busy += w.busy[k];
    if (w.free_at[k] > *makespan) *makespan = w.free_at[k];
  }
  walk_free(&w);
  return st;
}

void gp_sim_events_free(gp_sim_events *e) {
  if (!e) return;
  if (e->event)
    for (int k = 0; k < e->stages; k++)
      free(e->event[k]);
  free(e->event);
  free(e->n);
  memset(e, 0, sizeof *e);
}

void gp_sim_result_free(gp_sim_result *r) {
  if (!r) return;
  free(r->stage);
  memset(r, 0, sizeof *r);
}
