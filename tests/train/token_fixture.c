#include "tests/train/token_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/train/stage_params.h"
#include "tests/support/check.h"

void token_fixture_batch(const gp_model *mo, int step, int64_t batch, int64_t len, int32_t vocab,
                         gp_batch_buffers *bufs) {
  gp_rng r;
  gp_rng_seed(&r, 500 + (uint64_t)step);
  int64_t real_len[64];
  for (int64_t b = 0; b < batch && b < 64; b++)
    real_len[b] = 1 + (int64_t)gp_rng_below(&r, (uint64_t)len);
  for (int i = 0; i < mo->n_inputs; i++) {
    int32_t *v = bufs->in[i];
    const char *name = mo->inputs[i].name;
    for (int64_t b = 0; b < batch && b < 64; b++) {
      int64_t L = strstr(name, "src") ? len + 1 - real_len[b] : real_len[b], half = (L + 1) / 2;
      for (int64_t j = 0; j < len; j++) {
        int real = j < L;
        int32_t *e = &v[b * len + j];
        if (strstr(name, "mask"))
          *e = real;
        else if (strstr(name, "seg"))
          *e = real ? (j < half ? 1 : 2) : 0;
        else if (strstr(name, "pos"))
          *e = real ? (int32_t)(j < half ? j : j - half) : 0;
        else if (i == mo->label_input)
          *e = real ? (int32_t)gp_rng_below(&r, (uint64_t)vocab) : -100;
        else
          *e = real ? 1 + (int32_t)gp_rng_below(&r, (uint64_t)vocab - 1) : 0;
      }
    }
  }
}

gp_override token_fixture_tiny_nmt[TOKEN_TINY_NMT_N + 1] = {
    {"inputs.src.shape.0", "6"},      {"inputs.src_seg.shape.0", "6"},
    {"inputs.src_pos.shape.0", "6"},  {"inputs.tgt_seg.shape.0", "6"},
    {"inputs.tgt_pos.shape.0", "6"},  {"inputs.tgt_in.shape.0", "6"},
    {"inputs.label.shape.0", "6"},    {"blocks.embed.params.vocab", "13"},
    {"blocks.embed.params.d", "8"},   {"blocks.embed.params.max_len", "8"},
    {"blocks.embed.params.p", "0"},   {"blocks.enc.params.d", "8"},
    {"blocks.enc.params.heads", "2"}, {"blocks.enc.params.ff", "12"},
    {"blocks.enc.params.p", "0"},     {"blocks.dec.params.d", "8"},
    {"blocks.dec.params.heads", "2"}, {"blocks.dec.params.ff", "12"},
    {"blocks.dec.params.p", "0"},     {"layers.1.repeat", "2"},
    {"layers.3.repeat", "2"},         {"layers.4.out_features", "13"},
};

int token_fixture_copy_all;

void token_fixture_train(const char *file, const gp_override *ov, int nov, int k, int m,
                         gp_schedule_kind sched, gp_remat remat, int steps, int64_t batch,
                         int64_t len, int32_t vocab, double lr, double *loss, gp_trainer *t) {
  gp_model *mo;
  if (gp_model_load(file, ov, nov, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = m;
  mo->pipeline.schedule = sched;
  mo->pipeline.remat = remat;
  mo->pipeline.n_balance = 0;
  gp_plan plan;
  gp_pipeline_opts po = {.cores = 1,
                         .channels = token_fixture_copy_all ? GP_CHAN_FORCE_COPY : GP_CHAN_AUTO};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(t, mo, &plan, &po, 42) != GP_OK) gp_t_die("init");
  gp_batch_buffers bufs;
  if (gp_batch_buffers_alloc(mo, batch, &bufs) != GP_OK) gp_t_die("buffers");
  for (int s = 0; s < steps; s++) {
    gp_metrics mt;
    token_fixture_batch(mo, s, batch, len, vocab, &bufs);
    gp_batch b = gp_batch_of(&bufs, batch);
    if (gp_trainer_step(t, &b, lr, &mt) != GP_OK) gp_t_die("step");
    loss[s] = mt.loss;
  }
  gp_batch_buffers_free(&bufs);
}

float *token_fixture_weights(gp_trainer *t, int64_t *n) {
  return stage_params_gather(t, 0, n);
}
