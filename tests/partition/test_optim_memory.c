/* The optimizer state the planner counts is the state the optimizer allocates: for each
 * optimizer (SGD with and without momentum, AdamW, RMSProp with and without momentum) the
 * memory gp_partition_evaluate predicts for a one-stage plan, less the same prediction with no
 * optimizer state, equals the bytes gp_optimizer_init takes from the backend. */
#include <stdio.h>
#include <stdlib.h>

#include "core/plan/plan.h"
#include "core/plan/solve.h"
#include "core/train/optimizer.h"
#include "tests/support/check.h"

static int failures, passes;

#define MODEL                                                                                      \
  "name: optmem\n"                                                                                 \
  "inputs: {x: [6], label: {shape: [], dtype: i32}}\n"                                             \
  "layers:\n"                                                                                      \
  "  - {type: linear, out_features: 10}\n"                                                         \
  "  - {type: tanh}\n"                                                                             \
  "  - {type: linear, out_features: 4}\n"                                                          \
  "loss: {type: softmax_cross_entropy}\n"                                                          \
  "train:\n"                                                                                       \
  "  batch_size: 4\n"                                                                              \
  "  optimizer: {type: %s%s}\n"

typedef struct optim_case {
  const char *type, *momentum; /* momentum NULL: the optimizer has none */
  int slots;                   /* state buffers the optimizer keeps (torch.optim's) */
} optim_case;

static void one(gp_backend *be, const optim_case *oc) {
  char text[1024], mom_key[32] = "";
  if (oc->momentum) snprintf(mom_key, sizeof mom_key, ", momentum: %s", oc->momentum);
  snprintf(text, sizeof text, MODEL, oc->type, mom_key);
  gp_model *m = NULL;
  if (gp_model_load_string(text, "optmem.yaml", NULL, 0, &m) != GP_OK) {
    printf("FAIL: load %s: %s\n", oc->type, gp_error_message());
    exit(1);
  }
  const char *mom = oc->momentum ? " with momentum" : "";

  /* predicted: the planner's request for this model, one stage over all units */
  gp_unit_costs c = {0};
  gp_partition_req req;
  gp_plan_partition_req(m, &m->pipeline, &req);
  req.stages = 1;
  req.micro = 1;
  req.schedule = GP_SCHED_GPIPE; /* the model's is auto, which only gp_plan_make resolves */
  gp_partition with = {0}, without = {0};
  int first[2] = {0, m->n_units};
  gp_status s = gp_unit_costs_compute(m, 4, GP_COST_FLOPS, 1, NULL, &c);
  if (s == GP_OK) s = gp_partition_evaluate(&c, &req, first, &with);
  gp_partition_req bare = req;
  bare.optim_slots = 0;
  if (s == GP_OK) s = gp_partition_evaluate(&c, &bare, first, &without);
  CHECK(s == GP_OK, "%s%s: costs and evaluation", oc->type, mom);
  double predicted = with.memory[0] - without.memory[0];

  /* allocated: what gp_optimizer_init takes from the backend */
  gp_params p = {0};
  gp_optimizer o = {0};
  s = gp_params_init(&p, m, 0, m->n_nodes, be, 1);
  size_t before = be->mem_used;
  if (s == GP_OK) s = gp_optimizer_init(&o, &m->train, &p);
  size_t allocated = be->mem_used - before;
  CHECK(s == GP_OK, "%s%s: params and optimizer", oc->type, mom);
  CHECK(o.n_slots == oc->slots, "%s%s: %d state buffers, want %d", oc->type, mom, o.n_slots,
        oc->slots);
  CHECK(allocated == (size_t)p.n_train * sizeof(float) * (size_t)oc->slots,
        "%s%s: optimizer allocated %zu bytes for %lld parameters", oc->type, mom, allocated,
        (long long)p.n_train);
  CHECK(predicted == (double)allocated,
        "%s%s: planner predicts %.0f bytes of optimizer state, "
        "the optimizer allocates %zu",
        oc->type, mom, predicted, allocated);
  gp_optimizer_free(&o);
  gp_params_free(&p);
  gp_unit_costs_free(&c);
  gp_model_free(m);
}

int main(void) {
  static const optim_case cases[] = {
      {"sgd", NULL, 0},     {"sgd", "0.9", 1},     {"adamw", NULL, 2},
      {"rmsprop", NULL, 1}, {"rmsprop", "0.9", 2},
  };
  gp_backend *be = NULL;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    one(be, &cases[i]);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
