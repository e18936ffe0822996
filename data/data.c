/* The data of a run: image loaders and token data behind one batch-source interface, opened
 * as the model file's data section (or --data synthetic) says. */
#include "data/data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/denoise.h"

/* ---- an image loader as a batch source ---- */

typedef struct loader_src {
  gp_loader *l;
  int own;
  int64_t batch;
  int xi, yi; /* the model inputs x and y feed */
  float *x;
  int32_t *y;
  const char *split;
  gp_denoise *dn; /* data.task: denoise (NULL: class labels); the clean targets in t */
  float *t;
} loader_src;

static gp_status loader_next(void *ctx, gp_batch *b) {
  loader_src *ls = ctx;
  int64_t got;
  GP_TRY(gp_loader_next(ls->l, ls->batch, ls->x, ls->y, &got));
  memset(b, 0, sizeof *b);
  b->in[ls->xi] = ls->x;
  b->in[ls->yi] = ls->y;
  b->n = got;
  if (ls->dn && got > 0) {
    int64_t epoch, end; /* the batch is the samples before the position, in its epoch */
    gp_loader_tell(ls->l, &epoch, &end);
    gp_denoise_apply(ls->dn, epoch, end - got, got, ls->x, ls->t);
    b->in[ls->yi] = ls->t;
  }
  return GP_OK;
}

static gp_status loader_seek(void *ctx, int64_t epoch, int64_t index) {
  loader_src *ls = ctx;
  if (ls->dn) ls->dn->sq_sum = 0.0, ls->dn->sq_n = 0; /* a pass's noise from here */
  return gp_loader_seek(ls->l, epoch, index);
}

static void loader_tell(const void *ctx, int64_t *epoch, int64_t *index) {
  gp_loader_tell(((const loader_src *)ctx)->l, epoch, index);
}

static int64_t loader_batches(const void *ctx) {
  const loader_src *ls = ctx;
  int64_t n = gp_loader_samples(ls->l); /* < 0: a stream of unknown size */
  return n < 0 ? -1 : n / ls->batch;
}

/* "fashion-mnist (FILE): 60000 training samples of [1, 28, 28], 10 classes" */
static void loader_describe(const void *ctx, char *buf, size_t n) {
  const loader_src *ls = ctx;
  const char *name = gp_loader_name(ls->l), *where = gp_loader_where(ls->l);
  gp_shape sh = gp_loader_sample_shape(ls->l);
  int64_t samples = gp_loader_samples(ls->l), classes = gp_loader_classes(ls->l);
  char shape[96], count[64] = "streamed";
  gp_shape_str(&sh, shape, sizeof shape);
  if (samples >= 0) snprintf(count, sizeof count, "%" PRId64, samples);
  char what[64];
  if (ls->dn)
    snprintf(what, sizeof what, "denoised (noise std %g)", (double)ls->dn->std);
  else
    snprintf(what, sizeof what, "%" PRId64 " class%s", classes, classes == 1 ? "" : "es");
  snprintf(buf, n, "%s%s%s%s: %s %s samples of %s, %s", name ? name : "synthetic",
           where ? " (" : "", where ? where : "", where ? ")" : "", count,
           strcmp(ls->split, "train") ? ls->split : "training", shape, what);
}

static void loader_stats(const void *ctx, gp_batch_source_stats *out) {
  const loader_src *ls = ctx;
  gp_loader_stats st;
  gp_loader_stats_get(ls->l, &st);
  out->split = ls->split;
  out->workers = st.workers;
  out->wait_s = st.wait_s;
  out->batches = st.batches;
  out->skipped = st.skipped;
  out->decoded = st.decoded;
  memcpy(out->first_skip, st.first_skip, sizeof out->first_skip);
  if (ls->dn) {
    out->peak = 1.0;
    out->noisy_sq_sum = ls->dn->sq_sum;
    out->noisy_elems = ls->dn->sq_n;
  }
}

