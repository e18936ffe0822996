/* Random-access sources: MNIST-style IDX and CIFAR data sets held in memory as bytes and
 * converted per sample (CIFAR train samples pad-cropped and flipped on the way), and a
 * synthetic source computed per sample from the seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/augment.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/source.h"

#define MNIST_SIDE 28
#define MNIST_CLASSES 10
#define CIFAR_PAD 4
/* Synthetic samples are generated, never stored; this only bounds one sample's size. */
#define SYNTH_MAX_NUMEL ((int64_t)1 << 28)

typedef struct mem_source {
  gp_source base;
  uint64_t seed;
  int channels;      /* sample.d[0] for images */
  int64_t plane;     /* numel / channels */
  uint8_t *pixels;   /* n * numel bytes; NULL for synthetic data */
  uint8_t *labels;   /* n bytes */
  float lut[4][256]; /* byte -> normalized value, per channel */
  uint64_t synth_key;
  int augment;      /* pad-crop-flip each train sample (CIFAR) */
  char where[1200]; /* base.where */
} mem_source;

static void mem_free(gp_source *s) {
  mem_source *m = (mem_source *)s;
  free(m->pixels);
  free(m->labels);
  free(m);
}

static gp_status mem_decode(const gp_source *s, const gp_item *it, const uint8_t *bytes,
                            int64_t epoch, gp_scratch *scratch, float *x, int32_t *y) {
  (void)bytes;
  (void)scratch;
  const mem_source *m = (const mem_source *)s;
  int64_t i = it->ref;
  if (!m->pixels) {
    gp_rng r;
    gp_rng_seed(&r, gp_hash_combine(m->synth_key, (uint64_t)i));
    *y = (int32_t)gp_rng_below(&r, (uint64_t)s->classes);
    for (int64_t k = 0; k < s->numel; k++)
      x[k] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    return GP_OK;
  }
  const uint8_t *src = m->pixels + i * s->numel;
  uint8_t aug[GP_CIFAR_PIXELS];
  if (m->augment) {
    gp_crop c = gp_augment_draw(m->seed, epoch, i, CIFAR_PAD);
    gp_augment_crop(src, aug, m->channels, GP_CIFAR_SIDE, GP_CIFAR_SIDE, CIFAR_PAD, c);
    src = aug;
  }
  for (int c = 0; c < m->channels; c++) {
    const float *lut = m->lut[c];
    const uint8_t *p = src + c * m->plane;
    float *d = x + c * m->plane;
    for (int64_t k = 0; k < m->plane; k++)
      d[k] = lut[p[k]];
  }
  *y = m->labels[i];
  return GP_OK;
}

static gp_status mem_label(const gp_source *s, const gp_item *it, int32_t *y) {
  const mem_source *m = (const mem_source *)s;
  if (m->pixels) {
    *y = m->labels[it->ref];
    return GP_OK;
  }
  gp_rng r; /* synthetic: the label is the sample's first draw */
  gp_rng_seed(&r, gp_hash_combine(m->synth_key, (uint64_t)it->ref));
  *y = (int32_t)gp_rng_below(&r, (uint64_t)s->classes);
  return GP_OK;
}

static mem_source *mem_new(void) {
  mem_source *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->base.decode = mem_decode;
  m->base.label = mem_label;
  m->base.free = mem_free;
  return m;
}

/* Fills the byte -> float tables: (p / 255 - mean[c]) / std[c], or p / 255 without
 * normalization. One table lookup per pixel is both faster and the same number every time. */
static gp_status set_normalization(mem_source *m, const gp_data_spec *spec) {
  if (spec->n_norm < 0 || spec->n_norm > 4 || (spec->n_norm > 1 && spec->n_norm != m->channels))
    return GP_ERR(GP_ERR_SPEC,
                  "data.normalize has %d values per statistic, %s images have %d channel%s",
                  spec->n_norm, m->base.name, m->channels, m->channels == 1 ? "" : "s");
  for (int c = 0; c < m->channels && c < 4; c++) {
    float mean = 0.0f, std = 1.0f;
    if (spec->n_norm > 0) {
      int k = spec->n_norm == 1 ? 0 : c;
      mean = spec->mean[k];
      std = spec->std[k];
      if (!(std > 0.0f))
        return GP_ERR(GP_ERR_SPEC, "data.normalize std %g must be > 0", (double)std);
    }
    for (int p = 0; p < 256; p++)
      m->lut[c][p] = ((float)p / 255.0f - mean) / std;
  }
  return GP_OK;
}

