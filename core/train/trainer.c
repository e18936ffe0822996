/* One-stage synchronous training: forward, backward, deferred statistics, clipping, update. */
#include "core/train/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/io/safetensors.h"

gp_status gp_trainer_init(gp_trainer *t, gp_model *m, gp_backend *be, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->m = m;
  t->be = be;
  t->seed = seed;
  t->input_index = -1;
  for (int i = 0; i < m->n_inputs; i++) {
    if (i == m->label_input) continue;
    if (t->input_index >= 0 || m->inputs[i].dtype != GP_F32)
      return GP_ERR(GP_ERR_UNSUPPORTED,
                    "%s: models with inputs other than one f32 input and labels are not "
                    "supported by this trainer yet",
                    m->file);
    t->input_index = i;
  }
  if (t->input_index < 0 || m->label_input < 0)
    return GP_ERR(GP_ERR_SPEC, "%s: the model needs one f32 input and one label input", m->file);
  gp_arena_init(&t->arena, be, 0);
  GP_TRY(gp_params_init(&t->params, m, 0, m->n_nodes, be, seed));
  return gp_optimizer_init(&t->opt, &m->train, &t->params);
}

void gp_trainer_free(gp_trainer *t) {
  if (!t || !t->m) return;
  gp_optimizer_free(&t->opt);
  gp_params_free(&t->params);
  gp_arena_free(&t->arena);
  t->be->free(t->be, t->x_dev.data);
  t->be->free(t->be, t->y_dev.data);
  memset(t, 0, sizeof *t);
}

/* Copies a host batch to the device and points the pass's inputs at it. */
static gp_status stage_batch(gp_trainer *t, gp_pass *p, const float *x, const int32_t *y,
                             int64_t batch) {
  gp_backend *be = t->be;
  const gp_model_input *xi = &t->m->inputs[t->input_index];
  int64_t per = gp_shape_numel(&xi->shape);
  if (batch > t->staged) {
    be->free(be, t->x_dev.data);
    be->free(be, t->y_dev.data);
    t->x_dev.data = t->y_dev.data = NULL;
    t->staged = 0;
    GP_TRY(be->alloc(be, (size_t)(batch * per) * sizeof(float), &t->x_dev.data));
    GP_TRY(be->alloc(be, (size_t)batch * sizeof(int32_t), &t->y_dev.data));
    t->staged = batch;
  }
  GP_TRY(be->from_host(be, t->x_dev.data, x, (size_t)(batch * per) * sizeof(float)));
  GP_TRY(be->from_host(be, t->y_dev.data, y, (size_t)batch * sizeof(int32_t)));
  gp_tensor *vx = &p->val[t->input_index], *vy = &p->val[t->m->label_input];
  vx->data = t->x_dev.data;
  vx->shape = gp_shape_batch(batch, &xi->shape);
  vx->dtype = GP_F32;
  vx->device = be->device;
  vy->data = t->y_dev.data;
  vy->shape = gp_shape_batch(batch, &t->m->inputs[t->m->label_input].shape);
  vy->dtype = GP_I32;
  vy->device = be->device;
  return GP_OK;
}

static gp_status clip_gradients(gp_trainer *t) {
  double max = t->m->train.clip_grad_norm, ss = 0;
  if (max <= 0 || !t->params.n_train) return GP_OK;
  GP_TRY(t->be->sumsq(t->be, t->params.n_train, t->params.grad, &ss));
  double norm = sqrt(ss);
  if (norm <= max) return GP_OK;
  return t->be->axpby(t->be, t->params.n_train, 0.0f, t->params.grad, (float)(max / norm),
                      t->params.grad);
}

