/* The model's inputs and the data, train and pipeline sections: read through gp_cfg (so bad
 * values and unknown keys are located), defaults filled in, values checked. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/decimal.h"
#include "core/spec/internal.h"

static gp_status read_shape(gp_sp_ctx *c, const gp_ynode *n, const char *what, gp_shape *out) {
  GP_TRY(gp_sp_want(c, n, GP_Y_SEQ, what));
  if (n->n > GP_MAX_DIMS)
    return gp_sp_err(c, n->line, n->col, "%s: %d dimensions; at most %d are supported", what, n->n,
                     GP_MAX_DIMS);
  memset(out, 0, sizeof *out);
  out->ndim = n->n;
  for (int i = 0; i < n->n; i++) {
    const gp_ynode *d = n->items[i];
    GP_TRY(gp_sp_want(c, d, GP_Y_SCALAR, what));
    char *end;
    errno = 0;
    long long v = strtoll(d->s, &end, 10);
    if (errno == ERANGE)
      return gp_sp_err(c, d->line, d->col, "%s: dimension %s is too large", what, d->s);
    if (end == d->s || *end || v < 1 || !isdigit((unsigned char)d->s[0]))
      return gp_sp_err(c, d->line, d->col, "%s: a dimension must be a positive integer, got '%s'",
                       what, d->s);
    out->d[i] = v;
  }
  int64_t numel;
  if (gp_shape_numel_checked(out, GP_SPEC_MAX_ELEMENTS, &numel) != GP_OK)
    return gp_error_prefix(GP_ERR_SPEC, "%s:%d:%d: %s: ", c->file, n->line, n->col, what);
  return GP_OK;
}

static gp_status read_dtype(gp_sp_ctx *c, const gp_ynode *n, gp_dtype *out) {
  static const char *const names[] = {"f32", "f16", "bf16", "i32", "i64", "u8"};
  _Static_assert(sizeof names / sizeof names[0] == GP_DTYPE_COUNT, "dtype names");
  GP_TRY(gp_sp_want(c, n, GP_Y_SCALAR, "dtype"));
  for (int i = 0; i < GP_DTYPE_COUNT; i++)
    if (!strcasecmp(n->s, names[i])) {
      *out = (gp_dtype)i;
      return GP_OK;
    }
  const char *near = gp_nearest(n->s, names, GP_DTYPE_COUNT);
  if (near)
    return gp_sp_err(c, n->line, n->col, "dtype: unknown type '%s'; did you mean '%s'?", n->s,
                     near);
  return gp_sp_err(c, n->line, n->col, "dtype: unknown type '%s' (f32, f16, bf16, i32, i64 or u8)",
                   n->s);
}

gp_status gp_sp_inputs(gp_sp_ctx *c, const gp_ynode *in, gp_model *m) {
  GP_TRY(gp_sp_want(c, in, GP_Y_MAP, "inputs"));
  if (in->n == 0 || in->n > GP_MAX_MODEL_INPUTS)
    return gp_sp_err(c, in->line, in->col, "inputs: expected 1 to %d named inputs, got %d",
                     GP_MAX_MODEL_INPUTS, in->n);
  for (int i = 0; i < in->n; i++) {
    const gp_ypair *p = &in->pairs[i];
    gp_ynode key = {.kind = GP_Y_SCALAR, .line = p->line, .col = p->col, .plain = 1, .s = p->key};
    GP_TRY(gp_sp_check_name(c, &key, "inputs"));
    gp_model_input *mi = &m->inputs[i];
    snprintf(mi->name, sizeof mi->name, "%s", p->key);
    mi->dtype = GP_F32;
    const gp_ynode *v = p->val, *shape = v;
    if (v->kind == GP_Y_MAP) {
      static const char *const keys[] = {"shape", "dtype", NULL};
      GP_TRY(gp_sp_check_keys(c, v, keys, "for an input"));
      const gp_ypair *s = gp_sp_get(v, "shape"), *t = gp_sp_get(v, "dtype");
      if (!s)
        return gp_sp_err(c, v->line, v->col, "input '%s': missing required key 'shape'", p->key);
      shape = s->val;
      if (t) GP_TRY(read_dtype(c, t->val, &mi->dtype));
    } else if (v->kind != GP_Y_SEQ) {
      return gp_sp_err(c, v->line, v->col,
                       "input '%s': expected a shape like [1, 28, 28] or {shape: [], dtype: i32}, "
                       "got %s",
                       p->key, gp_sp_kind_name(v));
    }
    char what[GP_SPEC_NAME + 16];
    snprintf(what, sizeof what, "input '%s'", p->key);
    GP_TRY(read_shape(c, shape, what, &mi->shape));
  }
  m->n_inputs = in->n;
  return GP_OK;
}

/* A section's own mapping, or NULL when it is absent. */
static gp_status section(gp_sp_ctx *c, const gp_ynode *parent, const char *key, const char *what,
                         const gp_ynode **out) {
  const gp_ypair *p = gp_sp_get(parent, key);
  *out = NULL;
  if (!p || gp_sp_is_null(p->val)) return GP_OK;
  GP_TRY(gp_sp_want(c, p->val, GP_Y_MAP, what));
  *out = p->val;
  return GP_OK;
}

