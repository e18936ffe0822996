/* Training through the pipeline: steps, evaluation, weights and exact checkpoints. */
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
#include "core/io/safetensors.h"
#include "core/spec/cfg.h"

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
  if (m->label_input < 0 || m->inputs[m->label_input].dtype != GP_I32)
    return GP_ERR(GP_ERR_SPEC, "%s: the model needs an i32 label input to be trained", m->file);
  GP_TRY(gp_pipeline_check_fit(m, plan, o ? o->mem_limit : 0)); /* before any memory is taken */
  return gp_pipeline_create(m, plan, seed, o, &t->pl);
}

void gp_trainer_free(gp_trainer *t) {
  if (!t || !t->m) return;
  gp_pipeline_free(t->pl);
  memset(t, 0, sizeof *t);
}

gp_status gp_trainer_step(gp_trainer *t, const gp_batch *b, double lr, gp_metrics *out) {
  gp_step_result r;
  gp_status s = gp_pipeline_train_step(t->pl, b, t->step, lr, &r);
  if (s == GP_OK && !isfinite(r.loss_sum))
    s = GP_ERR(GP_ERR_RUNTIME, "the loss is %s at step %" PRId64 " (lower the learning rate?)",
               isnan(r.loss_sum) ? "NaN" : "infinite", t->step + 1);
  if (s != GP_OK) return s;
  t->step++;
  if (out) {
    out->loss = r.loss_sum;
    out->accuracy = r.counted ? (double)r.correct / (double)r.counted : 0.0;
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
  return GP_OK;
}

/* Stages' parameters into one writer; host staging per stage in stage[] (free after). */
static gp_status add_weights(gp_trainer *t, gp_st_writer *w, float **stage) {
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++) /* the stages of this process */
    if (gp_pipeline_local(t->pl, s))
      GP_TRY(gp_params_add_to_writer(gp_pipeline_params(t->pl, s), t->m, w, &stage[s]));
  return GP_OK;
}

static void free_staging(float **stage, int k) {
  for (int s = 0; s < k; s++)
    free(stage[s]);
}

static gp_status load_weights_from(gp_trainer *t, const gp_st_file *f, const char *path,
                                   const char *ignore) {
  GP_TRY(gp_params_check_names(t->m, f, path, ignore));
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++) /* the stages of this process */
    if (gp_pipeline_local(t->pl, s))
      GP_TRY(gp_params_load_from(gp_pipeline_params(t->pl, s), t->m, f, path));
  return GP_OK;
}

gp_status gp_trainer_save_weights(gp_trainer *t, const char *path) {
  int k = gp_pipeline_stages(t->pl);
  float *stage[GP_MAX_DEVICES] = {0};
  gp_st_writer *w = gp_st_writer_new();
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory saving weights");
  gp_status s = add_weights(t, w, stage);
  if (s == GP_OK) s = gp_st_meta_set(w, "format", "pt");
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  if (s == GP_OK) s = gp_st_write(w, path);
  gp_st_writer_free(w);
  free_staging(stage, k);
  return s;
}

/* A counter of the checkpoint's metadata: an integer >= 0 (the seed: any int64). */
static gp_status meta_int(const gp_st_file *f, const char *path, const char *key, int64_t *out) {
  const char *v = gp_st_meta(f, key);
  int64_t x = 0;
  if (!v) return GP_ERR(GP_ERR_DATA, "%s: not a gpipe checkpoint (no %s)", path, key);
  const int any = strcmp(key, "gpipe.seed") == 0;
  if (gp_cfg_parse_int(v, &x) != 1 || (x < 0 && !any))
    return GP_ERR(GP_ERR_DATA, "%s: bad %s '%s' (expected an integer%s)", path, key, v,
                  any ? "" : " >= 0");
  *out = x;
  return GP_OK;
}

gp_status gp_trainer_load_weights(gp_trainer *t, const char *path, int64_t *ckpt_step) {
  gp_st_file *f;
  GP_TRY(gp_st_read(path, &f));
  /* a checkpoint (gpipe.step): its weights; the optimizer state is --resume's */
  int64_t step = -1;
  int ckpt = gp_st_meta(f, "gpipe.step") != NULL;
  gp_status s = ckpt ? meta_int(f, path, "gpipe.step", &step) : GP_OK;
  if (s == GP_OK) s = load_weights_from(t, f, path, ckpt ? "optim." : NULL);
  gp_st_free(f);
  if (s == GP_OK && ckpt_step) *ckpt_step = step;
  return s;
}

