/* Data loaders: MNIST-style IDX and CIFAR data sets held in memory as bytes and converted
 * per batch (CIFAR train samples pad-cropped and flipped on the way), and a synthetic
 * source computed per sample from the seed. A train split visits a fresh
 * permutation of the samples each epoch, derived only from (seed, epoch), so a position
 * (epoch, index) is all a checkpoint needs to resume the exact same batches. */
#include "data/loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/augment.h"
#include "data/cifar.h"
#include "data/idx.h"

#define MNIST_SIDE 28
#define MNIST_CLASSES 10
#define CIFAR_PAD 4
/* Synthetic samples are generated, never stored; this only bounds one sample's size. */
#define SYNTH_MAX_NUMEL ((int64_t)1 << 28)

struct gp_loader {
  gp_split split;
  uint64_t seed;
  int64_t n, classes;
  gp_shape sample;
  int64_t numel;     /* elements per sample */
  int channels;      /* sample.d[0] for images */
  int64_t plane;     /* numel / channels */
  uint8_t *pixels;   /* n * numel bytes; NULL for synthetic data */
  uint8_t *labels;   /* n bytes */
  float lut[4][256]; /* byte -> normalized value, per channel */
  uint64_t synth_key;
  int64_t epoch, index;
  int64_t *perm; /* train: the permutation of perm_epoch */
  int64_t perm_epoch;
  int augment; /* pad-crop-flip each train sample (CIFAR) */
  uint8_t aug[GP_CIFAR_PIXELS];
};

static const char *dataset_name(gp_dataset d) {
  switch (d) {
  case GP_DATA_NONE:
    return "none";
  case GP_DATA_FASHION_MNIST:
    return "fashion-mnist";
  case GP_DATA_MNIST:
    return "mnist";
  case GP_DATA_CIFAR10:
    return "cifar10";
  case GP_DATA_CIFAR100:
    return "cifar100";
  case GP_DATA_IMAGENET:
    return "imagenet";
  case GP_DATA_TRANSLATION:
    return "translation";
  case GP_DATA_SYNTHETIC:
    return "synthetic";
  }
  return "?";
}

void gp_loader_free(gp_loader *l) {
  if (!l) return;
  free(l->pixels);
  free(l->labels);
  free(l->perm);
  free(l);
}

static gp_loader *loader_new(gp_split split, uint64_t seed) {
  gp_loader *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->split = split;
  l->seed = seed;
  l->perm_epoch = -1;
  return l;
}

/* Fills the byte -> float tables: (p / 255 - mean[c]) / std[c], or p / 255 without
 * normalization. One table lookup per pixel is both faster and the same number every time. */