/* The ranges of the sections' numbers (gp_range: checked on the float32 at open bounds,
 * so lr: 1e-50 is refused as 0 and momentum: 0.99999999999 as 1). */
static const gp_range positive = GP_RANGE_POSITIVE, nonnegative = GP_RANGE_NONNEGATIVE,
                      below_one = GP_RANGE_BELOW_ONE, up_to_one = {0, 1, 1, 0};
/* noise far above the images' 0..1 range leaves nothing to denoise */
static const gp_range noise_range = {0, 10, 1, 0};

/* A string setting copied into a fixed buffer (the cfg owns the parsed text). */
static gp_status str_key(gp_cfg *cfg, const char *key, char *out, size_t n) {
  const char *v = "";
  GP_TRY(gp_cfg_str(cfg, key, "", &v));
  if (strlen(v) >= n) return gp_cfg_error(cfg, key, "%s: longer than %zu characters", key, n - 1);
  snprintf(out, n, "%s", v);
  return GP_OK;
}

/* The keys of translation and text data. */
static gp_status text_keys(gp_cfg *cfg, int ds, gp_data_spec *d) {
  static const char *const splits[] = {"valid", "test", NULL};
  int text = ds == GP_DATA_TRANSLATION || ds == GP_DATA_TEXT, split = 0;
  const char *keys[] = {"source", "target", "vocab_file"};
  char *dst[] = {d->source, d->target, d->vocab_file};
  size_t cap[] = {sizeof d->source, sizeof d->target, sizeof d->vocab_file};
  for (int i = 0; i < 3; i++) {
    if (gp_cfg_has(cfg, keys[i]) && !text)
      return gp_cfg_error(cfg, keys[i], "%s: only translation and text data have it", keys[i]);
    GP_TRY(str_key(cfg, keys[i], dst[i], cap[i]));
  }
  if (!d->vocab_file[0]) snprintf(d->vocab_file, sizeof d->vocab_file, "spm.vocab");
  if (text && !d->target[0])
    return gp_cfg_error(cfg, "dataset",
                        "data: %s data needs target: LANG (the file suffix, as es in "
                        "train.es.ids)",
                        ds == GP_DATA_TEXT ? "text" : "translation");
  if (ds == GP_DATA_TRANSLATION && !d->source[0])
    return gp_cfg_error(cfg, "dataset",
                        "data: translation data needs source: LANG (as en in train.en.ids)");
  if (ds == GP_DATA_TEXT && d->source[0])
    return gp_cfg_error(cfg, "source", "source: text data has only a target language");
  GP_TRY(gp_cfg_int(cfg, "pad_id", 0, 0, INT32_MAX, &d->pad_id));
  GP_TRY(gp_cfg_int(cfg, "bos_id", 2, 0, INT32_MAX, &d->bos_id));
  GP_TRY(gp_cfg_int(cfg, "eos_id", 3, 0, INT32_MAX, &d->eos_id));
  GP_TRY(gp_cfg_int(cfg, "bleu_samples", 0, -1, INT64_MAX, &d->bleu_samples));
  GP_TRY(gp_cfg_float(cfg, "decode_len_a", 1.5, 0.0, 1e6, &d->decode_len_a));
  GP_TRY(gp_cfg_float(cfg, "decode_len_b", 10.0, 0.0, 1e9, &d->decode_len_b));
  GP_TRY(gp_cfg_choice(cfg, "eval_split", splits, 0, &split));
  snprintf(d->eval_split, sizeof d->eval_split, "%s", splits[split]);
  return GP_OK;
}

/* normalize is per channel of the images a dataset gives; where no dataset gives images its
 * values would be ignored, so they must at least fit the model's input (synthetic data, or
 * none: a file that later names its dataset), and text has no channels at all. */