static void ckpt_path(const char *dir, char *buf, size_t n) {
  snprintf(buf, n, "%s/checkpoint.safetensors", dir);
}

/* Optimizer state as one flat tensor per slot over all stages in order, which is the layout
 * of one stage holding the whole model: checkpoints do not depend on K. */
static int64_t n_train_total(gp_trainer *t) {
  int64_t n = 0;
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    n += gp_pipeline_params(t->pl, s)->n_train;
  return n;
}

gp_status gp_trainer_save_checkpoint(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos) {
  char path[4096], v[64], name[64];
  int k = gp_pipeline_stages(t->pl);
  gp_optimizer *o0 = gp_pipeline_optimizer(t->pl, 0);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return GP_ERR(GP_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir,
                  strerror(errno));
  ckpt_path(dir, path, sizeof path);
  gp_st_writer *w = gp_st_writer_new();
  float *stage[GP_MAX_DEVICES] = {0}, *slots = NULL;
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  gp_status s = add_weights(t, w, stage);
  int64_t n = n_train_total(t);
  if (s == GP_OK && o0->n_slots && n) {
    slots = malloc((size_t)(n * o0->n_slots) * sizeof(float));
    if (!slots) s = GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  }
  for (int i = 0; s == GP_OK && slots && i < o0->n_slots; i++) {
    int64_t off = 0;
    for (int st = 0; s == GP_OK && st < k; st++) {
      gp_optimizer *o = gp_pipeline_optimizer(t->pl, st);
      int64_t ns = gp_pipeline_params(t->pl, st)->n_train;
      gp_backend *be = gp_pipeline_backend(t->pl, st);
      if (ns) s = be->to_host(be, slots + i * n + off, o->slot[i], (size_t)ns * sizeof(float));
      off += ns;
    }
    gp_shape sh = gp_shape_of(1, &n);
    snprintf(name, sizeof name, "optim.%s", o0->slot_name[i]);
    if (s == GP_OK) s = gp_st_add(w, name, GP_F32, &sh, slots + i * n);
  }
  struct {
    const char *k;
    int64_t v;
  } meta[] = {{"gpipe.step", t->step},           {"gpipe.epoch", pos->epoch},
              {"gpipe.index", pos->index},       {"gpipe.optimizer_t", o0->t},
              {"gpipe.eval_due", pos->eval_due}, {"gpipe.batch_size", t->m->train.batch_size},
              {"gpipe.seed", (int64_t)t->seed}};
  for (size_t i = 0; s == GP_OK && i < sizeof meta / sizeof meta[0]; i++) {
    snprintf(v, sizeof v, "%" PRId64, meta[i].v);
    s = gp_st_meta_set(w, meta[i].k, v);
  }
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  if (s == GP_OK && isfinite(pos->elapsed_s) && pos->elapsed_s >= 0) {
    snprintf(v, sizeof v, "%.3f", pos->elapsed_s);
    s = gp_st_meta_set(w, "gpipe.elapsed_s", v);
  }
  if (s == GP_OK) s = gp_st_write(w, path);
  gp_st_writer_free(w);
  free_staging(stage, k);
  free(slots);
  return s;
}

/* Every "optim." tensor of the file must be a slot of this run's optimizer: state of another
 * optimizer would otherwise be dropped without a word. */