static gp_status set_normalization(gp_loader *l, const gp_data_spec *spec) {
  if (spec->n_norm < 0 || spec->n_norm > 4 || (spec->n_norm > 1 && spec->n_norm != l->channels))
    return GP_ERR(GP_ERR_SPEC,
                  "data.normalize has %d values per statistic, %s images have %d channel(s)",
                  spec->n_norm, dataset_name(spec->dataset), l->channels);
  for (int c = 0; c < l->channels && c < 4; c++) {
    float mean = 0.0f, std = 1.0f;
    if (spec->n_norm > 0) {
      int k = spec->n_norm == 1 ? 0 : c;
      mean = spec->mean[k];
      std = spec->std[k];
      if (!(std > 0.0f))
        return GP_ERR(GP_ERR_SPEC, "data.normalize std %g must be > 0", (double)std);
    }
    for (int p = 0; p < 256; p++)
      l->lut[c][p] = ((float)p / 255.0f - mean) / std;
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

static gp_status open_cifar(const gp_data_spec *spec, gp_loader *l) {
  int classes = spec->dataset == GP_DATA_CIFAR10 ? 10 : 100;
  int64_t limit = l->split == GP_SPLIT_TRAIN ? spec->train_limit : spec->test_limit;
  if (limit < 0)
    return GP_ERR(GP_ERR_SPEC, "data %s_limit %lld must be >= 0",
                  l->split == GP_SPLIT_TRAIN ? "train" : "test", (long long)limit);
  l->classes = classes;
  l->channels = 3;
  l->sample = gp_shape_of(3, (int64_t[]){3, GP_CIFAR_SIDE, GP_CIFAR_SIDE});
  l->numel = GP_CIFAR_PIXELS;
  l->plane = GP_CIFAR_SIDE * GP_CIFAR_SIDE;
  l->augment = spec->augment && l->split == GP_SPLIT_TRAIN;
  GP_TRY(set_normalization(l, spec));
  return gp_cifar_read(spec->path, classes, l->split == GP_SPLIT_TRAIN, limit, &l->pixels,
                       &l->labels, &l->n);
}

static gp_status open_mnist(const gp_data_spec *spec, gp_loader *l) {
  const char *dir = spec->path[0]                    ? spec->path
                    : spec->dataset == GP_DATA_MNIST ? "/usr/share/datasets/mnist"
                                                     : "/usr/share/datasets/fashion-mnist";
  const char *pre = l->split == GP_SPLIT_TRAIN ? "train" : "t10k";
  int64_t limit = l->split == GP_SPLIT_TRAIN ? spec->train_limit : spec->test_limit;
  if (limit < 0)
    return GP_ERR(GP_ERR_SPEC, "data %s_limit %lld must be >= 0",
                  l->split == GP_SPLIT_TRAIN ? "train" : "test", (long long)limit);
  char img_path[1100], lbl_path[1100], base[64];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", pre);
  data_file(img_path, sizeof img_path, dir, base);
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", pre);
  data_file(lbl_path, sizeof lbl_path, dir, base);

  l->classes = MNIST_CLASSES;
  l->channels = 1;
  l->sample = gp_shape_of(3, (int64_t[]){1, MNIST_SIDE, MNIST_SIDE});
  l->numel = MNIST_SIDE * MNIST_SIDE;
  l->plane = l->numel;
  GP_TRY(set_normalization(l, spec));

  gp_idx img = {0}, lbl = {0};
  gp_status st = gp_idx_read(img_path, GP_IDX_U8, 3, limit, "image", &img);
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
  l->n = img.items;
  l->pixels = img.data;
  l->labels = lbl.data;
  return GP_OK;
}

gp_status gp_loader_open(const gp_data_spec *spec, gp_split split, uint64_t seed, gp_loader **out) {
  *out = NULL;
  if (split != GP_SPLIT_TRAIN && split != GP_SPLIT_TEST)
    return GP_ERR(GP_ERR_USAGE, "unknown data split %d", (int)split);
  switch (spec->dataset) {
  case GP_DATA_FASHION_MNIST:
  case GP_DATA_MNIST:
  case GP_DATA_CIFAR10:
  case GP_DATA_CIFAR100:
    break;
  case GP_DATA_IMAGENET:
  case GP_DATA_TRANSLATION:
    return GP_ERR(GP_ERR_UNSUPPORTED, "dataset %s is not supported yet",
                  dataset_name(spec->dataset));
  default:
    /* Synthetic data takes its sample shape from the model, not from the data section. */
    return GP_ERR(GP_ERR_USAGE, "dataset %s is not opened from a data section",
                  dataset_name(spec->dataset));
  }
  gp_loader *l = loader_new(split, seed);
  if (!l) return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data loader");
  gp_status st = spec->dataset == GP_DATA_CIFAR10 || spec->dataset == GP_DATA_CIFAR100
                     ? open_cifar(spec, l)
                     : open_mnist(spec, l);
  if (st != GP_OK) {
    gp_loader_free(l);
    return st;
  }
  *out = l;
  return GP_OK;
}

gp_status gp_loader_open_synthetic(const gp_shape *sample, int64_t classes, int64_t samples,
                                   gp_split split, uint64_t seed, gp_loader **out) {
  *out = NULL;
  char buf[128];
  int64_t numel = 0;
  if (split != GP_SPLIT_TRAIN && split != GP_SPLIT_TEST)
    return GP_ERR(GP_ERR_USAGE, "unknown data split %d", (int)split);
  if (sample->ndim < 1 || sample->ndim > GP_MAX_DIMS ||
      gp_shape_numel_checked(sample, SYNTH_MAX_NUMEL, &numel) != GP_OK)
    return GP_ERR(GP_ERR_USAGE, "synthetic data: invalid sample shape %s",
                  gp_shape_str(sample, buf, sizeof buf));
  if (classes < 1 || classes > INT32_MAX)
    return GP_ERR(GP_ERR_USAGE, "synthetic data: %lld classes, expected 1..%d", (long long)classes,
                  INT32_MAX);
  if (samples < 0) return GP_ERR(GP_ERR_USAGE, "synthetic data: %lld samples", (long long)samples);
  gp_loader *l = loader_new(split, seed);
  if (!l) return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data loader");
  l->n = samples;
  l->classes = classes;
  l->sample = *sample;
  l->numel = numel;
  /* Train and test draw different samples from the same seed. */
  l->synth_key = gp_hash_str(seed, split == GP_SPLIT_TRAIN ? "synthetic/train" : "synthetic/test");
  *out = l;
  return GP_OK;
}

int64_t gp_loader_samples(const gp_loader *l) {
  return l->n;
}

gp_shape gp_loader_sample_shape(const gp_loader *l) {
  return l->sample;
}

int64_t gp_loader_classes(const gp_loader *l) {
  return l->classes;
}

static gp_status ensure_perm(gp_loader *l) {
  if (l->perm_epoch == l->epoch) return GP_OK;
  if (!l->perm) {
    l->perm = malloc((size_t)(l->n ? l->n : 1) * sizeof *l->perm);
    if (!l->perm)
      return GP_ERR(GP_ERR_NOMEM, "out of memory for a %lld-sample permutation", (long long)l->n);
  }
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(l->seed, (uint64_t)l->epoch));
  for (int64_t i = 0; i < l->n; i++)
    l->perm[i] = i;
  for (int64_t i = l->n - 1; i > 0; i--) {
    int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1);
    int64_t t = l->perm[i];
    l->perm[i] = l->perm[j];
    l->perm[j] = t;
  }
  l->perm_epoch = l->epoch;
  return GP_OK;
}