static gp_status norm_fits(gp_cfg *cfg, int ds, int nm, const gp_model_input *in) {
  if (ds == GP_DATA_TRANSLATION || ds == GP_DATA_TEXT)
    return gp_cfg_error(cfg, "mean", "normalize: only image data has it");
  if ((ds != GP_DATA_NONE && ds != GP_DATA_SYNTHETIC) || nm == 1) return GP_OK;
  if (in->shape.ndim == 3 && in->shape.d[0] == nm) return GP_OK;
  char shape[96];
  return gp_cfg_error(cfg, "mean",
                      "normalize: %d values per statistic, but input '%s' has shape %s (one "
                      "value, or one per channel of a [C, H, W] input)",
                      nm, in->name, gp_shape_str(&in->shape, shape, sizeof shape));
}

static gp_status data_section(gp_sp_ctx *c, const gp_ynode *root, const gp_model *m,
                              gp_data_spec *d) {
  static const char *const datasets[] = {
      "none",     "fashion-mnist", "mnist",     "cifar10", "cifar100",
      "imagenet", "translation",   "synthetic", "text",    NULL};
  static const char *const nested[] = {"normalize", NULL};
  const gp_ynode *sec, *norm = NULL;
  GP_TRY(section(c, root, "data", "data", &sec));
  d->workers = -1;
  d->shuffle_buffer = 2048;
  d->image_size = 224;
  if (!sec) return GP_OK;
  d->line = sec->line;
  d->col = sec->col;
  gp_cfg *cfg;
  GP_TRY(gp_sp_cfg_of(c, sec, nested, &cfg));
  int ds = 0;
  const char *path = "";
  gp_status s = gp_cfg_choice(cfg, "dataset", datasets, 0, &ds);
  if (s == GP_OK) s = gp_cfg_str(cfg, "path", "", &path);
  if (s == GP_OK && strlen(path) >= sizeof d->path)
    s = gp_cfg_error(cfg, "path", "path: longer than %zu characters", sizeof d->path - 1);
  /* ImageNet's training split is augmented unless told otherwise (as torchvision's recipe) */
  if (s == GP_OK) s = gp_cfg_bool(cfg, "augment", ds == GP_DATA_IMAGENET, &d->augment);
  if (s == GP_OK) s = gp_cfg_int(cfg, "train_limit", 0, 0, INT64_MAX, &d->train_limit);
  if (s == GP_OK) s = gp_cfg_int(cfg, "test_limit", 0, 0, INT64_MAX, &d->test_limit);
  /* what a dataset would ignore is refused, not silently dropped (the values that ask for
   * nothing, augment: false and a limit of 0, are true of any data) */
  const int in_memory = ds == GP_DATA_MNIST || ds == GP_DATA_FASHION_MNIST ||
                        ds == GP_DATA_CIFAR10 || ds == GP_DATA_CIFAR100;
  const int augments = ds == GP_DATA_CIFAR10 || ds == GP_DATA_CIFAR100 || ds == GP_DATA_IMAGENET;
  if (s == GP_OK && ds != GP_DATA_NONE && !augments && d->augment)
    s = gp_cfg_error(cfg, "augment", "augment: only cifar10, cifar100 and imagenet data have it");
  const int64_t limits[2] = {d->train_limit, d->test_limit};
  for (int i = 0; s == GP_OK && ds != GP_DATA_NONE && !in_memory && i < 2; i++)
    if (limits[i])
      s = gp_cfg_error(cfg, i ? "test_limit" : "train_limit",
                       "%s: only mnist, fashion-mnist, cifar10 and cifar100 data have it",
                       i ? "test_limit" : "train_limit");
  int64_t v = 0;
  if (s == GP_OK) s = gp_cfg_bool(cfg, "coarse_labels", 0, &d->coarse_labels);
  if (s == GP_OK && d->coarse_labels && ds != GP_DATA_CIFAR100)
    s = gp_cfg_error(cfg, "coarse_labels", "coarse_labels: only cifar100 has coarse labels");
  static const char *const tasks[] = {"classify", "denoise", NULL};
  if (s == GP_OK) s = gp_cfg_choice(cfg, "task", tasks, GP_TASK_CLASSIFY, &d->task);
  if (s == GP_OK && d->task == GP_TASK_DENOISE && ds != GP_DATA_NONE && !in_memory &&
      ds != GP_DATA_SYNTHETIC)
    s = gp_cfg_error(cfg, "task",
                     "task: denoise is for mnist, fashion-mnist, cifar10, cifar100 and synthetic "
                     "images");
  if (s == GP_OK && d->task != GP_TASK_DENOISE && gp_cfg_has(cfg, "noise_std"))
    s = gp_cfg_error(cfg, "noise_std", "noise_std: only task: denoise has it");
  if (s == GP_OK) s = gp_cfg_float_in(cfg, "noise_std", 0.5, noise_range, &d->noise_std);
  const char *workers = NULL; /* the documented default, "automatic", can be written: auto */
  if (s == GP_OK) s = gp_cfg_str(cfg, "workers", NULL, &workers);
  v = -1;
  if (s == GP_OK && workers && strcmp(workers, "auto") != 0) {
    s = gp_cfg_int(cfg, "workers", -1, 0, 256, &v);
    if (s != GP_OK) s = gp_sp_err_append(s, "; or auto, the default");
  }
  d->workers = (int)v;
  if (s == GP_OK) s = gp_cfg_int(cfg, "prefetch", 0, 1, 1024, &v);
  d->prefetch = (int)v;
  if (s == GP_OK) s = gp_cfg_int(cfg, "shuffle_buffer", 2048, 1, 1 << 24, &d->shuffle_buffer);
  if (s == GP_OK) s = gp_cfg_int(cfg, "max_skips", 0, 0, INT64_MAX, &d->max_skips);
  if (s == GP_OK) s = str_key(cfg, "train_shards", d->train_shards, sizeof d->train_shards);
  if (s == GP_OK) s = str_key(cfg, "test_shards", d->test_shards, sizeof d->test_shards);
  if (s == GP_OK) s = str_key(cfg, "classes", d->classes_file, sizeof d->classes_file);
  if (s == GP_OK) s = gp_cfg_int(cfg, "num_classes", 0, 1, INT32_MAX, &d->num_classes);
  if (s == GP_OK) s = gp_cfg_int(cfg, "train_samples", 0, 0, INT64_MAX, &d->train_samples);
  if (s == GP_OK) s = gp_cfg_int(cfg, "image_size", 224, 8, 4096, &v);
  d->image_size = (int)v;
  static const char *const imagenet_keys[] = {"train_shards", "test_shards", "classes",
                                              "num_classes",  "image_size",  "train_samples"};
  /* other datasets would ignore them */
  size_t n_imagenet = ds == GP_DATA_IMAGENET ? 0 : sizeof imagenet_keys / sizeof *imagenet_keys;
  for (size_t i = 0; s == GP_OK && i < n_imagenet; i++)
    if (gp_cfg_has(cfg, imagenet_keys[i]))
      s = gp_cfg_error(cfg, imagenet_keys[i], "%s: only imagenet data has it", imagenet_keys[i]);
  if (s == GP_OK) s = text_keys(cfg, ds, d);
  if (s == GP_OK) {
    gp_cfg_has(cfg, "normalize");
    s = gp_cfg_check_unknown(cfg, "data", NULL);
  }
  if (s == GP_OK) snprintf(d->path, sizeof d->path, "%s", path); /* path lives in cfg */
  gp_cfg_free(cfg);
  GP_TRY(s);
  d->dataset = (gp_dataset)ds;
  GP_TRY(section(c, sec, "normalize", "normalize", &norm));
  if (!norm) return GP_OK;
  GP_TRY(gp_sp_cfg_of(c, norm, NULL, &cfg));
  gp_cfg_set_what(cfg, "normalize");
  double mean[4], std[4];
  int nm = 0, ns = 0;
  s = gp_cfg_require(cfg, "mean");
  if (s == GP_OK) s = gp_cfg_require(cfg, "std");
  if (s == GP_OK) s = gp_cfg_floats(cfg, "mean", 4, mean, &nm);
  /* the images are divided by it as float32: 1e-50 would be 0 */
  if (s == GP_OK) s = gp_cfg_floats_in(cfg, "std", 4, positive, std, &ns);
  if (s == GP_OK && (nm != ns || nm < 1))
    s = gp_cfg_error(cfg, "std",
                     "normalize: mean and std need the same number of values (1 to 4, one per "
                     "channel), got %d and %d",
                     nm, ns);
  if (s == GP_OK) s = gp_cfg_check_unknown(cfg, NULL, NULL);
  if (s == GP_OK) s = norm_fits(cfg, ds, nm, &m->inputs[0]);
  gp_cfg_free(cfg);
  GP_TRY(s);
  d->n_norm = nm;
  for (int i = 0; i < nm; i++) {
    d->mean[i] = (float)mean[i];
    d->std[i] = (float)std[i];
  }
  return GP_OK;
}

