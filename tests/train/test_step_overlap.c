/* Overlapped steps (gp_trainer_step_ahead): stage 0 runs the next step's first forwards while the
 * later stages finish a step. The numbers must not change: several steps of an MLP with dropout
 * and of a small balanced-cnn (batch norm) at K = 2, 3 and M = 4, 8 under every schedule whose
 * first stage starts with forwards, an uneven last batch included, equal the same run without
 * overlap bit for bit (weights, running statistics, optimizer state, losses) and K = 1 within
 * the equivalence suite's tolerance. The trace shows the overlap (stage 0's forward of the next
 * step starting before the last stage's update ended), and its absence where the update is a
 * barrier (clipping, tied weights) and with GP_STEP_OVERLAP=0, the check's negative control. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/train/stage_params.h"

static int failures, passes;
static int64_t early;     /* forwards run early over a model's overlapped runs */
static int64_t early_all; /* the same, stage 0 running all it may (GP_TEST_AHEAD_ALL) */

#define TOL_REL 1e-5
#define STEPS 5
/* the last batch splits unevenly into 4 and 8 micro-batches */
static const int64_t batch_of[STEPS] = {16, 16, 16, 16, 13};

static const char *mlp =
    "name: mlp\n"
    "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: relu}\n"
    "  - {type: dropout, p: 0.25}\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: gelu}\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: tanh}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
    "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01}}\n";

/* balanced-cnn in small: a batch-norm stem (running statistics pooled over the step's
 * micro-batches, the early ones included), identical conv blocks */
static const char *bcnn = "name: bcnn\n"
                          "inputs: {x: [4, 6, 6], label: {shape: [], dtype: i32}}\n"
                          "blocks:\n"
                          "  conv:\n"
                          "    layers:\n"
                          "      - {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
                          "      - {type: relu}\n"
                          "layers:\n"
                          "  - {type: batchnorm, name: stem}\n"
                          "  - {block: conv, repeat: 4, name: blocks}\n"
                          "  - {type: dropout, p: 0.1}\n"
                          "  - {type: global_avgpool}\n"
                          "  - {type: linear, out_features: 5}\n"
                          "loss: {type: softmax_cross_entropy}\n"
                          "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* the same MLP with the global norm's clipping: every update waits for every stage's norm */
static const char *mlp_clip =
    "name: mlp_clip\n"
    "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: relu}\n"
    "  - {type: linear, out_features: 16}\n"
    "  - {type: tanh}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train: {clip_grad_norm: 0.5, optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

/* weights tied across the stages (no clipping): their gradients are summed at the update */
static const char *tied = "name: tied\n"
                          "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                          "layers:\n"
                          "  - {type: linear, out_features: 12, name: a}\n"
                          "  - {type: tanh}\n"
                          "  - {type: linear, out_features: 12, name: b}\n"
                          "  - {type: sigmoid}\n"
                          "  - {type: linear, out_features: 12, name: c}\n"
                          "  - {type: tanh}\n"
                          "  - {type: linear, out_features: 5}\n"
                          "loss: {type: softmax_cross_entropy}\n"
                          "tied: {w: {params: [a.weight, c.weight]}}\n"
                          "train: {optimizer: {type: adamw, lr: 0.01}}\n";

/* A small first stage and a last stage whose update (AdamW over 2 x 512 x 512 weights) outlasts
 * the first stage's by far, for the overlap to show in the trace whatever the load. */
static const char *tail = "name: tail\n"
                          "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                          "layers:\n"
                          "  - {type: linear, out_features: 8}\n"
                          "  - {type: relu}\n"
                          "  - {type: linear, out_features: 512}\n"
                          "  - {type: linear, out_features: 512}\n"
                          "  - {type: linear, out_features: 512}\n"
                          "  - {type: linear, out_features: 5}\n"
                          "loss: {type: softmax_cross_entropy}\n"
                          "train: {optimizer: {type: adamw, lr: 0.001}}\n";
static const int tail_balance[] = {2, 4};

typedef struct run_out {
  double loss[STEPS];
  float *w, *buf, *opt; /* trainable parameters, buffers, optimizer state: all stages in order */
  int64_t n_w, n_buf, n_opt;
  int64_t early; /* forwards stage 0 ran ahead of their step */
} run_out;

typedef struct cfg {
  int k, m;
  gp_schedule_kind sched;
  int ahead;          /* tell each step the next one's batch (gp_trainer_step_ahead) */
  const int *balance; /* NULL: automatic */
  const char *trace;  /* a trace file to write (NULL: none) */
} cfg;

