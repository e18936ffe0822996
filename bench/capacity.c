/* One trial of the capacity search (scripts/capacity.sh): builds the pipeline a model file and
 * the flags describe, trains a few steps on random inputs and labels, and prints one line:
 *   ok params=N stages=K mem_sum=B mem_peak=B,B,... act_peak=B,B,... seconds=S
 * (bytes; mem_peak is each stage's backend high-water mark: parameters, gradients, optimizer
 * state, activations, scratch; act_peak its activation arenas alone), or
 *   oom params=N stages=K error=MESSAGE
 * when an allocation did not fit (--memory-limit or the device itself). Exit status: 0 ok,
 * 3 out of memory, 2 usage or model file, 1 any other failure. Unlike gpipe-train it does no
 * evaluation: the question is whether training fits. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/progress.h"
#include "core/spec/cfg.h"
#include "core/spec/spec.h"
#include "core/train/trainer.h"
#include "data/loader.h"
#include "tests/support/train.h"

enum {
  F_SET,
  F_BATCH,
  F_STAGES,
  F_MICRO,
  F_REMAT,
  F_DEVICES,
  F_MEMORY,
  F_STEPS,
  F_THREADS,
  F_HELP,
  F_N
};

static gp_flag flags[] = {
    [F_SET] = {"--set", GP_FLAG_LIST, "KEY.PATH=VALUE", "override a scalar of the model file", 0},
    [F_BATCH] = {"--batch-size", GP_FLAG_INT, "N", "mini-batch (default: the model file's)", 1},
    [F_STAGES] = {"--stages", GP_FLAG_INT, "K", "stages (default 1)", 1},
    [F_MICRO] = {"--micro-batches", GP_FLAG_INT, "M", "micro-batches (default 1)", 1,
                 .max = GP_MAX_MICRO_BATCHES},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "always|except_last|never",
                 "re-materialization (default never)", 0},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "DEV[,DEV...]", "cpu or cuda:N (default cpu)", 0},
    [F_MEMORY] = {"--memory-limit", GP_FLAG_STR, "SIZE", "cap of each stage's memory", 0},
    [F_STEPS] = {"--steps", GP_FLAG_INT, "N", "training steps (default 2)", 1},
    [F_THREADS] = {"--threads", GP_FLAG_INT, "N", "CPU threads (default: all cores)", 1},
    [F_HELP] = {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
    {NULL},
};
_Static_assert(sizeof flags / sizeof flags[0] == F_N + 1, "flag table");

static gp_status pipeline_flags(gp_pipeline_spec *ps) {
  ps->stages = flags[F_STAGES].given ? (int)flags[F_STAGES].i : 1;
  if (ps->stages > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "--stages: at most %d", GP_MAX_DEVICES);
  ps->micro_batches = flags[F_MICRO].given ? (int)flags[F_MICRO].i : 1;
  ps->n_balance = 0;
  ps->schedule = GP_SCHED_GPIPE;
  ps->remat = GP_REMAT_NEVER;
  if (flags[F_REMAT].given) {
    const char *const *names = gp_remat_names();
    int found = -1;
    for (int i = 0; names[i]; i++)
      if (strcmp(names[i], flags[F_REMAT].s) == 0) found = i;
    if (found < 0)
      return GP_ERR(GP_ERR_USAGE, "--remat: unknown value '%s' (always, except_last, never)",
                    flags[F_REMAT].s);
    ps->remat = (gp_remat)found;
  }
  ps->n_devices = 0;
  const char *p = flags[F_DEVICES].given ? flags[F_DEVICES].s : "cpu";
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof ps->devices[0] || ps->n_devices >= GP_MAX_DEVICES)
      return GP_ERR(GP_ERR_USAGE, "--devices: expected cpu or cuda:N separated by commas, got '%s'",
                    flags[F_DEVICES].s);
    memcpy(ps->devices[ps->n_devices], p, len);
    ps->devices[ps->n_devices++][len] = 0;
    p += len + (p[len] == ',');
  }
  return GP_OK;
}

/* "B,B,..." of k sizes into buf. */
static void list_sizes(char *buf, size_t n, const size_t *v, int k) {
  size_t at = 0;
  buf[0] = 0;
  for (int s = 0; s < k && at < n; s++)
    at += (size_t)snprintf(buf + at, n - at, s ? ",%zu" : "%zu", v[s]);
}