/* A sub-section that may be written as just its type ("optimizer: adamw"). */
static gp_status typed(gp_sp_ctx *c, const gp_ynode *parent, const char *key, gp_cfg **out) {
  const gp_ypair *p = gp_sp_get(parent, key);
  *out = NULL;
  if (!p || gp_sp_is_null(p->val)) return GP_OK;
  if (p->val->kind == GP_Y_SCALAR) {
    if (!(*out = gp_cfg_new(c->file, p->val->line, p->val->col))) return gp_sp_nomem();
    gp_status s = gp_cfg_add_scalar(*out, "type", p->val->s, p->val->line, p->val->col);
    if (s != GP_OK) gp_cfg_free(*out);
    return s;
  }
  GP_TRY(gp_sp_want(c, p->val, GP_Y_MAP, key));
  return gp_sp_cfg_of(c, p->val, NULL, out);
}

int gp_optimizer_slots(const gp_train_spec *t) {
  switch (t->optimizer) {
  case GP_OPT_SGD:
    return t->momentum != 0.0 ? 1 : 0;
  case GP_OPT_ADAMW:
    return 2;
  case GP_OPT_RMSPROP:
    return t->momentum != 0.0 ? 2 : 1;
  }
  return GP_OPT_MAX_SLOTS; /* not reached: the loader admits only the kinds above */
}