static void batch_data(const gp_model *mo, int64_t batch, int step, float *x, int32_t *y) {
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  gp_rng r;
  gp_rng_seed(&r, 1000 + (uint64_t)step);
  for (int64_t i = 0; i < batch * per; i++)
    x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
  for (int64_t i = 0; i < batch; i++)
    y[i] = (int32_t)gp_rng_below(&r, 5);
}

static float *gather_opt(gp_trainer *t, int64_t *n) {
  int k = gp_pipeline_stages(t->pl);
  *n = 0;
  for (int s = 0; s < k; s++) {
    gp_optimizer *o = gp_pipeline_optimizer(t->pl, s);
    *n += (int64_t)o->n_slots * o->p->n_train;
  }
  float *out = malloc(sizeof(float) * (size_t)(*n + 1));
  if (!out) gp_t_die("out of memory");
  int64_t at = 0;
  for (int s = 0; s < k; s++) {
    gp_optimizer *o = gp_pipeline_optimizer(t->pl, s);
    for (int j = 0; j < o->n_slots; j++) { /* CPU stages: host memory */
      memcpy(out + at, o->slot[j], sizeof(float) * (size_t)o->p->n_train);
      at += o->p->n_train;
    }
  }
  return out;
}

static void train(const char *text, const cfg *c, run_out *o) {
  gp_model *mo;
  if (gp_model_load_string(text, "overlap.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = c->k;
  mo->pipeline.micro_batches = c->m;
  mo->pipeline.schedule = c->sched;
  mo->pipeline.remat = GP_REMAT_NEVER;
  mo->pipeline.n_balance = 0;
  if (c->balance) {
    mo->pipeline.n_balance = c->k;
    for (int s = 0; s < c->k; s++)
      mo->pipeline.balance[s] = c->balance[s];
  }
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .trace = c->trace != NULL};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die("init");
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  float *x[STEPS];
  int32_t *y[STEPS];
  gp_batch b[STEPS];
  for (int s = 0; s < STEPS; s++) { /* every batch alive to the end: the next one's too */
    x[s] = malloc(sizeof(float) * (size_t)(batch_of[s] * per));
    y[s] = malloc(sizeof(int32_t) * (size_t)batch_of[s]);
    if (!x[s] || !y[s]) gp_t_die("out of memory");
    batch_data(mo, batch_of[s], s, x[s], y[s]);
    if (gp_batch_xy(mo, x[s], y[s], batch_of[s], &b[s]) != GP_OK) gp_t_die("batch");
  }
  for (int s = 0; s < STEPS; s++) {
    gp_metrics mt;
    const gp_batch *next = c->ahead && s + 1 < STEPS ? &b[s + 1] : NULL;
    if (gp_trainer_step_ahead(&t, &b[s], next, mo->train.lr, &mt) != GP_OK) gp_t_die("step");
    o->loss[s] = mt.loss;
  }
  if (c->trace && gp_pipeline_write_trace(t.pl, c->trace) != GP_OK) gp_t_die("trace");
  o->w = stage_params_gather(&t, 0, &o->n_w);
  o->buf = stage_params_gather(&t, 1, &o->n_buf);
  o->opt = gather_opt(&t, &o->n_opt);
  gp_stage_stats ss;
  gp_pipeline_stats(t.pl, 0, &ss);
  o->early = ss.early;
  for (int s = 0; s < STEPS; s++) {
    free(x[s]);
    free(y[s]);
  }
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static void free_out(run_out *o) {
  free(o->w);
  free(o->buf);
  free(o->opt);
}

static int same_bits(const float *a, const float *b, int64_t na, int64_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, sizeof(float) * (size_t)na) == 0);
}

/* Overlapped against the same run without overlap (bit for bit) and K = 1 at the same M (within
 * TOL_REL; batch norm normalizes each micro-batch by its own statistics, as GPipe does). */
