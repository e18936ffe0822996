/* Sharded checkpoints (core/train/checkpoint.h, core/io/shards.h). (a) Parts written per
 * position of a 3-process layout (replica 1 writes nothing) and committed by position 0 load
 * bit for bit into trainers of other K (weights and optimizer state), and resuming at the same K
 * and M gives the uninterrupted run's weights bit for bit; weights written as parts load at
 * another K, and written again take other names. (b) A torn write (parts of a later step, no
 * commit) and a commit that fails leave the committed checkpoint loading; the same step written
 * again takes other names; a checkpoint that fits is one file again, the shards gone after it,
 * and back. (c) Flat "optim.<slot>" checkpoints of before sharding load. (d) gp_shards_write:
 * one file, shards, shards again over shards, one file again. (e) Bad indexes: one line each,
 * and every cut and three bytes at every place of a good one read or refused in one line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/shards.h"
#include "core/rng.h"
#include "core/train/checkpoint.h"
#include "tests/support/check.h"
#include "tests/support/train.h"

static int passes, failures;

static const char *mlp = "name: mlp\n"
                         "inputs: {x: [12], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: linear, out_features: 16}\n"
                         "  - {type: relu}\n"
                         "  - {type: linear, out_features: 16}\n"
                         "  - {type: gelu}\n"
                         "  - {type: linear, out_features: 8}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {optimizer: {type: adamw, lr: 0.01}}\n";

#define BATCH 8
#define SHARD 700 /* bytes: several shards per part */

static void make(gp_model *m, int k, int micro, gp_trainer *t) {
  m->pipeline.stages = k;
  m->pipeline.micro_batches = micro;
  /* K = 4: every stage holds parameters (an empty part writes no shard) */
  static const int four[] = {2, 2, 1, 1};
  m->pipeline.n_balance = k == 4 ? 4 : 0;
  for (int i = 0; k == 4 && i < 4; i++)
    m->pipeline.balance[i] = four[i];
  gp_plan plan;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(m, &m->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(t, m, &plan, &po, 42) != GP_OK) gp_t_die("trainer");
}

static void step(gp_trainer *t, int64_t s) {
  float x[BATCH * 12];
  int32_t y[BATCH];
  gp_rng r;
  gp_rng_seed(&r, 1000 + (uint64_t)s);
  for (int i = 0; i < BATCH * 12; i++)
    x[i] = gp_rng_normal(&r);
  for (int i = 0; i < BATCH; i++)
    y[i] = (int32_t)gp_rng_below(&r, 5);
  if (gp_t_step_xy(t, x, y, BATCH, 0.01, NULL) != GP_OK) gp_t_die("step");
}

/* Every stage's weights then every slot of every stage, in node order: the same for any K. */
static float *state(gp_trainer *t, int64_t *n) {
  int k = gp_pipeline_stages(t->pl);
  int64_t total = 0;
  for (int s = 0; s < k; s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    total += p->n_train * (1 + gp_pipeline_optimizer(t->pl, s)->n_slots) + p->n_buffers;
  }
  float *v = malloc((size_t)total * sizeof *v), *o = v;
  for (int s = 0; s < k; s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    if (p->n_train) memcpy(o, p->train, (size_t)p->n_train * sizeof *o); /* CPU: host memory */
    o += p->n_train;
    if (p->n_buffers) memcpy(o, p->buffers, (size_t)p->n_buffers * sizeof *o);
    o += p->n_buffers;
  }
  for (int i = 0; i < gp_pipeline_optimizer(t->pl, 0)->n_slots; i++)
    for (int s = 0; s < k; s++) {
      gp_params *p = gp_pipeline_params(t->pl, s);
      if (p->n_train)
        memcpy(o, gp_pipeline_optimizer(t->pl, s)->slot[i], (size_t)p->n_train * sizeof *o);
      o += p->n_train;
    }
  *n = total;
  return v;
}

static int same_state(gp_trainer *a, gp_trainer *b) {
  int64_t na, nb;
  float *x = state(a, &na), *y = state(b, &nb);
  int same = na == nb && memcmp(x, y, (size_t)na * sizeof *x) == 0 &&
             gp_pipeline_optimizer(a->pl, 0)->t == gp_pipeline_optimizer(b->pl, 0)->t &&
             a->step == b->step;
  free(x);
  free(y);
  return same;
}