/* The images of the rows wanted; the labels (the loader's y) always whole. */
static gp_status loader_want(void *ctx, const unsigned char *used, int replica, int replicas) {
  loader_src *ls = ctx;
  /* denoising: the targets are the images too */
  return gp_loader_want(ls->l, used[ls->xi] || (ls->dn && used[ls->yi]), replica, replicas);
}

static void loader_src_free(void *ctx) {
  loader_src *ls = ctx;
  if (ls->own) gp_loader_free(ls->l);
  free(ls->x);
  free(ls->y);
  free(ls->t);
  free(ls->dn);
  free(ls);
}

static const gp_batch_source_ops loader_ops = {
    .next = loader_next,
    .seek = loader_seek,
    .tell = loader_tell,
    .describe = loader_describe,
    .batches = loader_batches,
    .stats = loader_stats,
    .free = loader_src_free,
    .want = loader_want,
};

/* gp_loader_batch_source, denoising when dn (the loader's images on the 0..1 scale; a copy
 * is taken) */
static gp_status loader_source(gp_loader *l, const gp_model *m, int64_t batch, const char *split,
                               int own, const gp_denoise *dn, gp_batch_source **out) {
  *out = NULL;
  loader_src *ls = calloc(1, sizeof *ls);
  if (!ls) {
    if (own) gp_loader_free(l);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a batch source");
  }
  *ls = (loader_src){.l = l, .own = own, .batch = batch, .split = split};
  ls->yi = m->label_input;
  ls->xi = ls->yi == 0 ? 1 : 0;
  gp_shape sample = gp_loader_sample_shape(l);
  ls->x = malloc((size_t)(batch * gp_shape_numel(&sample)) * sizeof(float));
  ls->y = malloc((size_t)batch * sizeof(int32_t));
  if (dn) {
    ls->t = malloc((size_t)(batch * gp_shape_numel(&sample)) * sizeof(float));
    if ((ls->dn = malloc(sizeof *ls->dn))) *ls->dn = *dn;
  }
  if (!ls->x || !ls->y || (dn && (!ls->t || !ls->dn))) {
    loader_src_free(ls);
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for a batch");
  }
  return gp_batch_source_new(&loader_ops, ls, m, out);
}

gp_status gp_loader_batch_source(gp_loader *l, const gp_model *m, int64_t batch, const char *split,
                                 int own, gp_batch_source **out) {
  return loader_source(l, m, batch, split, own, NULL, out);
}

/* ---- what the data must fit ---- */

gp_status gp_data_input(const gp_model *m, const char *data, const gp_model_input **out) {
  *out = NULL;
  int xi = m->label_input == 0 ? 1 : 0;
  if (m->label_input >= 0 && m->n_inputs == 2 && m->inputs[xi].dtype == GP_F32) {
    *out = &m->inputs[xi];
    return GP_OK;
  }
  char list[512] = "", shape[96];
  size_t len = 0;
  for (int i = 0; i < m->n_inputs && len < sizeof list; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %s %s", i ? ", " : "",
                            m->inputs[i].name, gp_dtype_spec_name(m->inputs[i].dtype),
                            gp_shape_str(&m->inputs[i].shape, shape, sizeof shape));
  return GP_ERR(GP_ERR_SPEC,
                "%s: %s fills one f32 input and the labels (or a translation or language "
                "model's tokens), but this model's inputs are %s",
                m->file, data, m->n_inputs ? list : "none");
}

int64_t gp_model_classes(const gp_model *m) {
  const gp_shape *o = &m->nodes[m->output_node].layer.out_shape;
  return o->ndim ? o->d[o->ndim - 1] : 1;
}

