/* Training through the pipeline: steps and evaluation (weights and checkpoints: checkpoint.c). */
#include "core/train/trainer.h"
#include "core/train/fit.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/eval/perplexity.h"

gp_status gp_trainer_init(gp_trainer *t, const gp_model *m, const gp_plan *plan,
                          const gp_pipeline_opts *o, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->m = m;
  t->plan = *plan;
  t->seed = seed;
  for (int i = 0; i < m->n_inputs; i++)
    if (m->inputs[i].dtype != GP_F32 && m->inputs[i].dtype != GP_I32)
      return GP_ERR(GP_ERR_UNSUPPORTED, "%s: input '%s' is %s; inputs must be f32 or i32", m->file,
                    m->inputs[i].name, gp_dtype_spec_name(m->inputs[i].dtype));
  const char *loss = m->nodes[m->n_nodes - 1].layer.type->name;
  const int f32_loss =
      !strcmp(loss, "mse") || !strcmp(loss, "l1") || !strcmp(loss, "bce_with_logits");
  if (m->label_input < 0 || (m->inputs[m->label_input].dtype != GP_I32 &&
                             !(m->inputs[m->label_input].dtype == GP_F32 && f32_loss)))
    return GP_ERR(GP_ERR_SPEC,
                  "%s: the model needs an i32 label input, or an f32 target input with loss mse, "
                  "l1 or bce_with_logits, to be trained",
                  m->file);
  GP_TRY(gp_pipeline_check_fit(m, plan, o ? o->mem_limit : 0)); /* before any memory is taken */
  return gp_pipeline_create(m, plan, seed, o, &t->pl);
}

void gp_trainer_free(gp_trainer *t) {
  if (!t || !t->m) return;
  gp_pipeline_free(t->pl);
  gp_batch_buffers_free(&t->keep[0]);
  gp_batch_buffers_free(&t->keep[1]);
  memset(t, 0, sizeof *t);
}

gp_status gp_trainer_step(gp_trainer *t, const gp_batch *b, double lr, gp_metrics *out) {
  return gp_trainer_step_ahead(t, b, NULL, lr, out);
}

gp_status gp_trainer_step_ahead(gp_trainer *t, const gp_batch *b, const gp_batch *next, double lr,
                                gp_metrics *out) {
  gp_step_result r;
  gp_status s = gp_pipeline_train_step_ahead(t->pl, b, next, t->step, lr, &r);
  if (s == GP_OK && !isfinite(r.loss_sum))
    s = GP_ERR(GP_ERR_RUNTIME, "the loss is %s at step %" PRId64 " (lower the learning rate?)",
               isnan(r.loss_sum) ? "NaN" : "infinite", t->step + 1);
  if (s != GP_OK) return s;
  t->step++;
  if (out) {
    out->loss = r.loss_sum;
    out->accuracy = r.counted ? (double)r.correct / (double)r.counted : 0.0;
    if (t->m->inputs[t->m->label_input].dtype == GP_F32) out->accuracy = NAN; /* regression */
    out->samples = b->n;
    out->targets = r.counted;
  }
  return GP_OK;
}

gp_status gp_batch_xy(const gp_model *m, const float *x, const int32_t *y, int64_t n, gp_batch *b) {
  memset(b, 0, sizeof *b);
  b->n = n;
  int xi = m->label_input == 0 ? 1 : 0;
  if (m->n_inputs != 2 || m->label_input < 0 || m->inputs[xi].dtype != GP_F32)
    return GP_ERR(GP_ERR_USAGE,
                  "%s: (x, y) batches are for models of one f32 input and labels; give this "
                  "model one buffer per input (gp_batch)",
                  m->file);
  b->in[xi] = x;
  b->in[m->label_input] = y;
  return GP_OK;
}

