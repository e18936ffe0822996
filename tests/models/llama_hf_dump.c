/* What gpipe computes for a converted Hugging Face Llama (tests/models/llama_hf.py compares it
 * with transformers'): the model file and weights of scripts/hf_llama.py, the fixture's token
 * ids [B, T] as one row each (segment 1, positions 0..T-1, labels the next token, -100 at the
 * last: transformers' shifted labels), as K stages x M micro-batches. Writes OUT.safetensors:
 * "logits" [B, T, vocab] (a forward of the whole model with the K stages' parameters), "loss"
 * and "grad.<name>" for every parameter: one gp_trainer_step at learning rate 0, which runs
 * the pipeline (its loss is the mean over the mini-batch's B (T - 1) tokens, as
 * transformers' is).
 * Usage: llama_hf_dump MODEL.yaml WEIGHTS.safetensors STEP.safetensors K M OUT.safetensors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/exec/pass.h"
#include "core/io/safetensors.h"
#include "core/plan/plan.h"
#include "core/train/params.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"

static void die_if(gp_status s, const char *what) {
  if (s != GP_OK) {
    fprintf(stderr, "llama_hf_dump: %s: %s\n", what, gp_error_message());
    exit(1);
  }
}

/* The stage parameters' bindings of node i. */
static gp_layer_bind *bind_of(gp_trainer *t, int i) {
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    if (i >= p->first_node && i < p->end_node) return gp_params_bind(p, i);
  }
  return NULL;
}

/* The whole model's forward on the batch, on the CPU, with every node bound to the parameters
 * of the stage that holds it; adds the output of the node feeding the loss as "logits" (a copy
 * in *keep, malloc'd: the writer holds the pointer until it writes). */
static void forward_logits(gp_trainer *t, gp_batch_buffers *bufs, int64_t batch, gp_st_writer *w,
                           float **keep) {
  const gp_model *m = t->m;
  gp_backend *be;
  die_if(gp_cpu_backend_create(1, &be), "cpu backend");
  gp_arena arena;
  gp_arena_init(&arena, be, 0);
  gp_layer_bind *binds = calloc((size_t)m->n_nodes, sizeof *binds);
  if (!binds) gp_t_die("out of memory");
  for (int i = 0; i < m->n_nodes; i++)
    binds[i] = *bind_of(t, i);
  gp_exec e = {
      .be = be, .arena = &arena, .training = 0, .seed = 1, .loss_count = batch, .binds = binds};
  gp_pass p;
  die_if(gp_pass_init(&p, m, 0, m->n_nodes, batch), "pass");
  for (int i = 0; i < m->n_inputs; i++)
    p.val[i] = (gp_tensor){bufs->in[i], gp_shape_batch(batch, &m->inputs[i].shape),
                           m->inputs[i].dtype, -1};
  die_if(gp_pass_forward(&p, &e), "forward");
  /* The loss node is the last; its first input is the logits. */
  int id = m->nodes[m->n_nodes - 1].in[0];
  gp_tensor lg = p.val[id];
  size_t bytes = (size_t)gp_shape_numel(&lg.shape) * sizeof(float);
  *keep = malloc(bytes);
  if (!*keep) gp_t_die("out of memory");
  memcpy(*keep, lg.data, bytes);
  die_if(gp_st_add(w, "logits", GP_F32, &lg.shape, *keep), "logits");
  gp_pass_free(&p);
  gp_arena_free(&arena);
  free(binds);
  gp_backend_destroy(be);
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: llama_hf_dump MODEL.yaml WEIGHTS STEP.safetensors K M OUT\n");
    return 2;
  }
  int k = atoi(argv[4]), mb = atoi(argv[5]);
  gp_st_file *fx;
  die_if(gp_st_read(argv[3], &fx), argv[3]);
  const gp_st_entry *te = gp_st_find(fx, "tokens");
  if (!te || te->dtype != GP_I32 || te->shape.ndim != 2) gp_t_die("fixture: tokens [B, T] i32");
  int64_t B = te->shape.d[0], T = te->shape.d[1];
  const int32_t *tok = gp_st_data(fx, te);

  gp_model *mo;
  die_if(gp_model_load(argv[1], NULL, 0, &mo), argv[1]);
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = mb;
  mo->pipeline.n_balance = 0;
  gp_plan plan;
  gp_pipeline_opts po = {.cores = 1};
  die_if(gp_plan_make(mo, &mo->pipeline, &plan), "plan");
  gp_trainer t;
  die_if(gp_trainer_init(&t, mo, &plan, &po, 42), "trainer");
  int64_t step;
  die_if(gp_trainer_load_weights(&t, argv[2], &step), argv[2]);

  gp_batch_buffers bufs;
  die_if(gp_batch_buffers_alloc(mo, B, &bufs), "buffers");
  for (int i = 0; i < mo->n_inputs; i++) {
    const char *name = mo->inputs[i].name;
    int32_t *v = bufs.in[i];
    if (gp_shape_numel(&mo->inputs[i].shape) != T) gp_t_die("model inputs are not [T]");
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < T; j++) {
        int32_t x = tok[b * T + j];
        if (strcmp(name, "seg") == 0)
          x = 1;
        else if (strcmp(name, "pos") == 0)
          x = (int32_t)j;
        else if (i == mo->label_input)
          x = j + 1 < T ? tok[b * T + j + 1] : -100;
        v[b * T + j] = x;
      }
  }

  gp_st_writer *w = gp_st_writer_new();
  if (!w) gp_t_die("out of memory");
  float *logits;
  forward_logits(&t, &bufs, B, w, &logits);

  gp_batch bt = gp_batch_of(&bufs, B);
  gp_metrics mt;
  die_if(gp_trainer_step(&t, &bt, 0.0, &mt), "step");
  float loss = (float)mt.loss;
  gp_shape one = {.ndim = 1, .d = {1}};
  die_if(gp_st_add(w, "loss", GP_F32, &one, &loss), "loss");
  char name[512];
  for (int i = 0; i < mo->n_nodes; i++) {
    const gp_layer *l = &mo->nodes[i].layer;
    gp_layer_bind *bd = bind_of(&t, i);
    for (int j = 0; j < l->n_params; j++) {
      snprintf(name, sizeof name, "grad.%s.%s", l->path, l->pdesc[j].name);
      die_if(gp_st_add(w, name, GP_F32, &l->pdesc[j].shape, bd->grad[j]), name);
    }
  }
  die_if(gp_st_write(w, argv[6]), argv[6]);
  printf("K=%d M=%d loss %.6f\n", k, mb, mt.loss);
  gp_st_writer_free(w);
  free(logits);
  gp_batch_buffers_free(&bufs);
  gp_trainer_free(&t);
  gp_model_free(mo);
  gp_st_free(fx);
  return 0;
}