static void check_model(const char *name, const char *text, const cfg *c) {
  cfg sync = *c, c1 = {1, c->m, GP_SCHED_GPIPE, 0, NULL, NULL};
  sync.ahead = 0;
  run_out a = {0}, s = {0}, o1 = {0}, all = {0};
  const run_out *one = &o1;
  train(text, c, &a);
  train(text, &sync, &s);
  train(text, &c1, &o1);
  /* every early forward every step, whatever the timing (GP_TEST_AHEAD_ALL) */
  setenv("GP_TEST_AHEAD_ALL", "1", 1);
  train(text, c, &all);
  unsetenv("GP_TEST_AHEAD_ALL");
  CHECK(same_bits(all.w, s.w, all.n_w, s.n_w) && same_bits(all.buf, s.buf, all.n_buf, s.n_buf) &&
            same_bits(all.opt, s.opt, all.n_opt, s.n_opt) &&
            memcmp(all.loss, s.loss, sizeof all.loss) == 0,
        "%s K=%d M=%d %s: steps with all their early forwards differ from the same steps "
        "without overlap",
        name, c->k, c->m, gp_schedule_names()[c->sched]);
  early_all += all.early;
  free_out(&all);
  const char *sn = gp_schedule_names()[c->sched];
  int exact = same_bits(a.w, s.w, a.n_w, s.n_w) && same_bits(a.buf, s.buf, a.n_buf, s.n_buf) &&
              same_bits(a.opt, s.opt, a.n_opt, s.n_opt) &&
              memcmp(a.loss, s.loss, sizeof a.loss) == 0;
  CHECK(exact, "%s K=%d M=%d %s: overlapped steps differ from the same steps without overlap", name,
        c->k, c->m, sn);
  early += a.early;
  CHECK(s.early == 0, "%s K=%d M=%d %s: %lld forwards ran early, told no next batch", name, c->k,
        c->m, sn, (long long)s.early);
  double dl = 0, dw = a.n_w == one->n_w ? stage_params_rel_diff(a.w, one->w, one->n_w) : INFINITY;
  for (int i = 0; i < STEPS; i++)
    dl = fmax(dl, fabs(a.loss[i] - one->loss[i]) / fabs(one->loss[i]));
  CHECK(dl <= TOL_REL && dw <= TOL_REL,
        "%s K=%d M=%d %s: loss rel diff %.3g, weight rel diff %.3g against K = 1", name, c->k, c->m,
        sn, dl, dw);
  free_out(&a);
  free_out(&s);
  free_out(&o1);
}

/* ---- the trace ---- */

static int json_num(const char *line, const char *key, double *out) {
  const char *p = strstr(line, key);
  if (!p) return 0;
  *out = strtod(p + strlen(key), NULL);
  return 1;
}

/* The steps n (1-based, as the trace numbers them) where stage 0's forward of micro-batch 0 of
 * step n + 1 started before the last stage's update of step n ended. -1: unreadable. */
static int overlapped_steps(const char *path, int last) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  double f0[STEPS + 2], upd[STEPS + 2];
  for (int i = 0; i < STEPS + 2; i++)
    f0[i] = upd[i] = NAN;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    double tid, ts, dur, step;
    if (strstr(line, "\"cat\": \"layer\"")) continue;
    if (!json_num(line, "\"tid\": ", &tid) || !json_num(line, "\"ts\": ", &ts) ||
        !json_num(line, "\"dur\": ", &dur) || !json_num(line, "\"step\": ", &step))
      continue;
    int n = (int)step;
    if (n < 1 || n > STEPS) continue;
    if (tid == 0 && strstr(line, "\"name\": \"F0\"")) f0[n] = ts;
    if (tid == last && strstr(line, "\"name\": \"step\"")) upd[n] = ts + dur;
  }
  fclose(f);
  int count = 0;
  for (int n = 1; n < STEPS; n++)
    count += f0[n + 1] < upd[n];
  return count;
}

static int trace_overlaps(const char *text, const cfg *c) {
  run_out o = {0};
  train(text, c, &o);
  free_out(&o);
  int n = overlapped_steps(c->trace, c->k - 1);
  if (n < 0) gp_t_die("reading the trace");
  return n;
}

/* The simulator's overlapped steady state by hand: K = 2, M = 2, 1F1B, F 1, B 2, the last
 * stage's update 5 (the first's 0). One step alone: stage 0 ends at 9, stage 1 at 12 (bubble
 * 1 - 17/24). Overlapped: stage 0 runs F0, F1 of the next step in [9, 11) while stage 1
 * updates; the next step starts at 12 with them done, stage 1 runs F0 at once and ends at 23,
 * stage 0 at 20 (then F0, F1 again by 22): the step repeats every 11 (bubble 1 - 17/22). */
