/* Weights and exact checkpoints of a trainer: one safetensors file, or shards written per
 * process and committed by an index (core/io/shards.h). Optimizer state is stored per
 * parameter, so no tensor spans two processes' stages; the flat "optim.<slot>" tensors of
 * older checkpoints still load. */
#include "core/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/shards.h"
#include "core/io/target.h"
#include "core/spec/cfg.h"

#define CKPT_FILE "checkpoint.safetensors"
#define CKPT_INDEX "checkpoint.safetensors.index.json"

static void param_name(const gp_layer *l, int j, char *buf, size_t n) {
  snprintf(buf, n, "%s.%s", l->path, l->pdesc[j].name);
}

static void optim_name(const char *slot, const gp_layer *l, int j, char *buf, size_t n) {
  snprintf(buf, n, "optim.%s.%s.%s", slot, l->path, l->pdesc[j].name);
}

static int64_t shard_size(const gp_trainer *t) {
  return t->shard_bytes > 0 ? t->shard_bytes : GP_SHARD_BYTES_DEFAULT;
}

/* Host staging of the tensors added to a writer, freed after it is written. */
typedef struct staging {
  float **p;
  int n, cap;
} staging;

static float **staging_slot(staging *st) {
  if (st->n == st->cap) {
    int nc = st->cap ? st->cap * 2 : 16;
    float **p = realloc(st->p, (size_t)nc * sizeof *p);
    if (!p) return NULL;
    st->p = p;
    st->cap = nc;
  }
  st->p[st->n] = NULL;
  return &st->p[st->n++];
}

static void staging_free(staging *st) {
  for (int i = 0; i < st->n; i++)
    free(st->p[i]);
  free(st->p);
}

static gp_status add_weights(gp_trainer *t, int s, gp_st_writer *w, staging *st) {
  float **h = staging_slot(st);
  if (!h) return GP_ERR(GP_ERR_NOMEM, "out of host memory saving weights");
  return gp_params_add_to_writer(gp_pipeline_params(t->pl, s), t->m, w, h);
}

/* Stage s's optimizer state, one tensor per slot and trainable parameter (the slot buffers are
 * laid out as the parameters: trainable ones in node order). */
static gp_status add_optim(gp_trainer *t, int s, gp_st_writer *w, staging *st) {
  gp_params *p = gp_pipeline_params(t->pl, s);
  gp_optimizer *o = gp_pipeline_optimizer(t->pl, s);
  gp_backend *be = gp_pipeline_backend(t->pl, s);
  int64_t n = p->n_train;
  if (!o->n_slots || !n) return GP_OK;
  float **h = staging_slot(st);
  if (!h || !(*h = malloc((size_t)(n * o->n_slots) * sizeof(float))))
    return GP_ERR(GP_ERR_NOMEM, "out of host memory writing a checkpoint");
  char name[1024];
  for (int i = 0; i < o->n_slots; i++) {
    float *slot = *h + i * n;
    GP_TRY(be->to_host(be, slot, o->slot[i], (size_t)n * sizeof(float)));
    int64_t off = 0;
    for (int node = p->first_node; node < p->end_node; node++) {
      const gp_layer *l = &t->m->nodes[node].layer;
      for (int j = 0; j < l->n_params; j++) {
        if (!l->pdesc[j].trainable) continue;
        optim_name(o->slot_name[i], l, j, name, sizeof name);
        GP_TRY(gp_st_add(w, name, GP_F32, &l->pdesc[j].shape, slot + off));
        off += gp_shape_numel(&l->pdesc[j].shape);
      }
    }
  }
  return GP_OK;
}

/* The checkpoint's metadata, as strings. */
typedef struct meta_list {
  int n;
  char key[16][32], val[16][64];
} meta_list;

static void meta_add(meta_list *ml, const char *k, const char *fmt, int64_t v) {
  snprintf(ml->key[ml->n], sizeof ml->key[0], "%s", k);
  snprintf(ml->val[ml->n++], sizeof ml->val[0], fmt, v);
}

static void ckpt_meta(gp_trainer *t, const gp_ckpt_pos *pos, int64_t opt_t, meta_list *ml) {
  ml->n = 0;
  meta_add(ml, "gpipe.step", "%" PRId64, t->step);
  meta_add(ml, "gpipe.epoch", "%" PRId64, pos->epoch);
  meta_add(ml, "gpipe.index", "%" PRId64, pos->index);
  meta_add(ml, "gpipe.optimizer_t", "%" PRId64, opt_t);
  meta_add(ml, "gpipe.eval_due", "%" PRId64, pos->eval_due);
  meta_add(ml, "gpipe.batch_size", "%" PRId64, t->m->train.batch_size);
  meta_add(ml, "gpipe.seed", "%" PRId64, (int64_t)t->seed);
  if (isfinite(pos->elapsed_s) && pos->elapsed_s >= 0) {
    snprintf(ml->key[ml->n], sizeof ml->key[0], "gpipe.elapsed_s");
    snprintf(ml->val[ml->n++], sizeof ml->val[0], "%.3f", pos->elapsed_s);
  }
}