/* The weights (trainable and buffers) of a and b, bit for bit. */
static int same_weights(gp_trainer *a, gp_trainer *b) {
  int64_t na, nb, nw = 0;
  for (int s = 0; s < gp_pipeline_stages(a->pl); s++)
    nw += gp_pipeline_params(a->pl, s)->n_train + gp_pipeline_params(a->pl, s)->n_buffers;
  float *x = state(a, &na), *y = state(b, &nb);
  int same = na == nb && memcmp(x, y, (size_t)nw * sizeof *x) == 0;
  free(x);
  free(y);
  return same;
}

/* Files in dir whose names start with prefix. */
static int count(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

static int exists(const char *dir, const char *name) {
  char p[4200];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return stat(p, &st) == 0;
}

/* The parts of t's step at W = 3 (stages 0-1, 2, 3 of K = 4), then the commit. */
static gp_status write_sharded(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos, int commit) {
  gp_layout lay;
  for (int r = 0; r < 3; r++) {
    if (gp_layout_make(3, r, 1, 4, NULL, &lay) != GP_OK) gp_t_die("layout");
    GP_TRY(gp_ckpt_write_part(t, dir, pos, &lay, SHARD));
  }
  if (gp_layout_make(3, 1, 1, 4, NULL, &lay) != GP_OK) gp_t_die("layout");
  GP_TRY(gp_ckpt_commit(t, dir, pos, &lay)); /* position 1: nothing */
  if (gp_layout_make(3, 0, 1, 4, NULL, &lay) != GP_OK) gp_t_die("layout");
  return commit ? gp_ckpt_commit(t, dir, pos, &lay) : GP_OK;
}

static void test_parts(const char *dir) {
  gp_model *m;
  if (gp_model_load_string(mlp, "mlp.yaml", NULL, 0, &m) != GP_OK) gp_t_die("load");
  gp_trainer a, b, c, d;
  make(m, 4, 2, &a);
  for (int s = 0; s < 3; s++)
    step(&a, s);
  char ck[4200];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  gp_ckpt_pos pos = {.epoch = 0, .index = 3, .elapsed_s = 1.5};
  /* replica 1 of R = 2 writes nothing */
  gp_layout r1;
  if (gp_layout_make(6, 4, 2, 4, NULL, &r1) != GP_OK) gp_t_die("layout");
  CHECK(gp_ckpt_write_part(&a, ck, &pos, &r1, SHARD) == GP_OK && access(ck, F_OK) != 0,
        "replica 1 writes nothing");
  CHECK(write_sharded(&a, ck, &pos, 1) == GP_OK, "parts and commit");
  CHECK(exists(ck, "checkpoint.safetensors.index.json") && !exists(ck, "checkpoint.safetensors"),
        "an index, no single file");
  CHECK(count(ck, "checkpoint-s3-p0-") >= 2 && count(ck, "checkpoint-s3-p1-") >= 1 &&
            count(ck, "checkpoint-s3-p2-") >= 1,
        "shards of every part: %d %d %d", count(ck, "checkpoint-s3-p0-"),
        count(ck, "checkpoint-s3-p1-"), count(ck, "checkpoint-s3-p2-"));
  CHECK(!exists(ck, "checkpoint-s3-p0.index.json"), "the part lists go after the commit");
  /* another K, another M: bit for bit */
  make(m, 2, 1, &b);
  gp_ckpt_pos got = {0};
  CHECK(gp_trainer_load_checkpoint(&b, ck, &got) == GP_OK, "load at K = 2");
  CHECK(same_state(&a, &b), "K = 2 holds K = 4's weights and optimizer state");
  CHECK(got.index == 3 && got.elapsed_s == 1.5, "position %lld, %.3f s", (long long)got.index,
        got.elapsed_s);
  /* resumed at K = 4, M = 2: the uninterrupted run's weights */
  make(m, 4, 2, &c);
  CHECK(gp_trainer_load_checkpoint(&c, ck, &got) == GP_OK, "load at K = 4");
  for (int s = 3; s < 5; s++) {
    step(&a, s);
    step(&c, s);
  }
  CHECK(same_state(&a, &c), "resumed = uninterrupted, bit for bit");

  /* weights across processes: parts and a commit, loaded at K = 2; again over them */
  char wp[4300];
  snprintf(wp, sizeof wp, "%s/w.safetensors", ck);
  gp_trainer wt;
  make(m, 2, 1, &wt);
  for (int again = 0; again < 2; again++) {
    gp_layout lay;
    for (int r = 2; r >= 0; r--) {
      if (gp_layout_make(3, r, 1, 4, NULL, &lay) != GP_OK) gp_t_die("layout");
      CHECK(gp_weights_write_part(&c, wp, &lay, SHARD) == GP_OK, "weights part %d", r);
    }
    CHECK(gp_weights_commit(&c, wp, &lay) == GP_OK, "weights commit");
    CHECK(gp_trainer_load_weights(&wt, wp, NULL) == GP_OK && same_weights(&wt, &c),
          "the weights load at K = 2 (%d)", again);
    CHECK(count(ck, again ? "w-b-p" : "w-p") > 3 && count(ck, again ? "w-p" : "w-b-p") == 0 &&
              !exists(ck, "w-p0.index.json") && !exists(ck, "w-b-p0.index.json"),
          "shards of this write only (%d)", again);
  }
  CHECK(gp_trainer_save_weights(&c, wp) == GP_OK && count(ck, "w") == 1, "one file again");
  remove(wp);
  gp_trainer_free(&wt);

  /* (b) a torn write: step 5's parts, no index: step 3 loads */
  CHECK(write_sharded(&a, ck, &pos, 0) == GP_OK, "step 5's parts");
  CHECK(count(ck, "checkpoint-s5-") > 0, "step 5's shards are there");
  make(m, 4, 1, &d);
  CHECK(gp_trainer_load_checkpoint(&d, ck, &got) == GP_OK && d.step == 3 && same_state(&b, &d),
        "the torn write leaves step 3");
  CHECK(gp_ckpt_remove_stale(ck) > 0 && count(ck, "checkpoint-s5-") == 0 &&
            count(ck, "checkpoint-s3-") > 0,
        "stale parts removed, the committed kept");
  /* a commit that fails (its index cannot be written: a folder holds the temporary's name)
   * leaves the previous checkpoint whole */
  char blocker[4300];
  snprintf(blocker, sizeof blocker, "%s/checkpoint.safetensors.index.json.tmp.%ld", ck,
           (long)getpid());
  CHECK(mkdir(blocker, 0777) == 0 && write_sharded(&a, ck, &pos, 1) != GP_OK, "the commit fails");
  rmdir(blocker);
  CHECK(gp_trainer_load_checkpoint(&d, ck, &got) == GP_OK && d.step == 3 && same_state(&b, &d),
        "a failed commit leaves step 3");
  /* the same step again (a run started afresh): other names, then the old ones go */
  CHECK(write_sharded(&d, ck, &pos, 1) == GP_OK && count(ck, "checkpoint-s3b-") > 0 &&
            count(ck, "checkpoint-s3-") == 0,
        "step 3 again: s3b, s3 removed");
  CHECK(gp_trainer_load_checkpoint(&d, ck, &got) == GP_OK && same_state(&b, &d), "s3b loads");
  /* shard_bytes 0: the trainer's size (4 GiB: one shard a part) */
  gp_layout l0;
  if (gp_layout_make(3, 0, 1, 4, NULL, &l0) != GP_OK) gp_t_die("layout");
  CHECK(gp_ckpt_write_part(&d, ck, &pos, &l0, 0) == GP_OK &&
            exists(ck, "checkpoint-s3-p0-00001-of-00001.safetensors"),
        "shard_bytes 0: one shard");
  gp_ckpt_remove_stale(ck);
  /* the one-process entry point: shards when it does not fit, one file when it does */
  gp_trainer e0;
  make(m, 1, 1, &e0);
  d.shard_bytes = SHARD;
  CHECK(gp_trainer_save_checkpoint(&d, ck, &pos) == GP_OK && count(ck, "checkpoint-s3-p0-") > 1 &&
            count(ck, "checkpoint-s3b-") == 0,
        "sharded by gp_trainer_save_checkpoint");
  d.shard_bytes = 0;
  CHECK(gp_trainer_save_checkpoint(&d, ck, &pos) == GP_OK && exists(ck, "checkpoint.safetensors") &&
            !exists(ck, "checkpoint.safetensors.index.json") && count(ck, "checkpoint-") == 0,
        "one file again, the shards gone");
  d.shard_bytes = SHARD;
  CHECK(gp_trainer_save_checkpoint(&d, ck, &pos) == GP_OK &&
            !exists(ck, "checkpoint.safetensors") &&
            exists(ck, "checkpoint.safetensors.index.json"),
        "sharded again: the one file goes after the commit");
  CHECK(gp_trainer_load_checkpoint(&e0, ck, &got) == GP_OK && same_state(&b, &e0),
        "and the shards load");
  d.shard_bytes = 0;

  gp_trainer_free(&e0);

  /* (c) the flat optimizer state of before: one "optim.<slot>" over the model */
  int64_t n;
  float *v = state(&b, &n), *o = v;
  gp_st_writer *w = gp_st_writer_new();
  gp_optimizer *o0 = gp_pipeline_optimizer(b.pl, 0);
  int64_t n_train = 0;
  for (int s = 0; s < 2; s++)
    n_train += gp_pipeline_params(b.pl, s)->n_train;
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params; j++) {
      char name[600];
      snprintf(name, sizeof name, "%s.%s", l->path, l->pdesc[j].name);
      gp_st_add(w, name, GP_F32, &l->pdesc[j].shape, o); /* no buffers in this model */
      o += gp_shape_numel(&l->pdesc[j].shape);
    }
  }
  gp_shape sh = gp_shape_of(1, &n_train);
  gp_st_add(w, "optim.exp_avg", GP_F32, &sh, o);
  gp_st_add(w, "optim.exp_avg_sq", GP_F32, &sh, o + n_train);
  const char *meta[][2] = {{"gpipe.step", "3"},  {"gpipe.epoch", "0"},
                           {"gpipe.index", "3"}, {"gpipe.optimizer_t", "3"},
                           {"gpipe.seed", "42"}, {"gpipe.model", "mlp"}};
  for (int i = 0; i < 6; i++)
    gp_st_meta_set(w, meta[i][0], meta[i][1]); /* no batch size: written before it was stored */
  char flat[4200], old[4300];
  snprintf(flat, sizeof flat, "%s/flat", dir);
  snprintf(old, sizeof old, "%s/checkpoint.safetensors", flat);
  mkdir(flat, 0777);
  CHECK(o0->n_slots == 2 && gp_st_write(w, old) == GP_OK, "an old-format checkpoint written");
  gp_st_writer_free(w);
  free(v);
  gp_trainer e;
  make(m, 4, 1, &e);
  CHECK(gp_trainer_load_checkpoint(&e, flat, &got) == GP_OK && same_state(&b, &e),
        "the flat optimizer state loads at K = 4");
  remove(old);
  rmdir(flat);
  gp_trainer_free(&a);
  gp_trainer_free(&b);
  gp_trainer_free(&c);
  gp_trainer_free(&d);
  gp_trainer_free(&e);
  gp_model_free(m);
}