static void check_sim(void) {
  gp_schedule sc;
  if (gp_schedule_build(GP_SCHED_1F1B, GP_REMAT_NEVER, 2, 2, &sc) != GP_OK) gp_t_die("schedule");
  gp_stage_cost cost[2] = {{.fwd = 1, .bwd = 2}, {.fwd = 1, .bwd = 2, .step = 5}};
  gp_sim_result r;
  CHECK(gp_schedule_simulate_overlap(&sc, cost, 2, &r) == GP_OK && fabs(r.makespan - 11) < 1e-12 &&
            fabs(r.bubble - (1 - 17.0 / 22)) < 1e-12,
        "overlapped 1F1B: step %g, bubble %g; want 11, %g", r.makespan, r.bubble, 1 - 17.0 / 22);
  gp_sim_result_free(&r);
  CHECK(gp_schedule_simulate_overlap(&sc, cost, 0, &r) == GP_OK && fabs(r.makespan - 12) < 1e-12 &&
            fabs(r.bubble - (1 - 17.0 / 24)) < 1e-12,
        "1F1B without overlap: step %g, bubble %g; want 12, %g", r.makespan, r.bubble,
        1 - 17.0 / 24);
  gp_sim_result_free(&r);
  gp_schedule_free(&sc);
}

int main(void) {
  check_sim();
  const gp_schedule_kind scheds[] = {GP_SCHED_GPIPE, GP_SCHED_1F1B, GP_SCHED_ZB_H1, GP_SCHED_ZB_H2};
  const struct {
    const char *name, *text;
  } models[] = {{"mlp", mlp}, {"bcnn", bcnn}, {"mlp_clip", mlp_clip}, {"tied", tied}};
  const struct { int k, m; } km[] = {{2, 4}, {2, 8}, {3, 4}, {3, 8}};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    /* every K, M with two schedules, every schedule with one K, M (a covering of the pairs) */
    early = early_all = 0;
    for (size_t j = 0; j < sizeof km / sizeof km[0]; j++)
      for (size_t q = 0; q < sizeof scheds / sizeof scheds[0]; q++) {
        if (q != j % 4 && q != (j + 2) % 4) continue;
        cfg c = {km[j].k, km[j].m, scheds[q], 1, NULL, NULL};
        check_model(models[i].name, models[i].text, &c);
      }
    /* the comparisons meant something: forwards did run early (none under a barrier) */
    const int barrier = i >= 2;
    CHECK(barrier ? early_all == 0 && early == 0 : early_all > 0,
          "%s: %lld forwards ran early over its runs (%lld running all they may)", models[i].name,
          (long long)early, (long long)early_all);
    printf("%s: %lld forwards ran early over its runs (%lld running all they may)\n",
           models[i].name, (long long)early, (long long)early_all);
  }

  char path[] = "/tmp/gp_overlap_trace_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) gp_t_die("mkstemp");
  close(fd);
  for (size_t q = 0; q < sizeof scheds / sizeof scheds[0]; q++) {
    const char *sn = gp_schedule_names()[scheds[q]];
    cfg c = {2, 4, scheds[q], 1, tail_balance, path};
    int n = 0; /* the machine's load may delay stage 0 past the update: three tries */
    for (int tries = 0; tries < 3 && n == 0; tries++)
      n = trace_overlaps(tail, &c);
    CHECK(n >= 1,
          "tail K=2 M=4 %s: no step's next forward started before the last stage's "
          "update ended (%d of %d steps)",
          sn, n, STEPS - 1);
    /* the negative control: the same run, told no next batch, never overlaps */
    c.ahead = 0;
    n = trace_overlaps(tail, &c);
    CHECK(n == 0, "tail K=2 M=4 %s without the next batch: %d steps overlapped", sn, n);
  }
  /* barriers: clipping and ties keep the steps apart; so does GP_STEP_OVERLAP=0 */
  cfg c = {2, 4, GP_SCHED_ZB_H2, 1, NULL, path};
  int n = trace_overlaps(mlp_clip, &c);
  CHECK(n == 0, "mlp_clip: %d steps overlapped under clipping", n);
  n = trace_overlaps(tied, &c);
  CHECK(n == 0, "tied: %d steps overlapped with tied weights", n);
  setenv("GP_STEP_OVERLAP", "0", 1);
  cfg ct = {2, 4, GP_SCHED_ZB_H2, 1, tail_balance, path};
  n = trace_overlaps(tail, &ct);
  CHECK(n == 0, "tail with GP_STEP_OVERLAP=0: %d steps overlapped", n);
  unsetenv("GP_STEP_OVERLAP");
  remove(path);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