static int all_local(gp_trainer *t) {
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    if (!gp_pipeline_local(t->pl, s)) return 0;
  return 1;
}

gp_status gp_trainer_save_weights(gp_trainer *t, const char *path) {
  staging st = {0};
  gp_st_writer *w = gp_st_writer_new();
  if (!w) return GP_ERR(GP_ERR_NOMEM, "out of memory saving weights");
  gp_status s = GP_OK;
  for (int i = 0; s == GP_OK && i < gp_pipeline_stages(t->pl); i++)
    if (gp_pipeline_local(t->pl, i)) s = add_weights(t, i, w, &st);
  if (s == GP_OK) s = gp_st_meta_set(w, "format", "pt");
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  if (s == GP_OK) s = gp_shards_write(w, path, shard_size(t));
  gp_st_writer_free(w);
  staging_free(&st);
  return s;
}

/* ---- sharded checkpoints ---- */

static int ckpt_file(const char *dir, const char *name, char *out, size_t n) {
  int len = snprintf(out, n, "%s/%s", dir, name);
  return len >= 0 && (size_t)len < n;
}

int gp_ckpt_find(const char *dir, char *out, size_t n) {
  struct stat st;
  if (ckpt_file(dir, CKPT_INDEX, out, n) && stat(out, &st) == 0) return 1;
  if (ckpt_file(dir, CKPT_FILE, out, n) && stat(out, &st) == 0) return 1;
  if (n) out[0] = 0;
  return 0;
}

/* The committed index of dir, when there is one that reads; else an empty one. */
static void committed_index(const char *dir, gp_shard_index *ix) {
  char path[PATH_MAX];
  struct stat st;
  memset(ix, 0, sizeof *ix);
  if (ckpt_file(dir, CKPT_INDEX, path, sizeof path) && stat(path, &st) == 0 &&
      gp_shard_index_read(path, ix) != GP_OK)
    gp_error_clear();
}

/* The names of this step's files: "s<step>", or "s<step>b" when the committed checkpoint is of
 * the same step under the plain tag (a run started afresh over it): its files stay untouched
 * until the commit. Every process computes the same from the committed index. */
static void ckpt_tag(const char *dir, int64_t step, char *tag, size_t n) {
  gp_shard_index ix;
  committed_index(dir, &ix);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "checkpoint-s%" PRId64 "-", step);
  int clash = 0;
  for (int i = 0; i < ix.n && !clash; i++)
    clash = strncmp(ix.files[i], prefix, strlen(prefix)) == 0;
  snprintf(tag, n, "s%" PRId64 "%s", step, clash ? "b" : "");
  gp_shard_index_free(&ix);
}

/* A file of a part: checkpoint-s<digits>[b]-p... */
static int part_file(const char *f) {
  if (strncmp(f, "checkpoint-s", 12) != 0) return 0;
  f += 12;
  size_t d = strspn(f, "0123456789");
  if (!d) return 0;
  f += d;
  if (*f == 'b') f++;
  return strncmp(f, "-p", 2) == 0;
}

int gp_ckpt_remove_stale(const char *dir) {
  gp_shard_index ix;
  char path[PATH_MAX];
  struct stat st;
  int have = ckpt_file(dir, CKPT_INDEX, path, sizeof path) && stat(path, &st) == 0;
  if (have && gp_shard_index_read(path, &ix) != GP_OK) {
    gp_error_clear(); /* a damaged index: what it names is unknown, so nothing goes */
    return 0;
  }
  if (!have) memset(&ix, 0, sizeof ix);
  DIR *d = opendir(dir);
  int gone = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (part_file(e->d_name) && !gp_shard_index_has_file(&ix, e->d_name) &&
        ckpt_file(dir, e->d_name, path, sizeof path))
      gone += unlink(path) == 0;
  if (d) closedir(d);
  gp_shard_index_free(&ix);
  return gone;
}

static gp_status make_dir(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return GP_ERR(GP_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir,
                  strerror(errno));
  return GP_OK;
}

/* A part: the stages position pos holds (weights, and optimizer state when optim) as shards
 * dir/PREFIX-pPOS-0000k-of-0000N.safetensors and their list dir/PREFIX-pPOS.index.json, each
 * fsynced; nothing is committed. */