/* dir/base.gz, or dir/base when only the unpacked file is there; the .gz name (the usual
 * one) when neither is, so that the error names it. */
static void data_file(char *out, size_t n, const char *dir, const char *base) {
  snprintf(out, n, "%s/%s", dir, base);
  if (access(out, F_OK) == 0) {
    char gz[1100];
    snprintf(gz, sizeof gz, "%s/%s.gz", dir, base);
    if (access(gz, F_OK) != 0) return;
  }
  snprintf(out, n, "%s/%s.gz", dir, base);
}

/* The split's data.*_limit; m's base.where becomes what (a file or folder) is read, and the
 * limit when one is set. */
static gp_status limit_of(const gp_data_spec *spec, gp_split split, const char *what, mem_source *m,
                          int64_t *limit) {
  const char *key = split == GP_SPLIT_TRAIN ? "train" : "test";
  *limit = split == GP_SPLIT_TRAIN ? spec->train_limit : spec->test_limit;
  if (*limit < 0)
    return GP_ERR(GP_ERR_SPEC, "data %s_limit %lld must be >= 0", key, (long long)*limit);
  if (*limit)
    snprintf(m->where, sizeof m->where, "%.1000s, data.%s_limit %lld", what, key,
             (long long)*limit);
  else
    snprintf(m->where, sizeof m->where, "%s", what);
  m->base.where = m->where;
  return GP_OK;
}

static gp_status open_cifar(const gp_data_spec *spec, gp_split split, mem_source *m) {
  int classes = spec->dataset == GP_DATA_CIFAR10 ? 10 : 100;
  int64_t limit;
  GP_TRY(limit_of(spec, split, spec->path, m, &limit));
  m->base.name = classes == 10 ? "cifar10" : "cifar100";
  m->base.classes = spec->coarse_labels ? 20 : classes;
  m->channels = 3;
  m->base.sample = gp_shape_of(3, (int64_t[]){3, GP_CIFAR_SIDE, GP_CIFAR_SIDE});
  m->base.numel = GP_CIFAR_PIXELS;
  m->plane = GP_CIFAR_SIDE * GP_CIFAR_SIDE;
  m->augment = spec->augment && split == GP_SPLIT_TRAIN;
  GP_TRY(set_normalization(m, spec));
  return gp_cifar_read(spec->path, classes, spec->coarse_labels, split == GP_SPLIT_TRAIN, limit,
                       &m->pixels, &m->labels, &m->base.n);
}