static gp_status optimizer(gp_cfg *cfg, gp_train_spec *t) {
  static const char *const kinds[] = {"sgd", "adamw", "rmsprop", NULL};
  int k = 0;
  t->beta1 = 0.9;
  t->beta2 = 0.999;
  t->eps = 1e-8;
  t->alpha = 0.99;
  if (!cfg) {
    t->optimizer = GP_OPT_SGD;
    t->lr = 0.1;
    return GP_OK;
  }
  GP_TRY(gp_cfg_choice(cfg, "type", kinds, 0, &k));
  t->optimizer = (gp_optim_kind)k;
  static const double lr0[] = {0.1, 1e-3, 0.01}, wd0[] = {0, 0.01, 0};
  GP_TRY(gp_cfg_float_in(cfg, "lr", lr0[k], positive, &t->lr));
  GP_TRY(gp_cfg_float_in(cfg, "weight_decay", wd0[k], nonnegative, &t->weight_decay));
  if (k == GP_OPT_SGD || k == GP_OPT_RMSPROP)
    GP_TRY(gp_cfg_float_in(cfg, "momentum", 0, below_one, &t->momentum));
  if (k == GP_OPT_SGD) {
    GP_TRY(gp_cfg_bool(cfg, "nesterov", 0, &t->nesterov));
    if (t->nesterov && t->momentum <= 0)
      return gp_cfg_error(cfg, "nesterov", "nesterov: needs momentum greater than 0");
  }
  if (k == GP_OPT_ADAMW) {
    double b[2];
    int nb = 0;
    GP_TRY(gp_cfg_floats_in(cfg, "betas", 2, below_one, b, &nb));
    if (nb == 1) return gp_cfg_error(cfg, "betas", "betas: expected two values [b1, b2]");
    if (nb == 2) {
      t->beta1 = b[0];
      t->beta2 = b[1];
    }
  }
  if (k == GP_OPT_ADAMW || k == GP_OPT_RMSPROP)
    GP_TRY(gp_cfg_float_in(cfg, "eps", 1e-8, positive, &t->eps));
  if (k == GP_OPT_RMSPROP) GP_TRY(gp_cfg_float_in(cfg, "alpha", 0.99, below_one, &t->alpha));
  return gp_cfg_check_unknown(cfg, kinds[k], NULL);
}

