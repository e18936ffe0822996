/* ImageNet sources: WebDataset shards, streamed (train: a per-epoch shard order; replicas
 * take every R-th shard), or an ImageFolder tree (random access by file). Samples are JPEGs
 * decoded and augmented by the loader's workers through gp_imagenet_sample. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/rng.h"
#include "data/imagefolder.h"
#include "data/imgaug.h"
#include "data/source.h"
#include "data/wds.h"

typedef struct img_source {
  gp_source base;
  uint64_t seed;
  int train, side;
  int augment; /* the training split's random crop and flip (else evaluation's center crop) */
  float mean[3], std[3];
  /* WebDataset */
  char **shards;
  int n_shards;
  int *order; /* this epoch's shards, in reading order */
  int n_order, cur;
  int64_t records; /* read in this epoch */
  gp_wds *w;
  char where[600]; /* base.where */
  /* ImageFolder */
  int folder;
  gp_imagefolder tree;
} img_source;

static void img_free(gp_source *s) {
  img_source *m = (img_source *)s;
  gp_wds_close(m->w);
  gp_strings_free(m->shards, m->n_shards);
  free(m->order);
  if (m->folder) gp_imagefolder_free(&m->tree);
  free(m);
}

static void scratch_free(gp_scratch *sc) {
  if (sc->p[0]) gp_image_free(sc->p[0]);
  free(sc->p[0]);
  free(sc->p[1]);
  memset(sc, 0, sizeof *sc);
}

/* The item's label and the name of where it comes from, checked against the classes. */
static gp_status img_label_of(const img_source *m, const gp_item *it, int32_t *y,
                              const char **where) {
  *where = m->folder ? m->tree.paths[it->ref] : it->where;
  int32_t label = m->folder ? m->tree.labels[it->ref] : it->label;
  if (label < 0 || label >= m->base.classes)
    return GP_ERR(GP_ERR_DATA, "%s: label %d is outside 0..%lld", *where, (int)label,
                  (long long)m->base.classes - 1);
  *y = label;
  return GP_OK;
}

static gp_status img_label(const gp_source *s, const gp_item *it, int32_t *y) {
  const char *where;
  return img_label_of((const img_source *)s, it, y, &where);
}

static gp_status img_decode(const gp_source *s, const gp_item *it, const uint8_t *bytes,
                            int64_t epoch, gp_scratch *sc, float *x, int32_t *y) {
  const img_source *m = (const img_source *)s;
  if (!sc->p[0]) {
    if (!(sc->p[0] = calloc(1, sizeof(gp_image))))
      return GP_ERR(GP_ERR_NOMEM, "out of memory for a decoded image");
    sc->free_fn = scratch_free;
  }
  const char *where;
  size_t len = it->len;
  int32_t label = 0;
  if (m->folder) {
    GP_TRY(gp_read_file(m->tree.paths[it->ref], (uint8_t **)&sc->p[1], &sc->cap[1], &len));
    bytes = sc->p[1];
  }
  GP_TRY(img_label_of(m, it, &label, &where));
  *y = label;
  return gp_imagenet_sample(bytes, len, m->augment, m->seed, epoch, it->sample, m->side, m->mean,
                            m->std, sc->p[0], x, where);
}

static gp_status wds_epoch_begin(gp_source *s, int64_t epoch, int replica, int replicas,
                                 int *by_sample) {
  img_source *m = (img_source *)s;
  gp_wds_close(m->w);
  m->w = NULL;
  m->cur = 0;
  m->records = 0;
  m->n_order = 0;
  *by_sample = m->n_shards < replicas;
  for (int i = 0; i < m->n_shards; i++)
    if (*by_sample || i % replicas == replica) m->order[m->n_order++] = i;
  if (!m->train) return GP_OK;
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(gp_hash_str(m->seed, "shards"), (uint64_t)epoch));
  for (int i = m->n_order - 1; i > 0; i--) {
    int j = (int)gp_rng_below(&r, (uint64_t)i + 1);
    int t = m->order[i];
    m->order[i] = m->order[j];
    m->order[j] = t;
  }
  return GP_OK;
}

static void wds_skip_shard(gp_source *s) {
  img_source *m = (img_source *)s;
  gp_wds_close(m->w);
  m->w = NULL;
  m->cur++;
}