static gp_status write_part(gp_trainer *t, const char *dir, const char *prefix,
                            const gp_layout *lay, int optim, int64_t shard_bytes) {
  const int k = gp_pipeline_stages(t->pl);
  char held[512] = ""; /* the stages, for the part list: "1-2", or interleaved "1,3" */
  for (int s = 0, n = 0; s < k; s++) {
    if (!gp_layout_local(lay, s)) continue;
    if (!gp_pipeline_local(t->pl, s))
      return GP_ERR(GP_ERR_RUNTIME, "internal: position %d writes stage %d, held elsewhere",
                    lay->pos, s);
    size_t len = strlen(held);
    if (lay->chunks > 1)
      snprintf(held + len, sizeof held - len, n++ ? ",%d" : "%d", s);
    else if (n++ == 0)
      snprintf(held, sizeof held, "%d-%d", s, s + gp_layout_held(lay, lay->pos));
  }
  char stem[1100], path[PATH_MAX + 1200], v[64];
  snprintf(stem, sizeof stem, "%s-p%d", prefix, lay->pos);
  staging st = {0};
  gp_shard_index ix = {0};
  gp_st_writer *w = gp_st_writer_new();
  gp_status s = w ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  for (int i = 0; s == GP_OK && i < k; i++) {
    if (!gp_layout_local(lay, i)) continue;
    s = add_weights(t, i, w, &st);
    if (s == GP_OK && optim) s = add_optim(t, i, w, &st);
  }
  if (s == GP_OK) s = gp_shards_write_files(w, dir, stem, shard_bytes, &ix);
  snprintf(v, sizeof v, "%" PRId64, t->step);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.step", v);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.stages", held);
  snprintf(path, sizeof path, "%s/%s.index.json", dir, stem);
  if (s == GP_OK) s = gp_shard_index_write(&ix, path);
  gp_st_writer_free(w);
  staging_free(&st);
  gp_shard_index_free(&ix);
  return s;
}

gp_status gp_ckpt_write_part(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos,
                             const gp_layout *lay, int64_t shard_bytes) {
  (void)pos; /* the metadata is the commit's */
  if (lay->replica != 0) return GP_OK;
  GP_TRY(make_dir(dir));
  char tag[48], prefix[64];
  ckpt_tag(dir, t->step, tag, sizeof tag);
  snprintf(prefix, sizeof prefix, "checkpoint-%s", tag);
  return write_part(t, dir, prefix, lay, 1, shard_bytes > 0 ? shard_bytes : shard_size(t));
}

typedef struct named {
  const char *name;
  int i;
} named;