gp_status gp_batch_buffers_alloc(const gp_model *m, int64_t cap, gp_batch_buffers *out) {
  memset(out, 0, sizeof *out);
  out->cap = cap;
  for (int i = 0; i < m->n_inputs; i++) {
    size_t per = (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
    out->in[i] = malloc((size_t)cap * per + 1);
    if (!out->in[i]) {
      gp_batch_buffers_free(out);
      return GP_ERR(GP_ERR_NOMEM, "out of host memory for batches of %lld samples", (long long)cap);
    }
  }
  return GP_OK;
}

void gp_batch_buffers_free(gp_batch_buffers *b) {
  if (!b) return;
  for (int i = 0; i < GP_MAX_MODEL_INPUTS; i++)
    free(b->in[i]);
  memset(b, 0, sizeof *b);
}

gp_batch gp_batch_of(const gp_batch_buffers *b, int64_t n) {
  gp_batch r = {.n = n};
  for (int i = 0; i < GP_MAX_MODEL_INPUTS; i++)
    r.in[i] = b->in[i];
  return r;
}

gp_status gp_batch_keep(const gp_model *m, const gp_batch *b, gp_batch_buffers *buf,
                        gp_batch *out) {
  if (b->n > buf->cap) {
    gp_batch_buffers_free(buf);
    GP_TRY(gp_batch_buffers_alloc(m, b->n, buf));
  }
  *out = *b;
  for (int i = 0; i < m->n_inputs; i++) {
    if (!b->in[i]) continue;
    size_t per = (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
    memcpy(buf->in[i], b->in[i], (size_t)b->n * per);
    out->in[i] = buf->in[i];
  }
  return GP_OK;
}

gp_status gp_trainer_fetch(gp_trainer *t, gp_batch_source *src, int ahead) {
  if (t->have_next) { /* fetched with the last step: in the other buffer */
    t->cur = t->next;
    t->flip ^= 1;
    t->cur_epoch = t->next_epoch;
    t->cur_index = t->next_index;
  } else {
    GP_TRY(gp_batch_source_next(src, &t->cur, NULL));
    gp_batch_source_tell(src, &t->cur_epoch, &t->cur_index);
    if (ahead) GP_TRY(gp_batch_keep(t->m, &t->cur, &t->keep[t->flip], &t->cur));
  }
  t->have_next = 0;
  if (!ahead) return GP_OK;
  GP_TRY(gp_batch_source_next(src, &t->next, NULL));
  gp_batch_source_tell(src, &t->next_epoch, &t->next_index);
  GP_TRY(gp_batch_keep(t->m, &t->next, &t->keep[t->flip ^ 1], &t->next));
  t->have_next = 1;
  return GP_OK;
}

gp_status gp_trainer_step_fetched(gp_trainer *t, double lr, gp_metrics *out) {
  return gp_trainer_step_ahead(t, &t->cur, t->have_next ? &t->next : NULL, lr, out);
}

gp_status gp_trainer_evaluate(gp_trainer *t, gp_batch_source *src, gp_metrics *out) {
  gp_batch_source_stats st;
  gp_batch_source_stats_get(src, &st);
  GP_TRY(gp_batch_source_seek(src, 0, 0));
  gp_step_result r = {0};
  gp_prediction pr = {0};
  int64_t total = 0;
  for (;;) {
    gp_batch b;
    int end;
    if (t->check) GP_TRY(t->check());
    GP_TRY(gp_batch_source_next(src, &b, &end));
    if (end) break;
    if (b.n == 0) continue; /* this replica's share of a batch smaller than the replicas */
    /* perplexity needs the logits on the host: asked only where the targets are tokens */
    GP_TRY(st.tokens ? gp_pipeline_predict(t->pl, &b, &pr, &r) : gp_pipeline_eval(t->pl, &b, &r));
    total += b.n;
  }
  out->samples = total;
  out->targets = r.counted;
  out->loss = r.counted ? r.loss_sum / (double)r.counted : 0.0;
  out->accuracy = r.counted ? (double)r.correct / (double)r.counted : 0.0;
  out->perplexity = st.tokens ? gp_perplexity(pr.nll_sum, pr.nll_count) : NAN;
  out->ppl_targets = pr.nll_count;
  /* denoising: PSNR over the pass's pixels, 10 log10(peak^2 / MSE); the output's from the mse
   * loss (the mean over every element), the noisy input's from the noise the source drew */
  gp_batch_source_stats_get(src, &st);
  const int mse = !strcmp(t->m->nodes[t->m->n_nodes - 1].layer.type->name, "mse");
  out->psnr = out->input_psnr = NAN;
  if (st.peak > 0 && mse && r.counted) out->psnr = 10.0 * log10(st.peak * st.peak / out->loss);
  if (st.peak > 0 && st.noisy_elems)
    out->input_psnr = 10.0 * log10(st.peak * st.peak * (double)st.noisy_elems / st.noisy_sq_sum);
  return GP_OK;
}