static gp_status data_fits(const gp_model *m, const gp_model_input *xi, const gp_loader *train,
                           int64_t batch) {
  int64_t classes = gp_model_classes(m);
  gp_shape ds = gp_loader_sample_shape(train);
  char a[96], c[96];
  if (!gp_shape_equal(&ds, &xi->shape))
    return GP_ERR(GP_ERR_SPEC, "%s: the model's input is %s but the data gives %s", m->file,
                  gp_shape_str(&xi->shape, a, sizeof a), gp_shape_str(&ds, c, sizeof c));
  const gp_data_spec *d = &m->data;
  if (d->task == GP_TASK_CLASSIFY && gp_loader_classes(train) != classes) {
    char listed[1100] = ""; /* the list of classes, when one gave them (relative to data.path) */
    if (d->classes_file[0])
      snprintf(listed, sizeof listed, " (the classes listed in %s%s%s)",
               d->classes_file[0] == '/' ? "" : d->path,
               d->classes_file[0] != '/' && d->path[0] ? "/" : "", d->classes_file);
    return GP_ERR(GP_ERR_SPEC,
                  "%s: the model outputs %" PRId64 " class%s, the data has %" PRId64 "%s", m->file,
                  classes, classes == 1 ? "" : "es", gp_loader_classes(train), listed);
  }
  int64_t n = gp_loader_samples(train); /* < 0: a stream of unknown size */
  const char *where = gp_loader_where(train);
  if (n >= 0 && n < batch)
    return GP_ERR(GP_ERR_DATA,
                  "%s: the training set%s%s%s has %" PRId64 " samples, fewer than one batch of "
                  "%" PRId64,
                  gp_loader_name(train), where ? " (" : "", where ? where : "", where ? ")" : "", n,
                  batch);
  return GP_OK;
}

/* The targets the data gives must be the model's: class labels (i32) to classify, the clean
 * image (f32, the input's shape) to denoise. */
static gp_status task_fits(const gp_model *m, const gp_model_input *xi) {
  const gp_model_input *y = &m->inputs[m->label_input];
  char a[96], b[96];
  gp_shape_str(&y->shape, a, sizeof a);
  gp_shape_str(&xi->shape, b, sizeof b);
  if (m->data.task == GP_TASK_DENOISE) {
    if (y->dtype == GP_F32 && gp_shape_equal(&y->shape, &xi->shape)) return GP_OK;
    return GP_ERR(GP_ERR_SPEC,
                  "data.task: denoise makes the clean image (f32 %s) the target, but the model's "
                  "target '%s' is %s %s",
                  b, y->name, gp_dtype_spec_name(y->dtype), a);
  }
  if (y->dtype == GP_I32) return GP_OK;
  return GP_ERR(GP_ERR_SPEC,
                "data.task: classify (the default) gives class labels, but the model's target '%s' "
                "is %s %s: give it i32 labels, or task: denoise for an image target",
                y->name, gp_dtype_spec_name(y->dtype), a);
}

/* An image split as a source (the loader goes with it, freed on failure too); denoising for
 * data.task: denoise, the loader's images then on the 0..1 scale. */
static gp_status wrap(gp_data *d, int k, gp_loader *l, const gp_model *m, int64_t batch,
                      const char *split, uint64_t seed, gp_batch_source **out) {
  gp_denoise dn;
  if (m->data.task == GP_TASK_DENOISE) {
    gp_shape sample = gp_loader_sample_shape(l);
    gp_denoise_init(&dn, &m->data, &sample, k == 0, seed);
  }
  GP_TRY(loader_source(l, m, batch, split, 1, m->data.task == GP_TASK_DENOISE ? &dn : NULL,
                       &d->own[k]));
  *out = d->own[k];
  return GP_OK;
}