static int by_name(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Every tensor of stage s (its optimizer state too where o) is in the part of the position that
 * holds it. */
static gp_status check_stage(gp_trainer *t, const gp_shard_index *ix, const named *sorted,
                             const gp_layout *lay, int s, const char *prefix, const gp_optimizer *o,
                             int *found) {
  char name[1024], stem[1100];
  snprintf(stem, sizeof stem, "%s-p%d", prefix, gp_layout_owner(lay, s));
  size_t sl = strlen(stem);
  for (int node = t->plan.st[s].first_node; node < t->plan.st[s].end_node; node++) {
    const gp_layer *l = &t->m->nodes[node].layer;
    for (int j = 0; j < l->n_params; j++)
      for (int k = -1; k < (o && l->pdesc[j].trainable ? o->n_slots : 0); k++) {
        if (k < 0)
          param_name(l, j, name, sizeof name);
        else
          optim_name(o->slot_name[k], l, j, name, sizeof name);
        named key = {name, 0}, *hit = bsearch(&key, sorted, (size_t)ix->n, sizeof key, by_name);
        if (!hit)
          return GP_ERR(GP_ERR_RUNTIME, "%s: no part of step %" PRId64 " holds '%s'", prefix,
                        t->step, name);
        const char *f = ix->files[hit->i];
        if (strncmp(f, stem, sl) != 0 || f[sl] != '-')
          return GP_ERR(GP_ERR_RUNTIME, "%s: '%s' of stage %d is in %s, not in %s-*", prefix, name,
                        s, f, stem);
        (*found)++;
      }
  }
  return GP_OK;
}

/* Every position's part list of this step into ix, checked: each tensor of every stage once, in
 * the part of the position holding it, and nothing else. */
static gp_status gather_parts(gp_trainer *t, const char *dir, const char *prefix,
                              const gp_layout *lay, const gp_optimizer *o, gp_shard_index *ix) {
  char stem[1100], path[PATH_MAX + 1200];
  for (int p = 0; p < lay->procs; p++) {
    snprintf(stem, sizeof stem, "%s-p%d", prefix, p);
    snprintf(path, sizeof path, "%s/%s.index.json", dir, stem);
    gp_shard_index part;
    if (gp_shard_index_read(path, &part) != GP_OK)
      return gp_error_prefix(GP_ERR_IO, "%s of step %" PRId64 ": the part of position %d: ", prefix,
                             t->step, p);
    const char *ps = gp_shard_index_meta(&part, "gpipe.step");
    int64_t got = -1;
    gp_status s = GP_OK;
    if (!ps || gp_cfg_parse_int(ps, &got) != 1 || got != t->step)
      s = GP_ERR(GP_ERR_RUNTIME, "%s: a part of step %s, not of step %" PRId64, path,
                 ps ? ps : "(none)", t->step);
    for (int i = 0; s == GP_OK && i < part.n; i++)
      s = gp_shard_index_add(ix, part.names[i], part.files[i]);
    ix->total_size += part.total_size;
    gp_shard_index_free(&part);
    GP_TRY(s);
  }
  named *sorted = malloc(((size_t)ix->n + 1) * sizeof *sorted);
  if (!sorted) return GP_ERR(GP_ERR_NOMEM, "out of memory committing a checkpoint");
  for (int i = 0; i < ix->n; i++)
    sorted[i] = (named){ix->names[i], i};
  qsort(sorted, (size_t)ix->n, sizeof *sorted, by_name);
  gp_status s = GP_OK;
  for (int i = 1; s == GP_OK && i < ix->n; i++)
    if (strcmp(sorted[i].name, sorted[i - 1].name) == 0)
      s = GP_ERR(GP_ERR_RUNTIME, "%s: '%s' is in two parts (%s and %s)", prefix, sorted[i].name,
                 ix->files[sorted[i - 1].i], ix->files[sorted[i].i]);
  int found = 0;
  for (int st = 0; s == GP_OK && st < gp_pipeline_stages(t->pl); st++)
    s = check_stage(t, ix, sorted, lay, st, prefix, o, &found);
  if (s == GP_OK && found != ix->n)
    s = GP_ERR(GP_ERR_RUNTIME,
               "%s: the parts of step %" PRId64 " hold %d tensors that are no parameter%s of "
               "this run",
               prefix, t->step, ix->n - found, o ? " or optimizer state" : "");
  free(sorted);
  return s;
}

gp_status gp_ckpt_commit(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos,
                         const gp_layout *lay) {
  if (lay->replica != 0 || lay->pos != 0) return GP_OK;
  char tag[48], prefix[64], path[PATH_MAX];
  ckpt_tag(dir, t->step, tag, sizeof tag);
  snprintf(prefix, sizeof prefix, "checkpoint-%s", tag);
  gp_optimizer *o0 = gp_pipeline_optimizer(t->pl, 0); /* position 0 holds stage 0 */
  gp_shard_index ix = {0};
  gp_status s = gather_parts(t, dir, prefix, lay, o0, &ix);
  meta_list ml;
  ckpt_meta(t, pos, o0->t, &ml);
  for (int i = 0; s == GP_OK && i < ml.n; i++)
    s = gp_shard_index_meta_set(&ix, ml.key[i], ml.val[i]);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.model", t->m->name);
  char bal[GP_PLAN_BALANCE_LEN];
  gp_plan_balance_str(&t->plan, bal, sizeof bal);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.balance", bal);
  if (s == GP_OK && t->plan.schedule >= 0) /* a plan's schedule is chosen: never auto */
    s = gp_shard_index_meta_set(&ix, "gpipe.schedule", gp_schedule_names()[t->plan.schedule]);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.remat", gp_remat_names()[t->plan.remat]);
  if (s == GP_OK && !ckpt_file(dir, CKPT_INDEX, path, sizeof path))
    s = GP_ERR(GP_ERR_IO, "%s: path too long", dir);
  if (s == GP_OK) s = gp_shard_index_write(&ix, path); /* the commit */
  gp_shard_index_free(&ix);
  GP_TRY(s);
  /* the checkpoint it replaces, then what killed writes left */
  if (ckpt_file(dir, CKPT_FILE, path, sizeof path)) unlink(path);
  gp_ckpt_remove_stale(dir);
  return GP_OK;
}

/* ---- weights across processes ---- */

/* path's folder into dir, and the prefix of its parts' files: X for X.safetensors, or X-b when
 * the index path holds now uses X's names (they stay untouched until the commit). *old gets that
 * index (empty when there is none). */
static void weights_names(const char *path, char *dir, size_t dn, char *prefix, size_t pn,
                          gp_shard_index *old) {
  const char *base = gp_io_split_dir(path, dir, dn);
  size_t bl = strlen(base), sl = strlen(".safetensors");
  if (bl > sl && strcmp(base + bl - sl, ".safetensors") == 0) bl -= sl;
  if (bl > 900) bl = 900;
  char ixpath[PATH_MAX + 16], mine[1000];
  struct stat st;
  memset(old, 0, sizeof *old);
  if (gp_shards_index_path(path, ixpath, sizeof ixpath) == GP_OK && stat(ixpath, &st) == 0 &&
      gp_shard_index_read(ixpath, old) != GP_OK)
    gp_shard_index_free(old);
  gp_error_clear();
  snprintf(mine, sizeof mine, "%.*s-p", (int)bl, base);
  int clash = 0;
  for (int i = 0; i < old->n && !clash; i++)
    clash = strncmp(old->files[i], mine, strlen(mine)) == 0;
  snprintf(prefix, pn, "%.*s%s", (int)bl, base, clash ? "-b" : "");
}

gp_status gp_weights_write_part(gp_trainer *t, const char *path, const gp_layout *lay,
                                int64_t shard_bytes) {
  if (lay->replica != 0) return GP_OK;
  char dir[PATH_MAX], prefix[1000];
  gp_shard_index old;
  weights_names(path, dir, sizeof dir, prefix, sizeof prefix, &old);
  gp_shard_index_free(&old);
  return write_part(t, dir, prefix, lay, 0, shard_bytes > 0 ? shard_bytes : shard_size(t));
}

gp_status gp_weights_commit(gp_trainer *t, const char *path, const gp_layout *lay) {
  if (lay->replica != 0 || lay->pos != 0) return GP_OK;
  char dir[PATH_MAX], prefix[1000], ixpath[PATH_MAX + 16], part[PATH_MAX + 1200];
  gp_shard_index old, ix = {0};
  weights_names(path, dir, sizeof dir, prefix, sizeof prefix, &old);
  gp_status s = gp_shards_index_path(path, ixpath, sizeof ixpath);
  if (s == GP_OK) s = gather_parts(t, dir, prefix, lay, NULL, &ix);
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "format", "pt");
  if (s == GP_OK) s = gp_shard_index_meta_set(&ix, "gpipe.model", t->m->name);
  if (s == GP_OK) s = gp_shard_index_write(&ix, ixpath); /* the commit */
  if (s == GP_OK) { /* what it replaces: one file, or the shards of an earlier set */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) unlink(path);
    gp_shards_remove(&old, &ix, dir);
  }
  for (int p = 0; p < lay->procs; p++) { /* the part lists, done with */
    snprintf(part, sizeof part, "%s/%s-p%d.index.json", dir, prefix, p);
    unlink(part);
  }
  gp_shard_index_free(&old);
  gp_shard_index_free(&ix);
  return s;
}