static gp_status check_optim_slots(const gp_st_file *f, const char *path, const gp_optimizer *o) {
  for (int i = 0; i < gp_st_count(f); i++) {
    const char *name = gp_st_entry_at(f, i)->name;
    if (strncmp(name, "optim.", 6) != 0) continue;
    int known = 0;
    for (int j = 0; j < o->n_slots; j++)
      known |= strcmp(name + 6, o->slot_name[j]) == 0;
    if (!known)
      return GP_ERR(GP_ERR_DATA,
                    "%s: optimizer state '%s' is not used by this run's optimizer "
                    "(was it written with another optimizer?)",
                    path, name);
  }
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
  /* absent from checkpoints written before they were stored */
  int64_t batch = t->m->train.batch_size;
  pos->eval_due = 0;
  if (s == GP_OK && gp_st_meta(f, "gpipe.eval_due"))
    s = meta_int(f, path, "gpipe.eval_due", &pos->eval_due);
  if (s == GP_OK && pos->eval_due > 1)
    s = GP_ERR(GP_ERR_DATA, "%s: bad gpipe.eval_due '%" PRId64 "' (expected 0 or 1)", path,
               pos->eval_due);
  pos->elapsed_s = 0;
  const char *el = gp_st_meta(f, "gpipe.elapsed_s");
  if (s == GP_OK && el) {
    char *end;
    pos->elapsed_s = strtod(el, &end);
    if (end == el || *end || !isfinite(pos->elapsed_s) || pos->elapsed_s < 0)
      s = GP_ERR(GP_ERR_DATA, "%s: bad gpipe.elapsed_s '%s' (expected seconds >= 0)", path, el);
  }
  if (s == GP_OK && gp_st_meta(f, "gpipe.batch_size"))
    s = meta_int(f, path, "gpipe.batch_size", &batch);
  if (s == GP_OK && batch != t->m->train.batch_size)
    s = GP_ERR(GP_ERR_DATA,
               "%s: written with batch size %" PRId64 ", this run has %" PRId64
               " (a resumed run keeps its batch size: steps, epochs and the data position count "
               "batches)",
               path, batch, t->m->train.batch_size);
  /* an epoch and an optimizer update take a step each at least: larger ones are damage (and
   * near INT64_MAX they overflowed in the counters) */
  if (s == GP_OK && (pos->epoch > step || opt_t > step))
    s = GP_ERR(
        GP_ERR_DATA,
        "%s: gpipe.%s %" PRId64 " is more than gpipe.step %" PRId64 " (a damaged checkpoint)", path,
        pos->epoch > step ? "epoch" : "optimizer_t", pos->epoch > step ? pos->epoch : opt_t, step);
  if (s == GP_OK && (uint64_t)seed != t->seed)
    s = GP_ERR(GP_ERR_DATA, "%s: written with seed %" PRIu64 ", this run has seed %" PRIu64, path,
               (uint64_t)seed, t->seed);
  const char *model = gp_st_meta(f, "gpipe.model");
  if (s == GP_OK && (!model || strcmp(model, t->m->name) != 0))
    s = GP_ERR(GP_ERR_DATA, "%s: written for model '%s', this is '%s'", path,
               model ? model : "(none)", t->m->name);
  if (s == GP_OK) s = check_optim_slots(f, path, gp_pipeline_optimizer(t->pl, 0));
  if (s == GP_OK) s = load_weights_from(t, f, path, "optim.");
  int64_t n = n_train_total(t);
  gp_optimizer *o0 = gp_pipeline_optimizer(t->pl, 0);
  for (int i = 0; s == GP_OK && i < o0->n_slots && n; i++) {
    snprintf(name, sizeof name, "optim.%s", o0->slot_name[i]);
    const gp_st_entry *e = gp_st_find(f, name);
    if (!e || e->dtype != GP_F32 || e->shape.ndim != 1 || e->shape.d[0] != n) {
      s = GP_ERR(GP_ERR_DATA,
                 "%s: optimizer state '%s' is missing or of the wrong size "
                 "(was it written with another optimizer?)",
                 path, name);
      break;
    }
    const float *src = gp_st_data(f, e);
    s = gp_params_check_finite(path, name, src, n);
    int64_t off = 0;
    for (int st = 0; s == GP_OK && st < gp_pipeline_stages(t->pl); st++) {
      int64_t ns = gp_pipeline_params(t->pl, st)->n_train;
      gp_backend *be = gp_pipeline_backend(t->pl, st);
      if (ns)
        s = be->from_host(be, gp_pipeline_optimizer(t->pl, st)->slot[i], src + off,
                          (size_t)ns * sizeof(float));
      off += ns;
    }
  }
  gp_st_free(f);
  if (s != GP_OK) return s;
  t->step = step;
  for (int st = 0; st < gp_pipeline_stages(t->pl); st++)
    gp_pipeline_optimizer(t->pl, st)->t = opt_t;
  return GP_OK;
}