static gp_status open_images(const gp_model *m, const gp_data_opts *o, gp_data *d) {
  int64_t classes = gp_model_classes(m), b = o->batch;
  const gp_model_input *xi;
  gp_loader *train = NULL, *test = NULL;
  if (o->synthetic || m->data.dataset == GP_DATA_SYNTHETIC) {
    int64_t per = o->synthetic_batches > 0 ? o->synthetic_batches : 16;
    GP_TRY(gp_data_input(m, "synthetic data", &xi));
    GP_TRY(gp_data_error_at(m, task_fits(m, xi)));
    if (o->train) {
      GP_TRY(gp_loader_open_synthetic(&xi->shape, classes, b * per, GP_SPLIT_TRAIN, o->seed,
                                      o->loader, &train));
      GP_TRY(wrap(d, 0, train, m, b, "train", o->seed, &d->train));
    }
    if (o->eval) {
      GP_TRY(gp_loader_open_synthetic(&xi->shape, classes, b * 2, GP_SPLIT_TEST, o->seed, o->loader,
                                      &test));
      GP_TRY(wrap(d, 1, test, m, b, "test", o->seed, &d->eval));
    }
    d->test = d->eval;
    return GP_OK;
  }
  if (m->data.dataset == GP_DATA_NONE)
    return GP_ERR(GP_ERR_SPEC,
                  "%s: the model file names no dataset to train on (data.dataset is none or "
                  "not given); name one, or use --data synthetic",
                  m->file);
  GP_TRY(gp_data_input(m, "an image dataset", &xi));
  GP_TRY(gp_data_error_at(m, task_fits(m, xi)));
  gp_data_spec spec = m->data;
  if (spec.task == GP_TASK_DENOISE) spec.n_norm = 0; /* normalized after the noise (denoise.h) */
  if (o->train) {
    GP_TRY(gp_data_error_at(m, gp_loader_open(&spec, GP_SPLIT_TRAIN, o->seed, o->loader, &train)));
    GP_TRY(wrap(d, 0, train, m, b, "train", o->seed, &d->train));
  }
  if (o->eval) {
    GP_TRY(gp_data_error_at(m, gp_loader_open(&spec, GP_SPLIT_TEST, o->seed, o->loader, &test)));
    GP_TRY(wrap(d, 1, test, m, b, "test", o->seed, &d->eval));
  }
  d->test = d->eval;
  /* batch 0: any number, for a test split checked alone */
  return train ? data_fits(m, xi, train, b) : test ? data_fits(m, xi, test, 0) : GP_OK;
}

gp_status gp_data_open(const gp_model *m, const gp_data_opts *o, gp_data *out) {
  memset(out, 0, sizeof *out);
  gp_status s;
  if (gp_seq_is_sequence_model(m)) {
    s = gp_data_error_at(m, gp_seqdata_open(m, o->synthetic, o->seed, o->batch, &out->seq));
    if (s == GP_OK) {
      /* its corpora are read whole: the training rows describe the data even unasked */
      out->train = gp_seqdata_source(out->seq, GP_SEQ_TRAIN);
      out->eval = o->eval ? gp_seqdata_source(out->seq, GP_SEQ_EVAL) : NULL;
      out->test = o->eval ? gp_seqdata_source(out->seq, GP_SEQ_TEST) : NULL;
    }
  } else {
    s = open_images(m, o, out);
  }
  if (s != GP_OK) gp_data_close(out);
  return s;
}

void gp_data_close(gp_data *d) {
  if (!d) return;
  gp_batch_source_free(d->own[0]);
  gp_batch_source_free(d->own[1]);
  gp_seqdata_free(d->seq);
  memset(d, 0, sizeof *d);
}

int gp_data_translates(const gp_data *d) {
  return d->seq && gp_seqdata_translates(d->seq);
}

gp_status gp_data_decode_set(gp_data *d, int final, gp_decode_set *out, int *any) {
  memset(out, 0, sizeof *out);
  *any = 0;
  return d->seq ? gp_seqdata_decode_set(d->seq, final, out, any) : GP_OK;
}

gp_status gp_data_error_at(const gp_model *m, gp_status s) {
  if (s != GP_ERR_SPEC || strncmp(gp_error_message(), "data.", 5) != 0) return s;
  if (!m->data.line) return gp_error_prefix(s, "%s: ", m->file);
  return gp_error_prefix(s, "%s:%d:%d: ", m->file, m->data.line, m->data.col);
}