gp_status gp_trainer_step(gp_trainer *t, const float *x, const int32_t *y, int64_t batch,
                          double lr, gp_metrics *out) {
  gp_model *m = t->m;
  gp_pass p;
  GP_TRY(gp_pass_init(&p, m, 0, m->n_nodes, batch));
  gp_exec e = {.be = t->be, .arena = &t->arena, .training = 1, .seed = t->seed,
               .step = t->step, .micro = 0, .loss_count = batch};
  gp_status s = stage_batch(t, &p, x, y, batch);
  if (s == GP_OK) s = gp_params_zero_grad(&t->params);
  if (s == GP_OK) s = gp_pass_forward(&p, &e);
  if (s == GP_OK && !isfinite(e.loss_sum))
    s = GP_ERR(GP_ERR_RUNTIME, "the loss is %s at step %" PRId64 " (lower the learning rate?)",
               isnan(e.loss_sum) ? "NaN" : "infinite", t->step + 1);
  if (s == GP_OK) s = gp_pass_backward(&p, &e);
  for (int i = 0; i < m->n_nodes && s == GP_OK; i++) {
    gp_layer *l = &m->nodes[i].layer;
    if (l->type->step_end) s = l->type->step_end(l, t->be);
  }
  if (s == GP_OK) s = clip_gradients(t);
  if (s == GP_OK) s = gp_optimizer_step(&t->opt, lr);
  gp_pass_free(&p);
  gp_status r = gp_arena_reset(&t->arena);
  if (s == GP_OK) s = r;
  if (s != GP_OK) return s;
  t->step++;
  if (out) {
    out->loss = e.loss_sum;
    out->accuracy = e.counted ? (double)e.correct / (double)e.counted : 0.0;
    out->samples = batch;
  }
  return GP_OK;
}

gp_status gp_trainer_evaluate(gp_trainer *t, gp_batch_fn next, void *ctx, int64_t batch,
                              int64_t max_samples, gp_metrics *out) {
  gp_model *m = t->m;
  int64_t per = gp_shape_numel(&m->inputs[t->input_index].shape);
  float *x = malloc((size_t)(batch * per) * sizeof(float));
  int32_t *y = malloc((size_t)batch * sizeof(int32_t));
  gp_status s = (x && y) ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of host memory for evaluation");
  gp_exec e = {.be = t->be, .arena = &t->arena, .training = 0, .seed = t->seed, .loss_count = 1};
  int64_t total = 0;
  while (s == GP_OK && (max_samples == 0 || total < max_samples)) {
    int64_t want = batch, got = 0;
    if (max_samples && max_samples - total < want) want = max_samples - total;
    s = next(ctx, want, x, y, &got);
    if (s != GP_OK || got == 0) break;
    gp_pass p;
    s = gp_pass_init(&p, m, 0, m->n_nodes, got);
    if (s == GP_OK) s = stage_batch(t, &p, x, y, got);
    if (s == GP_OK) s = gp_pass_forward(&p, &e);
    gp_pass_free(&p);
    gp_status r = gp_arena_reset(&t->arena);
    if (s == GP_OK) s = r;
    total += got;
  }
  free(x);
  free(y);
  if (s != GP_OK) return s;
  out->samples = e.counted;
  out->loss = e.counted ? e.loss_sum / (double)e.counted : 0.0;
  out->accuracy = e.counted ? (double)e.correct / (double)e.counted : 0.0;
  return GP_OK;
}

gp_status gp_trainer_save_weights(gp_trainer *t, const char *path) {
  gp_st_writer *w = gp_st_writer_new();
  float *stage = NULL;
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory saving weights");
  gp_status s = gp_params_add_to_writer(&t->params, t->m, w, &stage);
  if (s == GP_OK) s = gp_st_meta_set(w, "format", "pt");
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  if (s == GP_OK) s = gp_st_write(w, path);
  gp_st_writer_free(w);
  free(stage);
  return s;
}

gp_status gp_trainer_load_weights(gp_trainer *t, const char *path) {
  gp_st_file *f;
  GP_TRY(gp_st_read(path, &f));
  gp_status s = gp_params_load_from(&t->params, t->m, f, path, NULL);
  gp_st_free(f);
  return s;
}

static void ckpt_path(const char *dir, char *buf, size_t n) {
  snprintf(buf, n, "%s/checkpoint.safetensors", dir);
}