static int64_t stage_bytes(gp_trainer *t, int s) {
  gp_params *p = gp_pipeline_params(t->pl, s);
  int64_t slots = gp_pipeline_optimizer(t->pl, s)->n_slots;
  return (p->n_train * (1 + slots) + p->n_buffers) * (int64_t)sizeof(float);
}

/* The whole checkpoint as one file, as before sharding: DIR/checkpoint.safetensors. */
static gp_status save_single(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos) {
  char path[PATH_MAX];
  if (!ckpt_file(dir, CKPT_FILE, path, sizeof path))
    return GP_ERR(GP_ERR_IO, "%s: path too long", dir);
  int k = gp_pipeline_stages(t->pl);
  staging st = {0};
  gp_st_writer *w = gp_st_writer_new();
  gp_status s = w ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory writing a checkpoint");
  for (int i = 0; s == GP_OK && i < k; i++)
    s = add_weights(t, i, w, &st);
  for (int i = 0; s == GP_OK && i < k; i++)
    s = add_optim(t, i, w, &st);
  meta_list ml;
  ckpt_meta(t, pos, gp_pipeline_optimizer(t->pl, 0)->t, &ml);
  for (int i = 0; s == GP_OK && i < ml.n; i++)
    s = gp_st_meta_set(w, ml.key[i], ml.val[i]);
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.model", t->m->name);
  char bal[GP_PLAN_BALANCE_LEN]; /* the split, which --resume keeps (gp_ckpt_balance) */
  gp_plan_balance_str(&t->plan, bal, sizeof bal);
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.balance", bal);
  if (s == GP_OK && t->plan.schedule >= 0) /* a plan's schedule is chosen: never auto */
    s = gp_st_meta_set(w, "gpipe.schedule", gp_schedule_names()[t->plan.schedule]);
  if (s == GP_OK) s = gp_st_meta_set(w, "gpipe.remat", gp_remat_names()[t->plan.remat]);
  /* replaces a committed index too (gp_shards_write removes it and its shards after) */
  if (s == GP_OK) s = gp_shards_write(w, path, INT64_MAX);
  if (s == GP_OK) gp_ckpt_remove_stale(dir);
  gp_st_writer_free(w);
  staging_free(&st);
  return s;
}

gp_status gp_trainer_save_checkpoint(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos) {
  if (!all_local(t))
    return GP_ERR(GP_ERR_UNSUPPORTED,
                  "%s: a checkpoint of stages held by several processes is "
                  "written by gp_ckpt_write_part and gp_ckpt_commit",
                  dir);
  GP_TRY(make_dir(dir));
  int64_t total = 0;
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    total += stage_bytes(t, s);
  if (total <= shard_size(t)) return save_single(t, dir, pos);
  gp_layout one;
  gp_layout_single(gp_pipeline_stages(t->pl), &one);
  GP_TRY(gp_ckpt_write_part(t, dir, pos, &one, shard_size(t)));
  return gp_ckpt_commit(t, dir, pos, &one);
}