/* Deterministic damage to a valid index (every cut, three bytes at every place): each is read
 * or refused with a message of one line, never a crash (ASan's build runs this too). */
static void fuzz_index(const char *wd) {
  char p[4300], q[4300], text[4096];
  snprintf(p, sizeof p, "%s/x.safetensors.index.json", wd);
  snprintf(q, sizeof q, "%s/y.safetensors.index.json", wd);
  FILE *f = fopen(p, "rb");
  size_t n = f ? fread(text, 1, sizeof text, f) : 0;
  if (f) fclose(f);
  CHECK(n > 100 && n < sizeof text, "an index of %zu bytes to damage", n);
  int quiet = 0, read = 0;
  static const char subs[] = {'"', '}', '0'};
  for (size_t i = 0; i < n; i++)
    for (int k = -1; k < 3; k++) {
      char buf[4096];
      memcpy(buf, text, n);
      size_t len = k < 0 ? i : n; /* k < 0: cut at i */
      if (k >= 0) buf[i] = subs[k];
      FILE *o = fopen(q, "wb");
      fwrite(buf, 1, len, o);
      fclose(o);
      gp_shards *s = NULL;
      gp_error_clear();
      gp_status st = gp_shards_open(q, &s);
      read += st == GP_OK;
      quiet += st != GP_OK && (!gp_error_message()[0] || strchr(gp_error_message(), '\n'));
      gp_shards_free(s);
    }
  CHECK(quiet == 0 && read > 0, "%d refusals without one line of message (%d read)", quiet, read);
  remove(q);
}