static gp_status lr_schedule(gp_cfg *cfg, gp_train_spec *t) {
  char a[32], b[32];
  static const char *const kinds[] = {"constant", "step", "cosine", "inverse_sqrt", NULL};
  int k = 0;
  t->schedule = GP_LR_CONSTANT;
  t->gamma = 0.1;
  t->warmup_init_lr = 0;
  t->d_model = 0;
  if (!cfg) return GP_OK;
  GP_TRY(gp_cfg_choice(cfg, "type", kinds, 0, &k));
  t->schedule = (gp_lr_kind)k;
  char what[32];
  snprintf(what, sizeof what, "the %s schedule", kinds[k]);
  gp_cfg_set_what(cfg, what);
  GP_TRY(gp_cfg_int(cfg, "warmup_steps", 0, 0, INT64_MAX, &t->warmup_steps));
  if (k == GP_LR_STEP) {
    GP_TRY(gp_cfg_require(cfg, "step_size"));
    GP_TRY(gp_cfg_int(cfg, "step_size", 1, 1, INT64_MAX, &t->step_size));
    GP_TRY(gp_cfg_float_in(cfg, "gamma", 0.1, up_to_one, &t->gamma));
  }
  if (k == GP_LR_COSINE) {
    GP_TRY(gp_cfg_float_in(cfg, "min_lr", 0, nonnegative, &t->min_lr));
    if (t->min_lr > t->lr)
      return gp_cfg_error(cfg, "min_lr", "min_lr: %s is more than lr %s",
                          gp_decimal_shortest(t->min_lr, a, sizeof a),
                          gp_decimal_shortest(t->lr, b, sizeof b));
  }
  if (k == GP_LR_INVERSE_SQRT) {
    /* the warm-up is part of this schedule: its length sets the decay's scale */
    GP_TRY(gp_cfg_require(cfg, "warmup_steps"));
    if (t->warmup_steps < 1)
      return gp_cfg_error(cfg, "warmup_steps", "warmup_steps: inverse_sqrt needs at least 1");
    GP_TRY(gp_cfg_int(cfg, "d_model", 0, 1, INT32_MAX, &t->d_model));
    if (t->d_model > 0 && gp_cfg_has(cfg, "warmup_init_lr"))
      return gp_cfg_error(cfg, "warmup_init_lr",
                          "warmup_init_lr: not with d_model (that form starts from 0)");
    GP_TRY(gp_cfg_float_in(cfg, "warmup_init_lr", 0, nonnegative, &t->warmup_init_lr));
    if (t->warmup_init_lr > t->lr)
      return gp_cfg_error(cfg, "warmup_init_lr", "warmup_init_lr: %s is more than lr %s",
                          gp_decimal_shortest(t->warmup_init_lr, a, sizeof a),
                          gp_decimal_shortest(t->lr, b, sizeof b));
  }
  return gp_cfg_check_unknown(cfg, NULL, NULL);
}

static gp_status train_section(gp_sp_ctx *c, const gp_ynode *root, gp_train_spec *t) {
  static const char *const nested[] = {"optimizer", "schedule", NULL};
  const gp_ynode *sec;
  GP_TRY(section(c, root, "train", "train", &sec));
  gp_ynode empty = {.kind = GP_Y_MAP, .line = 1, .col = 1};
  if (!sec) sec = &empty;
  gp_cfg *cfg = NULL, *opt = NULL, *sch = NULL;
  int64_t seed = 0;
  gp_status s = gp_sp_cfg_of(c, sec, nested, &cfg);
  if (s == GP_OK) s = gp_cfg_int(cfg, "batch_size", 32, 1, GP_MAX_BATCH, &t->batch_size);
  if (s == GP_OK) s = gp_cfg_int(cfg, "epochs", 1, 1, INT32_MAX, &t->epochs);
  if (s == GP_OK) s = gp_cfg_int(cfg, "steps", 0, 0, INT64_MAX / 4, &t->steps);
  if (s == GP_OK) s = gp_cfg_int(cfg, "seed", 0, 0, INT64_MAX, &seed);
  if (s == GP_OK) s = gp_cfg_int(cfg, "eval_every", 0, 0, INT64_MAX, &t->eval_every);
  if (s == GP_OK) s = gp_cfg_int(cfg, "log_every", 50, 1, INT64_MAX, &t->log_every);
  if (s == GP_OK) s = gp_cfg_float_in(cfg, "clip_grad_norm", 0, nonnegative, &t->clip_grad_norm);
  if (s == GP_OK) {
    gp_cfg_has(cfg, "optimizer");
    gp_cfg_has(cfg, "schedule");
    s = gp_cfg_check_unknown(cfg, "train", NULL);
  }
  t->seed = (uint64_t)seed;
  if (s == GP_OK) s = typed(c, sec, "optimizer", &opt);
  if (s == GP_OK) s = optimizer(opt, t);
  if (s == GP_OK) s = typed(c, sec, "schedule", &sch);
  if (s == GP_OK) s = lr_schedule(sch, t);
  gp_cfg_free(cfg);
  gp_cfg_free(opt);
  gp_cfg_free(sch);
  return s;
}