/* ---- loading: a file or an index, only the stages this process holds ---- */

/* Nodes [*lo, *hi) of the stages held here (a contiguous run). */
static void local_nodes(gp_trainer *t, int *lo, int *hi) {
  *lo = t->m->n_nodes;
  *hi = 0;
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    if (gp_pipeline_local(t->pl, s)) {
      if (t->plan.st[s].first_node < *lo) *lo = t->plan.st[s].first_node;
      if (t->plan.st[s].end_node > *hi) *hi = t->plan.st[s].end_node;
    }
}

static gp_status load_weights_from(gp_trainer *t, gp_shards *f, const char *path,
                                   const char *ignore) {
  int lo, hi;
  local_nodes(t, &lo, &hi);
  GP_TRY(gp_params_check_names(t->m, f, path, ignore, lo, hi));
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    if (gp_pipeline_local(t->pl, s))
      GP_TRY(gp_params_load_from(gp_pipeline_params(t->pl, s), t->m, f, path));
  return GP_OK;
}

/* A counter of the checkpoint's metadata: an integer >= 0 (the seed: any int64). */
static gp_status meta_int(const gp_shards *f, const char *path, const char *key, int64_t *out) {
  const char *v = gp_shards_meta(f, key);
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
  gp_shards *f;
  GP_TRY(gp_shards_open(path, &f));
  const char *name = gp_shards_path(f);
  /* a checkpoint (gpipe.step): its weights; the optimizer state is --resume's */
  int64_t step = -1;
  int ckpt = gp_shards_meta(f, "gpipe.step") != NULL;
  gp_status s = ckpt ? meta_int(f, name, "gpipe.step", &step) : GP_OK;
  if (s == GP_OK) s = load_weights_from(t, f, name, ckpt ? "optim." : NULL);
  gp_shards_free(f);
  if (s == GP_OK && ckpt_step) *ckpt_step = step;
  return s;
}

static const gp_optimizer *local_optimizer(gp_trainer *t) {
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++)
    if (gp_pipeline_local(t->pl, s)) return gp_pipeline_optimizer(t->pl, s);
  return NULL;
}

/* Every "optim." tensor of the file must be state of this run's optimizer: "optim.<slot>" (over
 * the whole model, as written before sharding) or "optim.<slot>.<parameter>" of a trainable
 * parameter. State of another optimizer would otherwise be dropped without a word. */
static gp_status check_optim_names(gp_trainer *t, const gp_shards *f, const char *path,
                                   const gp_optimizer *o) {
  for (int i = 0; i < gp_shards_count(f); i++) {
    const char *name = gp_shards_name(f, i);
    if (strncmp(name, "optim.", 6) != 0) continue;
    int known = 0;
    for (int j = 0; j < o->n_slots && !known; j++) {
      size_t sl = strlen(o->slot_name[j]);
      const char *rest = name + 6 + sl;
      if (strncmp(name + 6, o->slot_name[j], sl) != 0 || (*rest && *rest != '.')) continue;
      int node, param;
      known = !*rest || (gp_params_lookup(t->m, rest + 1, &node, &param) == 0 &&
                         t->m->nodes[node].layer.pdesc[param].trainable);
    }
    if (!known)
      return GP_ERR(GP_ERR_DATA,
                    "%s: optimizer state '%s' is not used by this run's optimizer "
                    "(was it written with another optimizer?)",
                    path, name);
  }
  return GP_OK;
}

/* Trainable elements before each node over the whole model: the offsets of the flat
 * "optim.<slot>" tensors (which are one stage holding every node). */
static int64_t *flat_offsets(const gp_model *m) {
  int64_t *off = malloc(((size_t)m->n_nodes + 1) * sizeof *off);
  if (!off) return NULL;
  off[0] = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    off[i + 1] = off[i];
    for (int j = 0; j < l->n_params; j++)
      if (l->pdesc[j].trainable) off[i + 1] += gp_shape_numel(&l->pdesc[j].shape);
  }
  return off;
}