static gp_status open_mnist(const gp_data_spec *spec, gp_split split, mem_source *m) {
  const char *dir = spec->path[0]                    ? spec->path
                    : spec->dataset == GP_DATA_MNIST ? "/usr/share/datasets/mnist"
                                                     : "/usr/share/datasets/fashion-mnist";
  const char *pre = split == GP_SPLIT_TRAIN ? "train" : "t10k";
  int64_t limit;
  char img_path[1100], lbl_path[1100], base[64];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", pre);
  data_file(img_path, sizeof img_path, dir, base);
  GP_TRY(limit_of(spec, split, img_path, m, &limit));
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", pre);
  data_file(lbl_path, sizeof lbl_path, dir, base);

  m->base.name = spec->dataset == GP_DATA_MNIST ? "mnist" : "fashion-mnist";
  m->base.classes = MNIST_CLASSES;
  m->channels = 1;
  m->base.sample = gp_shape_of(3, (int64_t[]){1, MNIST_SIDE, MNIST_SIDE});
  m->base.numel = MNIST_SIDE * MNIST_SIDE;
  m->plane = m->base.numel;
  GP_TRY(set_normalization(m, spec));

  gp_idx img = {0}, lbl = {0};
  gp_status st = gp_idx_read(img_path, GP_IDX_U8, 3, limit, "image", &img);
  if (st == GP_OK && img.items == 0)
    st = GP_ERR(GP_ERR_DATA, "%s: holds no samples (its header says 0 images)", img_path);
  if (st == GP_OK && (img.dims[1] != MNIST_SIDE || img.dims[2] != MNIST_SIDE))
    st = GP_ERR(GP_ERR_DATA, "%s: images are %lldx%lld, expected %dx%d", img_path,
                (long long)img.dims[1], (long long)img.dims[2], MNIST_SIDE, MNIST_SIDE);
  if (st == GP_OK) st = gp_idx_read(lbl_path, GP_IDX_U8, 1, limit, "label", &lbl);
  if (st == GP_OK && img.dims[0] != lbl.dims[0])
    st = GP_ERR(GP_ERR_DATA, "%s has %lld images but %s has %lld labels", img_path,
                (long long)img.dims[0], lbl_path, (long long)lbl.dims[0]);
  for (int64_t i = 0; st == GP_OK && i < lbl.items; i++) {
    int v = ((const uint8_t *)lbl.data)[i];
    if (v >= MNIST_CLASSES)
      st = GP_ERR(GP_ERR_DATA, "%s: label %d of sample %lld is outside 0..%d", lbl_path, v,
                  (long long)i, MNIST_CLASSES - 1);
  }
  if (st != GP_OK) {
    gp_idx_free(&img);
    gp_idx_free(&lbl);
    return st;
  }
  m->base.n = img.items;
  m->pixels = img.data;
  m->labels = lbl.data;
  return GP_OK;
}

gp_status gp_source_open_mem(const gp_data_spec *spec, gp_split split, uint64_t seed,
                             gp_source **out) {
  *out = NULL;
  mem_source *m = mem_new();
  if (!m) return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data set");
  m->seed = seed;
  gp_status st = spec->dataset == GP_DATA_CIFAR10 || spec->dataset == GP_DATA_CIFAR100
                     ? open_cifar(spec, split, m)
                     : open_mnist(spec, split, m);
  if (st != GP_OK) {
    mem_free(&m->base);
    return st;
  }
  *out = &m->base;
  return GP_OK;
}

gp_status gp_source_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, gp_source **out) {
  *out = NULL;
  char buf[128];
  int64_t numel = 0;
  if (sample->ndim < 1 || sample->ndim > GP_MAX_DIMS)
    return GP_ERR(
        GP_ERR_USAGE,
        "synthetic data: the input's shape is %s, but it makes samples of 1 to %d dimensions",
        gp_shape_str(sample, buf, sizeof buf), GP_MAX_DIMS);
  if (gp_shape_numel_checked(sample, SYNTH_MAX_NUMEL, &numel) != GP_OK)
    return GP_ERR(GP_ERR_USAGE,
                  "synthetic data: the input's shape %s has more values than the %lld it makes a "
                  "sample of at most",
                  gp_shape_str(sample, buf, sizeof buf), (long long)SYNTH_MAX_NUMEL);
  if (classes < 1 || classes > INT32_MAX)
    return GP_ERR(GP_ERR_USAGE, "synthetic data: %lld classes, expected 1..%d", (long long)classes,
                  INT32_MAX);
  if (samples < 0) return GP_ERR(GP_ERR_USAGE, "synthetic data: %lld samples", (long long)samples);
  mem_source *m = mem_new();
  if (!m) return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data set");
  m->base.name = "synthetic";
  m->base.n = samples;
  m->base.classes = classes;
  m->base.sample = *sample;
  m->base.numel = numel;
  /* Train and test draw different samples from the same seed. */
  m->synth_key = gp_hash_str(seed, split == GP_SPLIT_TRAIN ? "synthetic/train" : "synthetic/test");
  *out = &m->base;
  return GP_OK;
}