static gp_status devices(gp_sp_ctx *c, const gp_ynode *sec, int64_t stages, gp_pipeline_spec *p) {
  const gp_ypair *dp = gp_sp_get(sec, "devices");
  if (!dp || gp_sp_is_null(dp->val)) return GP_OK;
  const gp_ynode *v = dp->val;
  int n = v->kind == GP_Y_SEQ ? v->n : 1;
  if (v->kind == GP_Y_MAP || n < 1 || n > GP_MAX_DEVICES)
    return gp_sp_err(c, v->line, v->col, "devices: expected a list of 1 to %d devices",
                     GP_MAX_DEVICES);
  for (int i = 0; i < n; i++) {
    const gp_ynode *d = v->kind == GP_Y_SEQ ? v->items[i] : v;
    GP_TRY(gp_sp_want(c, d, GP_Y_SCALAR, "devices"));
    const char *s = d->s;
    int ok = !strcmp(s, "cpu") || !strcmp(s, "cuda");
    if (!ok && !strncmp(s, "cuda:", 5) && s[5]) {
      ok = strlen(s) <= 8;
      for (const char *q = s + 5; *q && ok; q++)
        ok = *q >= '0' && *q <= '9';
    }
    if (!ok)
      return gp_sp_err(c, d->line, d->col, "devices: unknown device '%s' (cpu, cuda or cuda:N)", s);
    /* "cuda" is stored as "cuda:0", the form the rest of the code knows (gp_device_canonical) */
    snprintf(p->devices[i], sizeof p->devices[i], "%s", strcmp(s, "cuda") ? s : "cuda:0");
  }
  if (n != 1 && n != stages)
    return gp_sp_err(c, v->line, v->col,
                     "devices: %d devices for %lld stage%s; give one device (shared by all "
                     "stages) or one per stage",
                     n, (long long)stages, stages == 1 ? "" : "s");
  p->n_devices = n;
  return GP_OK;
}

/* Interleaved 1F1B and V go together, and it takes micro-batches in groups of the stages. */
static gp_status virtual_stages_check(gp_cfg *cfg, const gp_model *m, int64_t stages, int64_t vs,
                                      int64_t micro, int sched) {
  if (vs > 1 && sched != GP_SCHED_INTERLEAVED)
    return gp_cfg_error(cfg, "virtual_stages",
                        "virtual_stages: %lld chunks per stage need schedule: interleaved",
                        (long long)vs);
  if (vs == 1 && sched == GP_SCHED_INTERLEAVED)
    return gp_cfg_error(cfg, "schedule",
                        "schedule: interleaved needs virtual_stages: 2 or more (chunks per stage)");
  if (stages * vs > m->n_units)
    return gp_cfg_error(cfg, "virtual_stages",
                        "virtual_stages: %lld stages x %lld chunks, but the model has only %d "
                        "unit%s",
                        (long long)stages, (long long)vs, m->n_units, m->n_units == 1 ? "" : "s");
  if (vs > 1 && micro % stages)
    return gp_cfg_error(cfg, "micro_batches",
                        "micro_batches: interleaved takes micro-batches in groups of the %lld "
                        "stages: %lld is not a multiple (%lld would do)",
                        (long long)stages, (long long)micro,
                        (long long)((micro + stages - 1) / stages * stages));
  return GP_OK;
}