/* Slot i of stage s from the file into host (n_train floats), then onto the stage's device. */
static gp_status load_slot(gp_trainer *t, gp_shards *f, const char *path, int s, int i,
                           const int64_t *flat, float *host) {
  gp_params *p = gp_pipeline_params(t->pl, s);
  gp_optimizer *o = gp_pipeline_optimizer(t->pl, s);
  gp_backend *be = gp_pipeline_backend(t->pl, s);
  char name[1024], a[128], b[128];
  const gp_st_entry *fe = NULL;
  const void *fd = NULL;
  int64_t off = 0;
  for (int node = p->first_node; node < p->end_node; node++) {
    const gp_layer *l = &t->m->nodes[node].layer;
    int64_t noff = flat[node]; /* this node's first trainable element in the flat tensor */
    for (int j = 0; j < l->n_params; j++) {
      if (!l->pdesc[j].trainable) continue;
      int64_t n = gp_shape_numel(&l->pdesc[j].shape);
      optim_name(o->slot_name[i], l, j, name, sizeof name);
      const gp_st_entry *e;
      const void *d;
      GP_TRY(gp_shards_get(f, name, &e, &d));
      if (e && (e->dtype != GP_F32 || !gp_shape_equal(&e->shape, &l->pdesc[j].shape)))
        return GP_ERR(GP_ERR_DATA, "%s: optimizer state '%s' is %s %s, the model needs F32 %s",
                      path, name, gp_dtype_name(e->dtype), gp_shape_str(&e->shape, a, 128),
                      gp_shape_str(&l->pdesc[j].shape, b, 128));
      if (!e) { /* the flat tensor of a checkpoint written before sharding */
        char flat_name[64];
        snprintf(flat_name, sizeof flat_name, "optim.%s", o->slot_name[i]);
        if (!fe) GP_TRY(gp_shards_get(f, flat_name, &fe, &fd));
        int64_t total = flat[t->m->n_nodes];
        if (!fe || fe->dtype != GP_F32 || fe->shape.ndim != 1 || fe->shape.d[0] != total)
          return GP_ERR(GP_ERR_DATA,
                        "%s: optimizer state '%s' is missing or of the wrong size "
                        "(was it written with another optimizer?)",
                        path, fe ? flat_name : name);
        d = (const char *)fd + noff * (int64_t)sizeof(float);
      }
      GP_TRY(gp_params_check_finite(path, e ? name : "optim (flat)", d, n));
      memcpy(host + off, d, (size_t)n * sizeof(float));
      off += n;
      noff += n;
    }
  }
  return p->n_train ? be->from_host(be, o->slot[i], host, (size_t)p->n_train * sizeof(float))
                    : GP_OK;
}

static gp_status load_optim(gp_trainer *t, gp_shards *f, const char *path) {
  int64_t *flat = flat_offsets(t->m);
  if (!flat) return GP_ERR(GP_ERR_NOMEM, "out of host memory loading a checkpoint");
  gp_status s = GP_OK;
  for (int st = 0; s == GP_OK && st < gp_pipeline_stages(t->pl); st++) {
    if (!gp_pipeline_local(t->pl, st)) continue;
    int64_t n = gp_pipeline_params(t->pl, st)->n_train;
    float *host = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!host) s = GP_ERR(GP_ERR_NOMEM, "out of host memory loading a checkpoint");
    for (int i = 0; s == GP_OK && i < gp_pipeline_optimizer(t->pl, st)->n_slots; i++)
      s = load_slot(t, f, path, st, i, flat, host);
    free(host);
  }
  free(flat);
  return s;
}

/* The checkpoint's metadata: its step and optimizer updates, its position into pos; a
 * checkpoint of another model, seed or batch size is refused. */
static gp_status check_meta(gp_trainer *t, const gp_shards *f, const char *path, int64_t *step,
                            int64_t *opt_t, gp_ckpt_pos *pos) {
  int64_t seed = 0;
  GP_TRY(meta_int(f, path, "gpipe.step", step));
  GP_TRY(meta_int(f, path, "gpipe.epoch", &pos->epoch));
  GP_TRY(meta_int(f, path, "gpipe.index", &pos->index));
  GP_TRY(meta_int(f, path, "gpipe.optimizer_t", opt_t));
  GP_TRY(meta_int(f, path, "gpipe.seed", &seed));
  /* absent from checkpoints written before they were stored */
  int64_t batch = t->m->train.batch_size;
  pos->eval_due = 0;
  if (gp_shards_meta(f, "gpipe.eval_due"))
    GP_TRY(meta_int(f, path, "gpipe.eval_due", &pos->eval_due));
  if (pos->eval_due > 1)
    return GP_ERR(GP_ERR_DATA, "%s: bad gpipe.eval_due '%" PRId64 "' (expected 0 or 1)", path,
                  pos->eval_due);
  pos->elapsed_s = 0;
  const char *el = gp_shards_meta(f, "gpipe.elapsed_s");
  if (el) {
    char *end;
    pos->elapsed_s = strtod(el, &end);
    if (end == el || *end || !isfinite(pos->elapsed_s) || pos->elapsed_s < 0)
      return GP_ERR(GP_ERR_DATA, "%s: bad gpipe.elapsed_s '%s' (expected seconds >= 0)", path, el);
  }
  if (gp_shards_meta(f, "gpipe.batch_size")) GP_TRY(meta_int(f, path, "gpipe.batch_size", &batch));
  if (batch != t->m->train.batch_size)
    return GP_ERR(GP_ERR_DATA,
                  "%s: written with batch size %" PRId64 ", this run has %" PRId64
                  " (a resumed run keeps its batch size: steps, epochs and the data position "
                  "count batches)",
                  path, batch, t->m->train.batch_size);
  /* an epoch and an optimizer update take a step each at least: larger ones are damage (and
   * near INT64_MAX they overflowed in the counters) */
  if (pos->epoch > *step || *opt_t > *step)
    return GP_ERR(GP_ERR_DATA,
                  "%s: gpipe.%s %" PRId64 " is more than gpipe.step %" PRId64
                  " (a damaged checkpoint)",
                  path, pos->epoch > *step ? "epoch" : "optimizer_t",
                  pos->epoch > *step ? pos->epoch : *opt_t, *step);
  if ((uint64_t)seed != t->seed)
    return GP_ERR(GP_ERR_DATA, "%s: written with seed %" PRIu64 ", this run has seed %" PRIu64,
                  path, (uint64_t)seed, t->seed);
  const char *model = gp_shards_meta(f, "gpipe.model");
  if (!model || strcmp(model, t->m->name) != 0)
    return GP_ERR(GP_ERR_DATA, "%s: written for model '%s', this is '%s'", path,
                  model ? model : "(none)", t->m->name);
  return GP_OK;
}