gp_status gp_trainer_save_checkpoint(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos) {
  char path[4096], v[64], name[64];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return GP_ERR(GP_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir,
                  strerror(errno));
  ckpt_path(dir, path, sizeof path);
  gp_st_writer *w = gp_st_writer_new();
  float *stage = NULL, *slots = NULL;
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  gp_status s = gp_params_add_to_writer(&t->params, t->m, w, &stage);
  int64_t n = t->params.n_train;
  if (s == GP_OK && t->opt.n_slots && n) {
    slots = malloc((size_t)(n * t->opt.n_slots) * sizeof(float));
    if (!slots) s = GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  }
  for (int i = 0; s == GP_OK && slots && i < t->opt.n_slots; i++) {
    gp_shape sh = gp_shape_of(1, &n);
    s = t->be->to_host(t->be, slots + i * n, t->opt.slot[i], (size_t)n * sizeof(float));
    snprintf(name, sizeof name, "optim.%s", t->opt.slot_name[i]);
    if (s == GP_OK) s = gp_st_add(w, name, GP_F32, &sh, slots + i * n);
  }
  struct {
    const char *k;
    int64_t v;
  } meta[] = {{"gpipe.step", t->step},       {"gpipe.epoch", pos->epoch},
              {"gpipe.index", pos->index},   {"gpipe.optimizer_t", t->opt.t},
              {"gpipe.seed", (int64_t)t->seed}};
  for (size_t i = 0; s == GP_OK && i < sizeof meta / sizeof meta[0]; i++) {
    snprintf(v, sizeof v, "%" PRId64, meta[i].v);
    s = gp_st_meta_set(w, meta[i].k, v);
  }
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  if (s == GP_OK) s = gp_st_write(w, path);
  gp_st_writer_free(w);
  free(stage);
  free(slots);
  return s;
}

static gp_status meta_int(const gp_st_file *f, const char *path, const char *key, int64_t *out) {
  const char *v = gp_st_meta(f, key);
  char *end;
  if (!v) return GP_ERR(GP_ERR_DATA, "%s: not a gpipe checkpoint (no %s)", path, key);
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || end == v)
    return GP_ERR(GP_ERR_DATA, "%s: bad %s '%s'", path, key, v);
  *out = x;
  return GP_OK;
}

gp_status gp_trainer_load_checkpoint(gp_trainer *t, const char *dir, gp_ckpt_pos *pos) {
  char path[4096], name[64];
  ckpt_path(dir, path, sizeof path);
  gp_st_file *f;
  GP_TRY(gp_st_read(path, &f));
  int64_t step = 0, opt_t = 0, seed = 0;
  gp_status s = meta_int(f, path, "gpipe.step", &step);
  if (s == GP_OK) s = meta_int(f, path, "gpipe.epoch", &pos->epoch);
  if (s == GP_OK) s = meta_int(f, path, "gpipe.index", &pos->index);
  if (s == GP_OK) s = meta_int(f, path, "gpipe.optimizer_t", &opt_t);
  if (s == GP_OK) s = meta_int(f, path, "gpipe.seed", &seed);
  if (s == GP_OK && (uint64_t)seed != t->seed)
    s = GP_ERR(GP_ERR_DATA, "%s: written with seed %" PRIu64 ", this run has seed %" PRIu64,
               path, (uint64_t)seed, t->seed);
  if (s == GP_OK) s = gp_params_load_from(&t->params, t->m, f, path, "optim.");
  int64_t n = t->params.n_train;
  for (int i = 0; s == GP_OK && i < t->opt.n_slots && n; i++) {
    snprintf(name, sizeof name, "optim.%s", t->opt.slot_name[i]);
    const gp_st_entry *e = gp_st_find(f, name);
    if (!e || e->dtype != GP_F32 || e->shape.ndim != 1 || e->shape.d[0] != n)
      s = GP_ERR(GP_ERR_DATA, "%s: optimizer state '%s' is missing or of the wrong size "
                 "(was it written with another optimizer?)", path, name);
    else s = t->be->from_host(t->be, t->opt.slot[i], gp_st_data(f, e), (size_t)n * sizeof(float));
  }
  gp_st_free(f);
  if (s != GP_OK) return s;
  t->step = step;
  t->opt.t = opt_t;
  return GP_OK;
}