static gp_status pipeline_section(gp_sp_ctx *c, const gp_ynode *root, gp_model *m) {
  /* gp_schedule_names' in enum order, then auto (the default) */
  static const char *const scheds[] = {"gpipe",       "1f1b", "zb-h1", "zb-h2",
                                       "interleaved", "auto", NULL};
  _Static_assert(GP_SCHED_INTERLEAVED == 4, "the schedules' names in enum order");
  const int sched_auto = (int)(sizeof scheds / sizeof scheds[0]) - 2;
  static const char *const remats[] = {"always", "except_last", "never", "auto", NULL};
  static const char *const nested[] = {"devices", NULL};
  gp_pipeline_spec *p = &m->pipeline;
  p->stages = 1;
  p->micro_batches = 1;
  p->virtual_stages = 1;
  p->replicas = 1;
  p->schedule = GP_SCHED_AUTO;
  p->remat = GP_REMAT_AUTO;
  p->renamed[0] = 0;
  p->n_devices = 1;
  snprintf(p->devices[0], sizeof p->devices[0], "cpu");
  const gp_ynode *sec;
  GP_TRY(section(c, root, "pipeline", "pipeline", &sec));
  if (!sec) return GP_OK;
  gp_cfg *cfg;
  GP_TRY(gp_sp_cfg_of(c, sec, nested, &cfg));
  int64_t stages = 1, micro = 1, replicas = 1, vs = 1, bal[GP_MAX_DEVICES];
  int sched = sched_auto, remat = GP_REMAT_AUTO;
  gp_status s = gp_cfg_int(cfg, "stages", 1, 1, GP_MAX_DEVICES, &stages);
  if (s == GP_OK && stages > m->n_units)
    s = gp_cfg_error(cfg, "stages", "stages: %lld stages but the model has only %d unit%s",
                     (long long)stages, m->n_units, m->n_units == 1 ? "" : "s");
  if (s == GP_OK) s = gp_cfg_int(cfg, "micro_batches", 1, 1, GP_MAX_MICRO_BATCHES, &micro);
  if (s == GP_OK && micro > m->train.batch_size)
    s = gp_cfg_error(cfg, "micro_batches",
                     "micro_batches: %lld is more than batch_size %lld (a micro-batch has at "
                     "least one sample)",
                     (long long)micro, (long long)m->train.batch_size);
  if (s == GP_OK) s = gp_cfg_int(cfg, "replicas", 1, 1, 1 << 20, &replicas);
  if (s == GP_OK && replicas * micro > m->train.batch_size)
    s = gp_cfg_error(cfg, "replicas",
                     "replicas: %lld replicas of %lld micro-batches need a batch of %lld at least "
                     "(batch_size is %lld)",
                     (long long)replicas, (long long)micro, (long long)(replicas * micro),
                     (long long)m->train.batch_size);
  if (s == GP_OK) s = gp_cfg_choice(cfg, "schedule", scheds, sched_auto, &sched);
  if (s == GP_OK) s = gp_cfg_int(cfg, "virtual_stages", 1, 1, GP_MAX_DEVICES / stages, &vs);
  if (s == GP_OK) s = virtual_stages_check(cfg, m, stages, vs, micro, sched);
  /* checkpoint: is remat:'s old name, still read so that older model files load; the note
   * goes to the program (p->renamed), which tells the user */
  if (s == GP_OK && gp_cfg_has(cfg, "checkpoint")) {
    if (gp_cfg_has(cfg, "remat"))
      s = gp_cfg_error(cfg, "checkpoint",
                       "checkpoint: is the old name of remat:, which the section gives too; keep "
                       "remat: alone");
    if (s == GP_OK) s = gp_cfg_choice(cfg, "checkpoint", remats, GP_REMAT_AUTO, &remat);
    if (s == GP_OK) {
      gp_cfg_error(cfg, "checkpoint", "pipeline.checkpoint is now pipeline.remat");
      snprintf(p->renamed, sizeof p->renamed, "%s", gp_error_message());
      gp_error_clear();
    }
  } else if (s == GP_OK) {
    s = gp_cfg_choice(cfg, "remat", remats, GP_REMAT_AUTO, &remat);
  }
  /* the zero-bubble and interleaved lists re-materialize nothing: remat: is never there (auto
   * included) unless the file says otherwise, which is refused where it says it */
  if (s == GP_OK && sched != sched_auto && gp_schedule_keeps_all((gp_schedule_kind)sched)) {
    const char *key = gp_cfg_has(cfg, "remat")        ? "remat"
                      : gp_cfg_has(cfg, "checkpoint") ? "checkpoint"
                                                      : NULL;
    if (key && remat != GP_REMAT_NEVER && remat != GP_REMAT_AUTO)
      s = gp_cfg_error(cfg, key, "%s: %s with schedule %s: it re-materializes nothing (use never)",
                       key, remats[remat], scheds[sched]);
    remat = GP_REMAT_NEVER;
  }
  if (s == GP_OK && gp_cfg_has(cfg, "balance")) {
    s = gp_cfg_ints(cfg, "balance", (int)(stages * vs), NULL, 1, INT32_MAX, bal);
    int64_t sum = 0;
    for (int i = 0; s == GP_OK && i < stages * vs; i++)
      sum += bal[i];
    if (s == GP_OK && sum != m->n_units)
      s = gp_cfg_error(cfg, "balance",
                       "balance: the stages hold %lld unit%s in all, but the model has %d unit%s",
                       (long long)sum, sum == 1 ? "" : "s", m->n_units, m->n_units == 1 ? "" : "s");
    p->n_balance = (int)(stages * vs);
    for (int i = 0; s == GP_OK && i < stages * vs; i++)
      p->balance[i] = (int)bal[i];
  }
  if (s == GP_OK) {
    gp_cfg_has(cfg, "devices");
    s = gp_cfg_check_unknown(cfg, "pipeline", NULL);
  }
  if (s == GP_OK) s = devices(c, sec, stages, p);
  gp_cfg_free(cfg);
  p->stages = (int)stages;
  p->micro_batches = (int)micro;
  p->virtual_stages = (int)vs;
  p->replicas = (int)replicas;
  p->schedule = sched == sched_auto ? GP_SCHED_AUTO : (gp_schedule_kind)sched;
  p->remat = (gp_remat)remat;
  return s;
}

gp_status gp_sp_sections(gp_sp_ctx *c, const gp_ynode *root, gp_model *m) {
  GP_TRY(data_section(c, root, m, &m->data));
  GP_TRY(train_section(c, root, &m->train));
  return pipeline_section(c, root, m);
}