/* (d) the generic writer */
static void test_write(const char *dir) {
  float data[64];
  for (int i = 0; i < 64; i++)
    data[i] = (float)i;
  int64_t d16 = 16;
  gp_shape sh = gp_shape_of(1, &d16);
  gp_st_writer *w = gp_st_writer_new();
  const char *names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    gp_st_add(w, names[i], GP_F32, &sh, data + 16 * i);
  gp_st_meta_set(w, "gpipe.model", "m");
  char p[4300], wd[4200];
  snprintf(wd, sizeof wd, "%s/w", dir);
  mkdir(wd, 0777);
  snprintf(p, sizeof p, "%s/x.safetensors", wd);
  CHECK(gp_shards_write(w, p, 1000) == GP_OK && exists(wd, "x.safetensors"), "one file");
  CHECK(gp_shards_write(w, p, 130) == GP_OK && !exists(wd, "x.safetensors") &&
            exists(wd, "x-00001-of-00002.safetensors") && exists(wd, "x.safetensors.index.json"),
        "two shards");
  CHECK(gp_shards_write(w, p, 130) == GP_OK && exists(wd, "x-b-00002-of-00002.safetensors") &&
            !exists(wd, "x-00001-of-00002.safetensors"),
        "again: other names, the old ones gone");
  gp_shards *s;
  const gp_st_entry *e;
  const void *v;
  CHECK(gp_shards_open(p, &s) == GP_OK && gp_shards_sharded(s) && gp_shards_count(s) == 4 &&
            gp_shards_get(s, "d", &e, &v) == GP_OK && e && !memcmp(v, data + 48, 64) &&
            !strcmp(gp_shards_meta(s, "gpipe.model"), "m"),
        "read back by name across shards");
  gp_shards_free(s);
  fuzz_index(wd);
  CHECK(gp_shards_write(w, p, 1000) == GP_OK && exists(wd, "x.safetensors") && count(wd, "x") == 1,
        "one file again, nothing else left");
  gp_st_writer_free(w);
}

