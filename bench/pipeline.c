/* Benchmark: throughput and measured peak activation memory of a model under several
 * pipeline configurations, all measured in the same run (alternating repetitions), with
 * each configuration's speed as a ratio to the first one's.
 *   bench-pipeline MODEL.yaml --config K,M,SCHEDULE,REMAT [--config ...] [--steps N]
 *                  [--batch-size B] [--cores C] [--reps R]
 * Data are synthetic; the step is the whole synchronous training step (optimizer included). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/progress.h"
#include "core/rng.h"
#include "core/spec/spec.h"
#include "core/train/trainer.h"

#define MAX_CONFIGS 16

typedef struct config {
  int k, m;
  gp_schedule_kind sched;
  gp_remat remat;
  const char *text;
  double best_sps;
  size_t peak[GP_MAX_DEVICES];
  char balance[128];
} config;

static gp_status parse_config(const char *text, config *c) {
  char sched[16] = "", remat[16] = "";
  if (sscanf(text, "%d,%d,%15[^,],%15s", &c->k, &c->m, sched, remat) != 4 || c->k < 1 || c->m < 1)
    return GP_ERR(GP_ERR_USAGE,
                  "--config: expected K,M,gpipe|1f1b,always|except_last|never, "
                  "got '%s'",
                  text);
  if (!strcmp(sched, "gpipe"))
    c->sched = GP_SCHED_GPIPE;
  else if (!strcmp(sched, "1f1b"))
    c->sched = GP_SCHED_1F1B;
  else
    return GP_ERR(GP_ERR_USAGE, "--config %s: unknown schedule '%s'", text, sched);
  if (!strcmp(remat, "always"))
    c->remat = GP_REMAT_ALWAYS;
  else if (!strcmp(remat, "except_last"))
    c->remat = GP_REMAT_EXCEPT_LAST;
  else if (!strcmp(remat, "never"))
    c->remat = GP_REMAT_NEVER;
  else
    return GP_ERR(GP_ERR_USAGE, "--config %s: unknown re-materialization '%s'", text, remat);
  c->text = text;
  return GP_OK;
}

/* Runs warm-up + steps of one configuration; returns samples/s, records peak memory. */
static gp_status measure(gp_model *m, config *c, int cores, int64_t b, int steps, float *x,
                         int32_t *y, double *sps) {
  gp_pipeline_spec ps = m->pipeline;
  ps.stages = c->k;
  ps.micro_batches = c->m;
  ps.schedule = c->sched;
  ps.remat = c->remat;
  ps.n_balance = 0;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = cores, .pin = 1};
  GP_TRY(gp_plan_make(m, &ps, &plan));
  gp_plan_balance_str(&plan, c->balance, sizeof c->balance);
  GP_TRY(gp_trainer_init(&t, m, &plan, &po, 1));
  gp_status s = GP_OK;
  gp_metrics mt;
  for (int i = 0; i < 2 && s == GP_OK; i++)
    s = gp_trainer_step(&t, x, y, b, 0.001, &mt);
  gp_pipeline_reset_stats(t.pl);
  double t0 = gp_now();
  for (int i = 0; i < steps && s == GP_OK; i++)
    s = gp_trainer_step(&t, x, y, b, 0.001, &mt);
  *sps = (double)(steps * b) / (gp_now() - t0);
  for (int st = 0; st < c->k && s == GP_OK; st++) {
    gp_stage_stats ss;
    gp_pipeline_stats(t.pl, st, &ss);
    c->peak[st] = ss.peak_act_bytes;
  }
  gp_trainer_free(&t);
  return s;
}

int main(int argc, char **argv) {
  gp_flag flags[] = {
      {"--config", GP_FLAG_LIST, "K,M,SCHED,REMAT", "a configuration (repeatable)", 0},
      {"--steps", GP_FLAG_INT, "N", "timed steps per repetition (default 10)", 1},
      {"--batch-size", GP_FLAG_INT, "B", "mini-batch (default: the model file's)", 1},
      {"--cores", GP_FLAG_INT, "C", "cores (default: all)", 1},
      {"--reps", GP_FLAG_INT, "R", "repetitions, alternating configurations (default 3)", 1},
      {NULL},
  };
  const char *pos[1];
  int npos, nc = 0;
  config cs[MAX_CONFIGS] = {0};
  gp_model *m = NULL;
  float *x = NULL;
  int32_t *y = NULL;
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s == GP_OK && (npos != 1 || flags[0].n_list == 0 || flags[0].n_list > MAX_CONFIGS))
    s = GP_ERR(GP_ERR_USAGE, "usage: bench-pipeline MODEL.yaml --config K,M,SCHED,REMAT ...");
  for (int i = 0; s == GP_OK && i < flags[0].n_list; i++, nc++)
    s = parse_config(flags[0].list[i], &cs[i]);
  int steps = flags[1].given ? (int)flags[1].i : 10, reps = flags[4].given ? (int)flags[4].i : 3;
  int cores = flags[3].given ? (int)flags[3].i : gp_cpu_cores();
  if (s == GP_OK) s = gp_model_load(pos[0], NULL, 0, &m);
  int64_t b = 0;
  if (s == GP_OK) {
    b = flags[2].given ? flags[2].i : m->train.batch_size;
    int xi = m->label_input == 0 ? 1 : 0;
    int64_t per = gp_shape_numel(&m->inputs[xi].shape);
    const gp_layer *o = &m->nodes[m->output_node].layer;
    int64_t classes = o->out_shape.d[o->out_shape.ndim - 1];
    x = malloc(sizeof(float) * (size_t)(b * per));
    y = malloc(sizeof(int32_t) * (size_t)b);
    gp_rng r;
    gp_rng_seed(&r, 3);
    for (int64_t i = 0; i < b * per; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    for (int64_t i = 0; i < b; i++)
      y[i] = (int32_t)gp_rng_below(&r, (uint64_t)classes);
  }
  for (int r = 0; s == GP_OK && r < reps; r++)
    for (int i = 0; s == GP_OK && i < nc; i++) {
      double sps = 0;
      s = measure(m, &cs[i], cores, b, steps, x, y, &sps);
      if (sps > cs[i].best_sps) cs[i].best_sps = sps;
    }
  if (s == GP_OK) {
    printf("model %s, batch %" PRId64 ", %d cores, best of %d x %d steps\n", m->name, b, cores,
           reps, steps);
    printf("%-26s %-10s %12s %9s  %s\n", "K,M,schedule,remat", "balance", "samples/s", "vs first",
           "peak activation MiB per stage (measured)");
    for (int i = 0; i < nc; i++) {
      printf("%-26s %-10s %12.1f %8.2fx ", cs[i].text, cs[i].balance, cs[i].best_sps,
             cs[i].best_sps / cs[0].best_sps);
      for (int st = 0; st < cs[i].k; st++)
        printf(" %.2f", (double)cs[i].peak[st] / 1048576.0);
      printf("\n");
    }
  }
  free(x);
  free(y);
  gp_model_free(m);
  gp_args_free(flags);
  if (s != GP_OK) {
    fprintf(stderr, "bench-pipeline: %s\n", gp_error_message());
    return gp_status_exit_code(s);
  }
  return 0;
}