/* The end of an epoch's shards; a test pass that found no sample is an error (it would
 * report a loss of 0 over 0 samples). */
static gp_status wds_end(const img_source *m, int *end) {
  *end = 1;
  if (m->train || m->records > 0 || m->n_order == 0) return GP_OK;
  if (m->n_order == 1)
    return GP_ERR(GP_ERR_DATA, "%s: holds no samples (the whole test split)",
                  m->shards[m->order[0]]);
  return GP_ERR(GP_ERR_DATA, "data.test_shards: its %d shards (%s, ...) hold no samples",
                m->n_order, m->shards[m->order[0]]);
}

static gp_status wds_next(gp_source *s, gp_record *r, int *end) {
  img_source *m = (img_source *)s;
  for (;;) {
    *end = 0;
    if (!m->w) {
      if (m->cur >= m->n_order) return wds_end(m, end);
      GP_TRY(gp_wds_open(m->shards[m->order[m->cur]], &m->w));
    }
    gp_wds_sample smp;
    GP_TRY(gp_wds_next(m->w, &smp));
    if (!smp.key) {
      gp_wds_close(m->w);
      m->w = NULL;
      m->cur++;
      continue;
    }
    if (smp.label > INT32_MAX)
      return GP_ERR(GP_ERR_DATA, "%s: label %lld is outside 0..%lld", smp.label_where,
                    (long long)smp.label, (long long)s->classes - 1);
    GP_TRY(gp_record_reserve(r, smp.jpg_n));
    if (smp.jpg_n) memcpy(r->bytes, smp.jpg, smp.jpg_n); /* a 0-byte member has no data */
    r->len = smp.jpg_n;
    r->label = (int32_t)smp.label;
    m->records++;
    /* the decode checks the label against the classes (a bad one is a bad sample, skippable
     * like a bad image): an out-of-range label is then named by its own member */
    const int bad_label = smp.label < 0 || smp.label >= s->classes;
    snprintf(r->where, sizeof r->where, "%s", bad_label ? smp.label_where : smp.where);
    return GP_OK;
  }
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* dir/rel unless rel is absolute or dir is empty. */
static void join(char *out, size_t n, const char *dir, const char *rel) {
  if (!dir[0] || rel[0] == '/')
    snprintf(out, n, "%s", rel);
  else
    snprintf(out, n, "%s/%s", dir, rel);
}

/* The shard specification (setting key) with every top-level item (and @FILE) made relative
 * to dir. An empty item is refused here: joined onto dir it would name dir itself, whose
 * shards (test shards included) would all be read. */
static gp_status rebase_shards(const char *dir, const char *key, const char *spec, char *out,
                               size_t n) {
  size_t o = 0;
  for (const char *p = spec;;) {
    const char *e = p;
    int depth = 0;
    while (*e && (depth > 0 || *e != ',')) {
      depth += *e == '{' ? 1 : *e == '}' ? -1 : 0;
      e++;
    }
    const char *a = p, *b = e;
    while (a < b && strchr(" \t\r\n\v\f", *a))
      a++;
    while (b > a && strchr(" \t\r\n\v\f", b[-1]))
      b--;
    int at = a < b && *a == '@';
    if (a + at == b) return GP_ERR(GP_ERR_SPEC, "%s '%s': an empty item in the list", key, spec);
    char item[1024], full[2048];
    snprintf(item, sizeof item, "%.*s", (int)(b - a - at), a + at);
    join(full, sizeof full, dir, item);
    int k = snprintf(out + o, n - o, "%s%s%s", o ? "," : "", at ? "@" : "", full);
    if (k < 0 || (size_t)k >= n - o)
      return GP_ERR(GP_ERR_SPEC, "%s '%s': too long with data.path prepended", key, spec);
    o += (size_t)k;
    if (!*e) return GP_OK;
    p = e + 1;
  }
}

static gp_status setup(img_source *m, const gp_data_spec *spec, gp_split split) {
  static const float in_mean[3] = {0.485f, 0.456f, 0.406f}, in_std[3] = {0.229f, 0.224f, 0.225f};
  if (spec->n_norm != 0 && spec->n_norm != 1 && spec->n_norm != 3)
    return GP_ERR(GP_ERR_SPEC,
                  "data.normalize has %d values per statistic, imagenet images have 3 channels",
                  spec->n_norm);
  for (int c = 0; c < 3; c++) {
    int k = spec->n_norm == 1 ? 0 : c;
    m->mean[c] = spec->n_norm ? spec->mean[k] : in_mean[c];
    m->std[c] = spec->n_norm ? spec->std[k] : in_std[c];
  }
  m->train = split == GP_SPLIT_TRAIN;
  m->augment = m->train && spec->augment;
  m->side = spec->image_size > 0 ? spec->image_size : 224;
  m->base.name = "imagenet";
  m->base.heavy = 1;
  m->base.sample = gp_shape_of(3, (int64_t[]){3, m->side, m->side});
  m->base.numel = 3 * (int64_t)m->side * m->side;
  m->base.decode = img_decode;
  m->base.label = img_label;
  m->base.free = img_free;
  char path[1200];
  int64_t classes = spec->num_classes;
  if (spec->classes_file[0]) {
    char **names = NULL;
    int nc = 0;
    join(path, sizeof path, spec->path, spec->classes_file);
    GP_TRY(gp_classes_read(path, &names, &nc));
    gp_strings_free(names, nc);
    if (classes && classes != nc)
      return GP_ERR(GP_ERR_SPEC, "data.num_classes %lld but %s lists %d classes",
                    (long long)classes, path, nc);
    classes = nc;
  }
  const char *shards = m->train ? spec->train_shards : spec->test_shards;
  if (shards[0]) {
    char spec_full[4096];
    GP_TRY(rebase_shards(spec->path, m->train ? "data.train_shards" : "data.test_shards", shards,
                         spec_full, sizeof spec_full));
    GP_TRY(gp_shards_expand(spec_full, &m->shards, &m->n_shards));
    snprintf(m->where, sizeof m->where, "data.%s_shards '%.500s', %d shard%s",
             m->train ? "train" : "test", shards, m->n_shards, m->n_shards == 1 ? "" : "s");
    m->base.where = m->where;
    if (!(m->order = malloc((size_t)m->n_shards * sizeof *m->order)))
      return GP_ERR(GP_ERR_NOMEM, "out of memory for %d shards", m->n_shards);
    m->base.stream = 1;
    m->base.n = -1;
    m->base.n_hint = m->train ? spec->train_samples : 0;
    m->base.epoch_begin = wds_epoch_begin;
    m->base.next = wds_next;
    m->base.skip_shard = wds_skip_shard;
    m->base.classes = classes ? classes : 1000;
    return GP_OK;
  }
  const char *sub = m->train ? "train" : "val";
  join(path, sizeof path, spec->path, sub);
  if (!spec->path[0] || !is_dir(path))
    return GP_ERR(GP_ERR_DATA,
                  "data.path '%s': no %s_shards given and no %s/ folder of class folders there",
                  spec->path, m->train ? "train" : "test", sub);
  char cls[1200] = "", train_dir[1200] = "";
  if (spec->classes_file[0]) join(cls, sizeof cls, spec->path, spec->classes_file);
  /* val/ takes train/'s classes: its own folders would shift every label after a class it
   * lacks. */
  join(train_dir, sizeof train_dir, spec->path, "train");
  if (m->train || !is_dir(train_dir)) train_dir[0] = 0;
  GP_TRY(gp_imagefolder_scan(path, cls, train_dir, &m->tree));
  m->folder = 1;
  snprintf(m->where, sizeof m->where, "%.590s", path);
  m->base.where = m->where;
  m->base.n = m->tree.n;
  m->base.classes = classes ? classes : m->tree.n_classes;
  return GP_OK;
}

gp_status gp_source_open_imagenet(const gp_data_spec *spec, gp_split split, uint64_t seed,
                                  gp_source **out) {
  *out = NULL;
  img_source *m = calloc(1, sizeof *m);
  if (!m) return GP_ERR(GP_ERR_NOMEM, "out of memory opening a data set");
  m->seed = seed;
  gp_status st = setup(m, spec, split);
  if (st != GP_OK) {
    img_free(&m->base);
    return st;
  }
  *out = &m->base;
  return GP_OK;
}