gp_status gp_trainer_load_checkpoint(gp_trainer *t, const char *dir, gp_ckpt_pos *pos) {
  char path[PATH_MAX];
  if (!ckpt_file(dir, CKPT_FILE, path, sizeof path))
    return GP_ERR(GP_ERR_IO, "%s: path too long", dir);
  gp_shards *f;
  GP_TRY(gp_shards_open(path, &f)); /* the index where there is one */
  const char *name = gp_shards_path(f);
  int64_t step = 0, opt_t = 0;
  const gp_optimizer *o = local_optimizer(t);
  gp_status s = check_meta(t, f, name, &step, &opt_t, pos);
  if (s == GP_OK && o) s = check_optim_names(t, f, name, o);
  if (s == GP_OK) s = load_weights_from(t, f, name, "optim.");
  if (s == GP_OK) s = load_optim(t, f, name);
  gp_shards_free(f);
  if (s != GP_OK) return s;
  t->step = step;
  for (int st = 0; st < gp_pipeline_stages(t->pl); st++)
    if (gp_pipeline_local(t->pl, st)) gp_pipeline_optimizer(t->pl, st)->t = opt_t;
  return GP_OK;
}

/* The index of v in names (NULL-terminated), or -1. */
static int name_index(const char *const *names, const char *v) {
  for (int i = 0; v && names[i]; i++)
    if (strcmp(names[i], v) == 0) return i;
  return -1;
}

gp_status gp_ckpt_balance(const char *dir, int *balance, int max, int *n, int *schedule,
                          int *remat) {
  *n = 0;
  *schedule = *remat = -1;
  char path[PATH_MAX];
  if (!ckpt_file(dir, CKPT_FILE, path, sizeof path))
    return GP_ERR(GP_ERR_IO, "%s: path too long", dir);
  gp_shards *f;
  GP_TRY(gp_shards_open(path, &f));
  const char *v = gp_shards_meta(f, "gpipe.balance");
  gp_status s = GP_OK;
  for (const char *p = v; p && s == GP_OK;) { /* "3,4": digits and commas, each entry >= 1 */
    char *end;
    long u = strtol(p, &end, 10);
    if (end == p || *p == '-' || *p == '+' || u < 1 || u > INT32_MAX || *n >= max ||
        (*end && *end != ','))
      s = GP_ERR(GP_ERR_DATA, "%s: bad gpipe.balance '%.200s' (expected units per stage: 3,4)",
                 gp_shards_path(f), v);
    else
      balance[(*n)++] = (int)u;
    p = *end == ',' ? end + 1 : NULL;
  }
  const char *sv = gp_shards_meta(f, "gpipe.schedule"), *rv = gp_shards_meta(f, "gpipe.remat");
  if (s == GP_OK && sv && (*schedule = name_index(gp_schedule_names(), sv)) < 0)
    s = GP_ERR(GP_ERR_DATA, "%s: bad gpipe.schedule '%.100s'", gp_shards_path(f), sv);
  if (s == GP_OK && rv && (*remat = name_index(gp_remat_names(), rv)) < 0)
    s = GP_ERR(GP_ERR_DATA, "%s: bad gpipe.remat '%.100s'", gp_shards_path(f), rv);
  if (s != GP_OK) *n = 0;
  gp_shards_free(f);
  return s;
}