int main(int argc, char **argv) {
  const char *pos[1];
  int npos = 0, have_t = 0;
  gp_model *m = NULL;
  gp_loader *l = NULL;
  gp_trainer t;
  float *x = NULL;
  int32_t *y = NULL;
  size_t limit = 0;
  gp_override ov[256];
  int nov = 0;
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s == GP_OK && flags[F_HELP].given) {
    gp_args_usage("bench-capacity", "MODEL.yaml [--set K=V ...] [flags]", flags);
    gp_args_free(flags);
    return 0;
  }
  if (s == GP_OK && npos != 1)
    s = GP_ERR(GP_ERR_USAGE, "usage: bench-capacity MODEL.yaml [--set K=V ...] [flags]");
  if (s == GP_OK && flags[F_MEMORY].given)
    s = gp_args_size("--memory-limit", flags[F_MEMORY].s, &limit);
  if (s == GP_OK) s = gp_args_overrides(&flags[F_SET], ov, 256, &nov);
  if (s == GP_OK) s = gp_model_load(pos[0], ov, nov, &m);
  gp_args_overrides_free(ov, nov);
  if (s == GP_OK) s = pipeline_flags(&m->pipeline);
  if (s == GP_OK && flags[F_BATCH].given) m->train.batch_size = flags[F_BATCH].i;
  int64_t b = m ? m->train.batch_size : 0;
  if (s == GP_OK && (m->label_input < 0 || m->n_inputs != 2))
    s = GP_ERR(GP_ERR_USAGE, "%s: bench-capacity takes models of one input and labels", m->file);
  if (s == GP_OK) {
    const gp_model_input *xi = &m->inputs[m->label_input == 0 ? 1 : 0];
    const gp_layer *o = &m->nodes[m->output_node].layer;
    s = gp_loader_open_synthetic(&xi->shape, o->out_shape.d[o->out_shape.ndim - 1], b,
                                 GP_SPLIT_TRAIN, m->train.seed, NULL, &l);
  }
  gp_plan plan;
  gp_pipeline_opts po = {.cores = flags[F_THREADS].given ? (int)flags[F_THREADS].i : 0,
                         .mem_limit = limit};
  if (s == GP_OK) s = gp_plan_make(m, &m->pipeline, &plan);
  double t0 = gp_now();
  if (s == GP_OK) s = gp_trainer_init(&t, m, &plan, &po, m->train.seed);
  have_t = s == GP_OK;
  if (s == GP_OK) {
    gp_shape sh = gp_loader_sample_shape(l);
    x = malloc(sizeof(float) * (size_t)(b * gp_shape_numel(&sh)));
    y = malloc(sizeof(int32_t) * (size_t)b);
    if (!x || !y) s = GP_ERR(GP_ERR_NOMEM, "out of host memory for a batch");
  }
  int64_t steps = flags[F_STEPS].given ? flags[F_STEPS].i : 2;
  for (int64_t i = 0; s == GP_OK && i < steps; i++) {
    int64_t got;
    gp_metrics mt;
    s = gp_loader_seek(l, 0, 0);
    if (s == GP_OK) s = gp_loader_next(l, b, x, y, &got);
    if (s == GP_OK) s = gp_t_step_xy(&t, x, y, got, m->train.lr, &mt);
  }
  int k = m ? m->pipeline.stages : 0;
  if (s == GP_OK) {
    size_t peak[GP_MAX_DEVICES], act[GP_MAX_DEVICES], sum = 0;
    for (int i = 0; i < k; i++) {
      gp_stage_stats ss;
      gp_pipeline_stats(t.pl, i, &ss);
      peak[i] = ss.mem_peak;
      act[i] = ss.peak_act_bytes;
      sum += ss.mem_peak;
    }
    char pk[GP_MAX_DEVICES * 24], ac[GP_MAX_DEVICES * 24];
    list_sizes(pk, sizeof pk, peak, k);
    list_sizes(ac, sizeof ac, act, k);
    printf("ok params=%" PRId64 " stages=%d mem_sum=%zu mem_peak=%s act_peak=%s seconds=%.2f\n",
           m->n_params, k, sum, pk, ac, gp_now() - t0);
  } else if (s == GP_ERR_NOMEM || s == GP_ERR_FULL) {
    printf("oom params=%" PRId64 " stages=%d error=%s\n", m ? m->n_params : 0, k,
           gp_error_message());
  }
  free(x);
  free(y);
  if (have_t) gp_trainer_free(&t);
  gp_loader_free(l);
  gp_model_free(m);
  gp_args_free(flags);
  if (s == GP_ERR_NOMEM || s == GP_ERR_FULL) return 3;
  if (s != GP_OK) {
    fprintf(stderr, "bench-capacity: %s\n", gp_error_message());
    return gp_status_exit_code(s);
  }
  return 0;
}