static void fill_sample(gp_loader *l, int64_t s, float *x, int32_t *y) {
  if (!l->pixels) {
    gp_rng r;
    gp_rng_seed(&r, gp_hash_combine(l->synth_key, (uint64_t)s));
    *y = (int32_t)gp_rng_below(&r, (uint64_t)l->classes);
    for (int64_t i = 0; i < l->numel; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    return;
  }
  const uint8_t *src = l->pixels + s * l->numel;
  if (l->augment) {
    gp_crop c = gp_augment_draw(l->seed, l->epoch, s, CIFAR_PAD);
    gp_augment_crop(src, l->aug, l->channels, GP_CIFAR_SIDE, GP_CIFAR_SIDE, CIFAR_PAD, c);
    src = l->aug;
  }
  for (int c = 0; c < l->channels; c++) {
    const float *lut = l->lut[c];
    const uint8_t *p = src + c * l->plane;
    float *d = x + c * l->plane;
    for (int64_t i = 0; i < l->plane; i++)
      d[i] = lut[p[i]];
  }
  *y = l->labels[s];
}

gp_status gp_loader_next(gp_loader *l, int64_t max_batch, float *x, int32_t *y, int64_t *got) {
  *got = 0;
  if (max_batch < 1)
    return GP_ERR(GP_ERR_USAGE, "batch size %lld must be >= 1", (long long)max_batch);
  if (l->split == GP_SPLIT_TEST) {
    int64_t k = l->n - l->index < max_batch ? l->n - l->index : max_batch;
    if (k <= 0) {
      /* The pass has ended: report it once, then start the next pass from the top. */
      l->epoch++;
      l->index = 0;
      return GP_OK;
    }
    for (int64_t b = 0; b < k; b++)
      fill_sample(l, l->index + b, x + b * l->numel, y + b);
    l->index += k;
    *got = k;
    return GP_OK;
  }
  if (max_batch > l->n)
    return GP_ERR(GP_ERR_SPEC, "batch size %lld is larger than the %lld training samples",
                  (long long)max_batch, (long long)l->n);
  if (l->index + max_batch > l->n) {
    l->epoch++;
    l->index = 0;
  }
  GP_TRY(ensure_perm(l));
  for (int64_t b = 0; b < max_batch; b++)
    fill_sample(l, l->perm[l->index + b], x + b * l->numel, y + b);
  l->index += max_batch;
  *got = max_batch;
  return GP_OK;
}

void gp_loader_tell(const gp_loader *l, int64_t *epoch, int64_t *index) {
  *epoch = l->epoch;
  *index = l->index;
}

gp_status gp_loader_seek(gp_loader *l, int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0 || index > l->n)
    return GP_ERR(GP_ERR_DATA,
                  "cannot resume data at epoch %lld, sample %lld: the split has "
                  "%lld samples",
                  (long long)epoch, (long long)index, (long long)l->n);
  l->epoch = epoch;
  l->index = index;
  return GP_OK;
}
