/* Benchmark: training throughput of a model file on the CPU next to the sgemm rate of the
 * same machine, measured in the same run, so the ratio is meaningful on a noisy machine.
 *   bench-train-throughput MODEL.yaml [--threads 1] [--batch-size 128] [--steps 30]
 * Model FLOPs per sample = sum over layers of forward + backward FLOPs as the trainer runs them
 * (gp_node_cost: a layer that reads only model inputs computes no input gradient). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/machine.h"
#include "cli/progress.h"
#include "core/spec/spec.h"
#include "core/plan/solve.h"
#include "core/train/trainer.h"
#include "data/loader.h"
#include "tests/support/train.h"

static double model_flops_per_sample(const gp_model *m) {
  double f = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    gp_cost c;
    gp_node_cost(m, i, &c);
    f += c.fwd_flops + c.bwd_flops;
  }
  return f;
}

int main(int argc, char **argv) {
  gp_flag flags[] = {
      {"--threads", GP_FLAG_INT, "N", "CPU threads (default 1)", 1},
      {"--batch-size", GP_FLAG_INT, "N", "batch (default 128)", 1},
      {"--steps", GP_FLAG_INT, "N", "timed steps (default 30)", 1},
      {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
      {NULL},
  };
  const char *pos[1];
  int npos;
  gp_model *m = NULL;
  gp_loader *l = NULL;
  gp_trainer t;
  int have_t = 0;
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s == GP_OK && gp_args_get(flags, "--help")->given) {
    gp_args_usage("bench-train-throughput", "MODEL.yaml [flags]", flags);
    return 0;
  }
  if (s == GP_OK && npos != 1) s = GP_ERR(GP_ERR_USAGE, "usage: bench-train-throughput MODEL.yaml");
  if (s == GP_OK) gp_blas_pick_kernels(argv); /* as gpipe-train runs: see machine.h */
  int threads = flags[0].given ? (int)flags[0].i : 1;
  int64_t steps = flags[2].given ? flags[2].i : 30, warm = 3;
  if (s == GP_OK) s = gp_model_load(pos[0], NULL, 0, &m);
  if (s == GP_OK && flags[1].given) m->train.batch_size = flags[1].i;
  int64_t b = m ? m->train.batch_size : 0;
  if (s == GP_OK) {
    const gp_model_input *xi = &m->inputs[m->label_input == 0 ? 1 : 0];
    const gp_layer *o = &m->nodes[m->output_node].layer;
    s = gp_loader_open_synthetic(&xi->shape, o->out_shape.d[o->out_shape.ndim - 1], b * 4,
                                 GP_SPLIT_TRAIN, 1, NULL, &l);
  }
  gp_plan plan;
  gp_pipeline_opts po = {.cores = threads};
  if (s == GP_OK) s = gp_plan_make(m, &m->pipeline, &plan);
  if (s == GP_OK) s = gp_trainer_init(&t, m, &plan, &po, 1);
  have_t = s == GP_OK;
  double gf = gp_sgemm_gflops(threads);
  float *x = NULL;
  int32_t *y = NULL;
  if (s == GP_OK) {
    gp_shape sh = gp_loader_sample_shape(l);
    x = malloc(sizeof(float) * (size_t)(b * gp_shape_numel(&sh)));
    y = malloc(sizeof(int32_t) * (size_t)b);
  }
  double t0 = 0;
  for (int64_t i = 0; s == GP_OK && i < warm + steps; i++) {
    if (i == warm) t0 = gp_now();
    int64_t got;
    gp_metrics mt;
    s = gp_loader_next(l, b, x, y, &got);
    if (s == GP_OK) s = gp_t_step_xy(&t, x, y, got, 0.01, &mt);
  }
  if (s == GP_OK) {
    double dt = gp_now() - t0, sps = (double)(steps * b) / dt;
    double fps = model_flops_per_sample(m);
    double model_gf = sps * fps / 1e9;
    printf("model %s  batch %" PRId64 "  threads %d\n", m->name, b, threads);
    printf("sgemm 1024^3: %.1f GFLOP/s\n", gf);
    printf("training: %.1f samples/s, %.2f MFLOP/sample, %.1f GFLOP/s\n", sps, fps / 1e6, model_gf);
    printf("ratio model/sgemm: %.1f%%\n", 100.0 * model_gf / gf);
  }
  free(x);
  free(y);
  if (have_t) gp_trainer_free(&t);
  gp_loader_free(l);
  gp_model_free(m);
  gp_args_free(flags);
  if (s != GP_OK) {
    fprintf(stderr, "bench-train-throughput: %s\n", gp_error_message());
    return gp_status_exit_code(s);
  }
  return 0;
}