/* (e) a bad index: one line naming the index and what is wrong */
static void bad_index(const char *dir, const char *text, const char *want) {
  char p[4200];
  snprintf(p, sizeof p, "%s/w/y.safetensors.index.json", dir);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
  gp_shards *s = NULL;
  gp_error_clear();
  gp_status st = gp_shards_open(p, &s);
  const char *msg = gp_error_message();
  CHECK(st == GP_ERR_DATA && strstr(msg, want) && strstr(msg, "y.safetensors.index.json") &&
            !strchr(msg, '\n'),
        "%s: got '%s'", want, msg);
  gp_shards_free(s);
}

static void test_bad(const char *dir) {
  /* x.safetensors (from test_write) holds a, b, c, d */
  bad_index(dir, "{\"weight_map\": {\"a\": \"x.safetensors\",", "JSON at byte");
  bad_index(dir, "{\"weight_map\": {\"a\": \"gone.safetensors\"}}",
            "names the shard 'gone.safetensors' (for 'a'), which is missing");
  bad_index(dir, "{\"weight_map\": {\"zz\": \"x.safetensors\"}}",
            "puts 'zz' in 'x.safetensors', which has no such tensor");
  bad_index(dir, "{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"x.safetensors\"}}",
            "duplicate key");
  bad_index(dir, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}", "not a file in the index");
  bad_index(dir, "{\"metadata\": {}}", "no weight_map");
  /* a tensor in two shards */
  char p[4200];
  snprintf(p, sizeof p, "%s/w/x.safetensors", dir);
  char q[4200];
  snprintf(q, sizeof q, "%s/w/x2.safetensors", dir);
  if (link(p, q) != 0) gp_t_die("link");
  bad_index(dir, "{\"weight_map\": {\"a\": \"x.safetensors\", \"b\": \"x2.safetensors\"}}",
            "is in two shards");
  remove(q);
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[4200];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      rm_tree(p);
    else
      remove(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

int main(void) {
  char dir[] = "/tmp/gp_ckpt_XXXXXX";
  if (!mkdtemp(dir)) gp_t_die("mkdtemp");
  test_parts(dir);
  test_write(dir);
  test_bad(dir);
  rm_tree(dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
