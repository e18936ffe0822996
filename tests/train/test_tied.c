/* Tied parameters (the model file's tied: section). (a) Bad groups are refused with one located
 * line each; a disabled group ties nothing. (b) n_params counts a group once. (c) One SGD step
 * of a tied model equals w0 - lr * (g1 + g2 + g3) computed from the same model untied (its
 * copies loaded equal), the untied copies' gradients summed here in double; with clipping, the
 * norm counts the group once. (d) models/transformer-nmt.yaml at a tiny size with its
 * embeddings tied gives the same losses and weights for K = 1..4 and M = 1..4 as K = 1, M = 1,
 * and after every run the copies (weights and optimizer state) are bit-identical on their
 * stages. (e) Weights files: every member under its own name; members that differ in a file
 * are refused; a member missing from a file is read from another. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io/safetensors.h"
#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/train/token_fixture.h"
#include "tests/support/check.h"

/* Tolerances, with why. */
/* K x M: summation order over micro-batches and stages only (as test_token_models). */
#define TOL_KM 2e-5
/* The tied update against w0 - lr * (g1 + g2 + g3) in double, per element relative to
 * |w0| + lr (|g1| + |g2| + |g3|): a few float roundings, both runs at M = 2 (observed 6e-8).
 * Against an untied run at M = 1 the gradients also differ where one cancels over the batch,
 * by 1e-6 to 3.1e-6 depending on the last bits of any kernel (exp changed by an ulp in some
 * places moved it over that range), so that would test the rounding's luck. */
#define TOL_SUM 5e-7

/* Layer l's bindings (parameters, gradients) in the stage of trainer t that runs it. */
static gp_layer_bind *bind_in(gp_trainer *t, const gp_layer *l) {
  const gp_model *m = t->m;
  int i = 0;
  while (&m->nodes[i].layer != l)
    i++;
  for (int s = 0; s < gp_pipeline_stages(t->pl); s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    if (i >= p->first_node && i < p->end_node) return gp_params_bind(p, i);
  }
  return NULL;
}

static int passes, failures;

/* ---- (a) errors ---- */

/* The tied: groups go on lines 9 and 10. */
#define ERR_MODEL                                                                                  \
  "inputs: {ids: {shape: [4], dtype: i32}, label: {shape: [4], dtype: i32}}\n"                     \
  "layers:\n"                                                                                      \
  "  - {type: embedding, num_embeddings: 7, dim: 5, name: emb}\n"                                  \
  "  - {type: positional, max_len: 4, name: pos}\n"                                                \
  "  - {type: linear, out_features: 5, name: hid}\n"                                               \
  "  - {type: linear, out_features: 7, name: out}\n"                                               \
  "loss: {type: softmax_cross_entropy}\n"                                                          \
  "tied:\n"

typedef struct bad {
  const char *what, *groups, *msg;
} bad;

static const bad bad_cases[] = {
    {"unknown name, a suggestion", "  g: {params: [emb.weigth, out.weight]}\n",
     "t.yaml:9:16: tied group 'g': no parameter named 'emb.weigth'; did you mean 'emb.weight'?"},
    {"unknown name", "  g: {params: [out.weight, zzz.q]}\n",
     "t.yaml:9:28: tied group 'g': no parameter named 'zzz.q' (names are '<layer "
     "path>.<parameter>' "
     "as in weight files, e.g. 'logits.weight')"},
    {"shapes differ", "  g: {params: [emb.weight, out.weight, hid.weight]}\n",
     "t.yaml:9:40: tied group 'g': 'hid.weight' has shape [5, 5] but 'emb.weight' has [7, 5]; "
     "tied parameters need the same shape"},
    {"listed twice", "  g: {params: [emb.weight, out.weight, emb.weight]}\n",
     "t.yaml:9:40: tied group 'g': 'emb.weight' is listed twice"},
    {"in two enabled groups",
     "  a: {params: [emb.weight, out.weight]}\n  b: {params: [hid.weight, out.weight]}\n",
     "t.yaml:10:28: tied group 'b': 'out.weight' is already in tied group 'a' (line 9); a "
     "parameter can be in one enabled group only"},
    {"fewer than 2", "  g: {params: [emb.weight]}\n",
     "t.yaml:9:15: tied group 'g': needs at least 2 parameters to tie, got 1"},
    {"a buffer", "  g: {params: [pos.pe, hid.weight]}\n",
     "t.yaml:9:16: tied group 'g': 'pos.pe' is a buffer (saved, never trained); only trainable "
     "parameters can be tied"},
    {"not a mapping", "  g: [emb.weight, out.weight]\n",
     "t.yaml:9:6: tied group 'g' must be a mapping, got a list"},
    {"unknown key", "  g: {param: [emb.weight, out.weight]}\n",
     "t.yaml:9:7: unknown key 'param' in tied group 'g'; did you mean 'params'?"},
    {"params missing", "  g: {enabled: true}\n",
     "t.yaml:9:6: tied group 'g': missing required key 'params'"},
    {"enabled not a boolean", "  g: {params: [emb.weight, out.weight], enabled: maybe}\n",
     "t.yaml:9:50: enabled: expected true or false, got 'maybe'"},
    {"bad group name", "  g.h: {params: [emb.weight, out.weight]}\n",
     "t.yaml:9:3: tied: 'g.h' is not a valid name"},
    {"section not a mapping", "  - emb.weight\n", "t.yaml:9:3: tied must be a mapping, got a list"},
};

static void spec_errors(void) {
  char text[2048];
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad *b = &bad_cases[i];
    snprintf(text, sizeof text, "%s%s", ERR_MODEL, b->groups);
    gp_model *m = NULL;
    gp_error_clear();
    gp_status s = gp_model_load_string(text, "t.yaml", NULL, 0, &m);
    const char *msg = gp_error_message();
    CHECK(s == GP_ERR_SPEC && !m, "%s: status %s", b->what, gp_status_name(s));
    CHECK(strncmp(msg, b->msg, strlen(b->msg)) == 0, "%s: message\n  got  %s\n  want %s", b->what,
          msg, b->msg);
    CHECK(!strchr(msg, '\n'), "%s: one line", b->what);
    gp_model_free(m);
  }
  /* disabled groups tie nothing: shapes and other groups are not checked against them */
  snprintf(text, sizeof text, "%s%s", ERR_MODEL,
           "  a: {params: [emb.weight, out.weight]}\n"
           "  b: {params: [hid.weight, out.weight], enabled: false}\n");
  gp_model *m = NULL;
  CHECK(gp_model_load_string(text, "t.yaml", NULL, 0, &m) == GP_OK && m && m->n_tied == 1 &&
            !strcmp(m->tied[0].name, "a") && m->tied[0].n == 2,
        "a disabled group is dropped");
  gp_model_free(m);
  /* --set flips enabled whether the file writes it or not */
  snprintf(text, sizeof text, "%s%s", ERR_MODEL,
           "  a: {params: [emb.weight, out.weight]}\n"
           "  b: {params: [hid.weight, hid.bias], enabled: false}\n");
  const gp_override off = {"tied.a.enabled", "false"}, on = {"tied.b.enabled", "true"};
  m = NULL;
  CHECK(gp_model_load_string(text, "t.yaml", &off, 1, &m) == GP_OK && m && m->n_tied == 0,
        "--set tied.a.enabled=false (a key the file lacks)");
  gp_model_free(m);
  m = NULL;
  gp_status s = gp_model_load_string(text, "t.yaml", &on, 1, &m);
  CHECK(s == GP_ERR_SPEC && strstr(gp_error_message(), "t.yaml:10:28: tied group 'b': 'hid.bias'"),
        "--set tied.b.enabled=true checks its shapes: %s", gp_error_message());
  gp_model_free(m);
}

/* ---- a small model with three tied members ---- */

#define LEN 6
#define VOC 13
#define BATCH 8

static const char *tiny = "name: tiny-tied\n"
                          "inputs:\n"
                          "  src: {shape: [6], dtype: i32}\n"
                          "  tgt: {shape: [6], dtype: i32}\n"
                          "  label: {shape: [6], dtype: i32}\n"
                          "layers:\n"
                          "  - {type: embedding, num_embeddings: 13, dim: 8, padding_idx: 0,"
                          " scale: true, name: se, from: src}\n"
                          "  - {type: embedding, num_embeddings: 13, dim: 8, padding_idx: 0,"
                          " name: te, from: tgt}\n"
                          "  - {type: add, from: [se, te], name: sum}\n"
                          "  - {type: linear, out_features: 8, name: hid}\n"
                          "  - {type: tanh}\n"
                          "  - {type: linear, out_features: 13, name: out}\n"
                          "loss: {type: softmax_cross_entropy, ignore_index: -100}\n"
                          "tied:\n"
                          "  emb: {params: [se.weight, te.weight, out.weight]}\n"
                          "train:\n"
                          "  batch_size: 8\n"
                          "  clip_grad_norm: 0\n"
                          "  optimizer: {type: sgd, lr: 0.5}\n";

static gp_model *load_tiny(int tied, const char *clip) {
  gp_override ov[2] = {{"tied.emb.enabled", tied ? "true" : "false"},
                       {"train.clip_grad_norm", clip}};
  gp_model *m;
  if (gp_model_load_string(tiny, "tiny.yaml", ov, 2, &m) != GP_OK) gp_t_die("load tiny");
  return m;
}

static void trainer(gp_model *m, int k, int micro, gp_trainer *t) {
  m->pipeline.stages = k;
  m->pipeline.micro_batches = micro;
  m->pipeline.n_balance = 0;
  gp_plan plan;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(m, &m->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(t, m, &plan, &po, 42) != GP_OK) gp_t_die("trainer");
}

/* Ids in [1, VOC) then pad 0 and labels -100, a random real length per sequence. */
static void tiny_batch(const gp_model *m, uint64_t seed, gp_batch_buffers *b) {
  gp_rng r;
  gp_rng_seed(&r, seed);
  for (int s = 0; s < BATCH; s++) {
    int64_t len = 1 + (int64_t)gp_rng_below(&r, LEN);
    for (int i = 0; i < m->n_inputs; i++)
      for (int j = 0; j < LEN; j++) {
        int32_t *e = (int32_t *)b->in[i] + s * LEN + j;
        if (i == m->label_input)
          *e = j < len ? (int32_t)gp_rng_below(&r, VOC) : -100;
        else
          *e = j < len ? 1 + (int32_t)gp_rng_below(&r, VOC - 1) : 0;
      }
  }
}

/* The layer of a parameter name ("out.weight") and the parameter's index. */
static gp_layer *find_param(gp_model *m, const char *name, int *j) {
  for (int i = 0; i < m->n_nodes; i++) {
    gp_layer *l = &m->nodes[i].layer;
    size_t pl = strlen(l->path);
    if (strncmp(name, l->path, pl) || name[pl] != '.') continue;
    for (*j = 0; *j < l->n_params; (*j)++)
      if (!strcmp(name + pl + 1, l->pdesc[*j].name)) return l;
  }
  printf("FAIL: no parameter %s\n", name);
  exit(1);
}

/* ---- (b) n_params ---- */

static void count_check(const char *nmt_file) {
  gp_model *u = load_tiny(0, "0"), *t = load_tiny(1, "0");
  int64_t sum = 0;
  for (int i = 0; i < u->n_nodes; i++)
    for (int j = 0; j < u->nodes[i].layer.n_params; j++)
      if (u->nodes[i].layer.pdesc[j].trainable)
        sum += gp_shape_numel(&u->nodes[i].layer.pdesc[j].shape);
  CHECK(u->n_params == sum, "untied: %lld parameters, the layers hold %lld", (long long)u->n_params,
        (long long)sum);
  CHECK(t->n_params == sum - 2 * VOC * 8,
        "tied: %lld parameters, want %lld (the [13, 8] group once)", (long long)t->n_params,
        (long long)(sum - 2 * VOC * 8));
  CHECK(t->n_tied == 1 && t->tied[0].n == 3 && t->tied[0].numel == VOC * 8, "the group");
  gp_model_free(u);
  gp_model_free(t);
  const gp_override on = {"tied.embeddings.enabled", "true"};
  gp_model *a = NULL, *b = NULL; /* gp_t_die() exits before either is read unset */
  if (gp_model_load(nmt_file, NULL, 0, &a) != GP_OK || gp_model_load(nmt_file, &on, 1, &b) != GP_OK)
    gp_t_die("load nmt");
  CHECK(a->n_tied == 0 && b->n_tied == 1, "transformer-nmt: tied off by default, on with --set");
  CHECK(b->n_params == a->n_params - 2 * 8000 * 256,
        "transformer-nmt tied: %lld parameters, untied %lld", (long long)b->n_params,
        (long long)a->n_params);
  gp_model_free(a);
  gp_model_free(b);
}

/* ---- (c) the tied gradient is the sum of the copies' gradients ---- */

static const char *const members[] = {"se.weight", "te.weight", "out.weight"};

static void sum_check(const char *dir, const char *clip) {
  char wpath[4200];
  snprintf(wpath, sizeof wpath, "%s/w0.safetensors", dir);
  const double lr = 0.5;
  /* the untied run is not clipped: clipping scales the gradients it leaves behind */
  gp_model *mt = load_tiny(1, clip), *mu = load_tiny(0, "0");
  gp_trainer tt, tu;
  trainer(mt, 3, 2, &tt); /* the copies on stages 0 and 2 (two on 0) */
  trainer(mu, 1, 2, &tu); /* the same micro-batches: the same order of the gradients' sums */
  if (gp_trainer_save_weights(&tt, wpath) != GP_OK) gp_t_die("save w0");
  if (gp_trainer_load_weights(&tu, wpath, NULL) != GP_OK) gp_t_die("load w0 untied");
  int64_t n = VOC * 8;
  /* the untied copies and every other parameter start equal to the tied ones */
  double *w0 = malloc(sizeof(double) * (size_t)n), *gs = calloc((size_t)n, sizeof(double));
  double *bound = calloc((size_t)n, sizeof(double));
  int j;
  gp_layer *l0 = find_param(mt, members[0], &j);
  for (int64_t e = 0; e < n; e++)
    w0[e] = bind_in(&tt, l0)->param[j][e];
  gp_batch_buffers bufs;
  if (gp_batch_buffers_alloc(mt, BATCH, &bufs) != GP_OK) gp_t_die("buffers");
  tiny_batch(mt, 11, &bufs);
  gp_batch b = gp_batch_of(&bufs, BATCH);
  gp_metrics a, c;
  if (gp_trainer_step(&tt, &b, lr, &a) != GP_OK) gp_t_die("tied step");
  if (gp_trainer_step(&tu, &b, lr, &c) != GP_OK) gp_t_die("untied step");
  CHECK(fabs(a.loss - c.loss) <= TOL_KM * fabs(c.loss), "clip %s: losses %.9g and %.9g", clip,
        a.loss, c.loss);
  /* the untied gradients (kept after the step): the group's sum and the global norm */
  double others = 0, group = 0, alone = 0;
  for (int i = 0; i < mu->n_nodes; i++) {
    gp_layer *l = &mu->nodes[i].layer;
    for (int p = 0; p < l->n_params; p++) {
      if (!l->pdesc[p].trainable) continue;
      char name[256];
      snprintf(name, sizeof name, "%s.%s", l->path, l->pdesc[p].name);
      int tied = 0;
      for (int q = 0; q < 3; q++)
        tied |= !strcmp(name, members[q]);
      int64_t k = gp_shape_numel(&l->pdesc[p].shape);
      for (int64_t e = 0; e < k; e++) {
        double g = bind_in(&tu, l)->grad[p][e];
        if (!tied) {
          others += g * g;
          continue;
        }
        gs[e] += g;
        bound[e] += fabs(g);
        alone += g * g;
      }
    }
  }
  for (int64_t e = 0; e < n; e++)
    group += gs[e] * gs[e];
  double norm = sqrt(others + group), limit = atof(clip);
  double scale = limit > 0 ? fmin(1.0, limit / (norm + 1e-6)) : 1.0; /* PyTorch's factor */
  /* with the group counted once per copy */
  double wrong = limit > 0 ? fmin(1.0, limit / sqrt(others + 3 * group)) : 1.0;
  if (limit > 0) CHECK(norm > 2 * limit, "clip %s: clipping is active (norm %g)", clip, norm);
  /* every tied copy, on its stage, is w0 - lr * scale * (g1 + g2 + g3) */
  /* (in tolerances: how far the step moved it, and how far a wrong clipping norm would put it) */
  double worst = 0, moved = 0, off = 0;
  for (int q = 0; q < 3; q++) {
    gp_layer *l = find_param(mt, members[q], &j);
    for (int64_t e = 0; e < n; e++) {
      double want = w0[e] - lr * scale * gs[e];
      double tol = TOL_SUM * (fabs(w0[e]) + lr * scale * bound[e]) + 1e-30;
      worst = fmax(worst, fabs(bind_in(&tt, l)->param[j][e] - want) / tol);
      moved = fmax(moved, lr * scale * fabs(gs[e]) / tol);
      off = fmax(off, lr * fabs(scale - wrong) * fabs(gs[e]) / tol);
    }
  }
  CHECK(worst <= 1.0, "clip %s: tied weight vs w0 - lr (g1 + g2 + g3): %.3g tolerances off", clip,
        worst);
  CHECK(moved > 100, "clip %s: the step moved the tied weight by %g tolerances only", clip, moved);
  if (limit > 0)
    CHECK(off > 10, "clip %s: a norm counting every copy would be %g tolerances off only", clip,
          off);
  CHECK(alone > 0 && group != alone, "clip %s: each copy has its own gradient", clip);
  /* the parameters that are not tied: w0 (the untied run's weight before its step) - lr scale g */
  double dw = 0, ref = 1e-30;
  for (int i = 0; i < mt->n_nodes; i++) {
    gp_layer *lt = &mt->nodes[i].layer, *lu = &mu->nodes[i].layer;
    for (int p = 0; p < lt->n_params; p++) {
      if (!lt->pdesc[p].trainable || gp_model_tied_group(mt, i, p, NULL) >= 0) continue;
      for (int64_t e = 0; e < gp_shape_numel(&lt->pdesc[p].shape); e++) {
        double want =
            bind_in(&tu, lu)->param[p][e] + lr * (1 - scale) * bind_in(&tu, lu)->grad[p][e];
        dw = fmax(dw, fabs(bind_in(&tt, lt)->param[p][e] - want));
        ref = fmax(ref, fabs(want));
      }
    }
  }
  CHECK(dw <= TOL_KM * ref, "clip %s: untied parameters differ by %g (max %g)", clip, dw, ref);
  gp_batch_buffers_free(&bufs);
  free(w0);
  free(gs);
  free(bound);
  gp_trainer_free(&tt);
  gp_trainer_free(&tu);
  gp_model_free(mt);
  gp_model_free(mu);
  remove(wpath);
}

/* ---- (e) weights files ---- */

static void files_check(const char *dir) {
  char wpath[4200], bad[4200], part[4200];
  snprintf(wpath, sizeof wpath, "%s/tied.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/differ.safetensors", dir);
  snprintf(part, sizeof part, "%s/one.safetensors", dir);
  gp_model *mt = load_tiny(1, "0"), *mu = load_tiny(0, "0");
  gp_trainer tt, tu;
  trainer(mt, 2, 1, &tt);
  trainer(mu, 2, 1, &tu);
  gp_batch_buffers bufs;
  if (gp_batch_buffers_alloc(mt, BATCH, &bufs) != GP_OK) gp_t_die("buffers");
  gp_metrics r;
  for (int s = 0; s < 2; s++) {
    tiny_batch(mt, 20 + (uint64_t)s, &bufs);
    gp_batch b = gp_batch_of(&bufs, BATCH);
    if (gp_trainer_step(&tt, &b, 0.5, &r) != GP_OK) gp_t_die("tied step");
    if (gp_trainer_step(&tu, &b, 0.5, &r) != GP_OK) gp_t_die("untied step");
  }
  if (gp_trainer_save_weights(&tt, wpath) != GP_OK) gp_t_die("save tied");
  if (gp_trainer_save_weights(&tu, bad) != GP_OK) gp_t_die("save untied");
  gp_st_file *f;
  if (gp_st_read(wpath, &f) != GP_OK) gp_t_die("read tied");
  const gp_st_entry *e[3];
  for (int q = 0; q < 3; q++)
    e[q] = gp_st_find(f, members[q]);
  CHECK(e[0] && e[1] && e[2], "every member is written under its own name");
  for (int q = 1; q < 3 && e[0] && e[q]; q++)
    CHECK(e[q]->end - e[q]->begin == e[0]->end - e[0]->begin &&
              !memcmp(gp_st_data(f, e[q]), gp_st_data(f, e[0]), e[0]->end - e[0]->begin),
          "%s equals %s in the file", members[q], members[0]);
  /* a file with one member only: the others are read from it */
  gp_st_writer *w = gp_st_writer_new();
  gp_status s = w ? GP_OK : GP_ERR(GP_ERR_NOMEM, "writer");
  for (int i = 0; s == GP_OK && i < gp_st_count(f); i++) {
    const gp_st_entry *x = gp_st_entry_at(f, i);
    if (strcmp(x->name, "te.weight") && strcmp(x->name, "se.weight"))
      s = gp_st_add(w, x->name, x->dtype, &x->shape, gp_st_data(f, x));
  }
  if (s == GP_OK) s = gp_st_write(w, part);
  gp_st_writer_free(w);
  if (s != GP_OK) gp_t_die("write one-member file");
  gp_model *m2 = load_tiny(1, "0");
  gp_trainer t2;
  trainer(m2, 3, 1, &t2);
  CHECK(gp_trainer_load_weights(&t2, part, NULL) == GP_OK, "a file with one member loads");
  int j;
  for (int q = 0; q < 3; q++) {
    gp_layer *l = find_param(m2, members[q], &j);
    CHECK(e[2] && !memcmp(bind_in(&t2, l)->param[j], gp_st_data(f, e[2]), e[2]->end - e[2]->begin),
          "%s read from out.weight", members[q]);
  }
  CHECK(gp_trainer_load_weights(&t2, wpath, NULL) == GP_OK, "the tied file loads into K = 3");
  /* untied training made the copies differ: refused, naming both */
  gp_error_clear();
  s = gp_trainer_load_weights(&t2, bad, NULL);
  const char *msg = gp_error_message();
  CHECK(s == GP_ERR_DATA && strstr(msg, "tensors 'se.weight' and 'te.weight' are tied (group "
                                        "'emb') but differ in the file"),
        "differing members: %s", msg);
  CHECK(gp_trainer_load_weights(&tu, wpath, NULL) == GP_OK, "the untied model loads the tied file");
  /* a checkpoint of K = 2 resumes at K = 3 */
  char ck[4200];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  gp_ckpt_pos pos = {1, 2};
  CHECK(gp_trainer_save_checkpoint(&tt, ck, &pos) == GP_OK, "save a checkpoint");
  CHECK(gp_trainer_load_checkpoint(&t2, ck, &pos) == GP_OK && t2.step == 2, "load it at K = 3");
  gp_layer *l = find_param(m2, members[1], &j);
  CHECK(e[1] && !memcmp(bind_in(&t2, l)->param[j], gp_st_data(f, e[1]), e[1]->end - e[1]->begin),
        "te.weight from the checkpoint");
  /* a NaN weight is refused, naming it, and nothing is written */
  char nanpath[4200];
  snprintf(nanpath, sizeof nanpath, "%s/nan.safetensors", dir);
  ((float *)bind_in(&t2, l)->param[j])[1] = NAN;
  gp_error_clear();
  s = gp_trainer_save_weights(&t2, nanpath);
  msg = gp_error_message();
  CHECK(s == GP_ERR_RUNTIME && strstr(msg, "te.weight[1] is NaN") && access(nanpath, F_OK) != 0,
        "a NaN weight: %s", msg);
  strncat(ck, "/checkpoint.safetensors", sizeof ck - strlen(ck) - 1);
  remove(ck);
  ck[strlen(ck) - strlen("/checkpoint.safetensors")] = 0;
  rmdir(ck);
  gp_st_free(f);
  gp_batch_buffers_free(&bufs);
  gp_trainer_free(&t2);
  gp_trainer_free(&tt);
  gp_trainer_free(&tu);
  gp_model_free(m2);
  gp_model_free(mt);
  gp_model_free(mu);
  remove(wpath);
  remove(bad);
  remove(part);
}

/* ---- (d) K x M with the Transformer's embeddings tied ---- */

#define STEPS 4

typedef struct run_out {
  double loss[STEPS];
  float *w;
  int64_t n_w;
  int stages_used; /* distinct stages holding a tied copy */
} run_out;

/* Every copy's weights and optimizer state against copy 0's, byte for byte. */
static int copies_identical(gp_trainer *t, int *stages_used) {
  const gp_model *m = t->m;
  int same = 1, used[GP_MAX_DEVICES] = {0};
  *stages_used = 0;
  for (int g = 0; g < m->n_tied; g++) {
    const gp_tied_group *tg = &m->tied[g];
    const float *w0 = NULL, *s0[GP_OPT_MAX_SLOTS] = {0};
    size_t bytes = (size_t)tg->numel * sizeof(float);
    for (int i = 0; i < tg->n; i++) {
      const gp_param_ref *r = &tg->members[i];
      const float *w = bind_in(t, &m->nodes[r->node].layer)->param[r->param];
      int s = 0;
      while (s < gp_pipeline_stages(t->pl) &&
             !(w >= gp_pipeline_params(t->pl, s)->train &&
               w < gp_pipeline_params(t->pl, s)->train + gp_pipeline_params(t->pl, s)->n_train))
        s++;
      if (s == gp_pipeline_stages(t->pl)) return 0;
      *stages_used += !used[s];
      used[s] = 1;
      gp_optimizer *o = gp_pipeline_optimizer(t->pl, s);
      int64_t off = w - gp_pipeline_params(t->pl, s)->train;
      if (i == 0) w0 = w;
      same &= !memcmp(w, w0, bytes);
      for (int k = 0; k < o->n_slots; k++) {
        if (i == 0) s0[k] = o->slot[k] + off;
        same &= !memcmp(o->slot[k] + off, s0[k], bytes);
      }
    }
  }
  return same;
}

static void train_nmt(const char *file, const gp_override *ov, int nov, int k, int m,
                      gp_schedule_kind sched, gp_remat remat, run_out *o) {
  gp_trainer t;
  token_fixture_train(file, ov, nov, k, m, sched, remat, STEPS, BATCH, LEN, VOC, 1e-2, o->loss, &t);
  CHECK(copies_identical(&t, &o->stages_used),
        "K=%d M=%d: the tied copies are bit-identical (weights and optimizer state)", k, m);
  o->w = token_fixture_weights(&t, &o->n_w);
  gp_model *mo = (gp_model *)t.m; /* the fixture loaded it: ours to free */
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static void grid(const char *file) {
  /* test_token_models' tiny size, embeddings tied */
  gp_override *ov = token_fixture_tiny_nmt;
  ov[TOKEN_TINY_NMT_N] = (gp_override){"tied.embeddings.enabled", "true"};
  int nov = TOKEN_TINY_NMT_N + 1;
  run_out want, untied;
  train_nmt(file, ov, nov, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &want);
  train_nmt(file, ov, nov - 1, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &untied);
  CHECK(fabs(untied.loss[STEPS - 1] - want.loss[STEPS - 1]) > 100 * TOL_KM * want.loss[STEPS - 1],
        "tying changes the training (losses %g and %g)", want.loss[STEPS - 1],
        untied.loss[STEPS - 1]);
  free(untied.w);
  int i = 0, spread = 0;
  for (int k = 1; k <= 4; k++)
    for (int m = 1; m <= 4; m++, i++) {
      if (k == 1 && m == 1) continue;
      run_out got;
      train_nmt(file, ov, nov, k, m, (gp_schedule_kind)(i % 2), (gp_remat)(i % 3), &got);
      if (k == 4) spread = got.stages_used;
      double dl = 0, dw = 0, ref = 1e-30;
      for (int s = 0; s < STEPS; s++)
        dl = fmax(dl, fabs(got.loss[s] - want.loss[s]) / fabs(want.loss[s]));
      for (int64_t j = 0; j < want.n_w && got.n_w == want.n_w; j++) {
        dw = fmax(dw, fabs((double)got.w[j] - want.w[j]));
        ref = fmax(ref, fabs((double)want.w[j]));
      }
      CHECK(got.n_w == want.n_w && dl <= TOL_KM && dw / ref <= TOL_KM,
            "transformer-nmt tied K=%d M=%d: loss rel diff %.3g, weight rel diff %.3g", k, m, dl,
            dw / ref);
      free(got.w);
    }
  CHECK(spread >= 3, "K=4 puts the three copies on %d stages; the test wants 3", spread);
  free(want.w);
  /* stages without shared memory: the tied sums and their copies go by copy_peer, with the
   * same arithmetic, so bit-identical to stages sharing memory */
  for (int m = 1; m <= 2; m++) {
    run_out same, apart;
    train_nmt(file, ov, nov, 4, m, GP_SCHED_1F1B, GP_REMAT_ALWAYS, &same);
    token_fixture_copy_all = 1;
    train_nmt(file, ov, nov, 4, m, GP_SCHED_1F1B, GP_REMAT_ALWAYS, &apart);
    token_fixture_copy_all = 0;
    CHECK(same.n_w == apart.n_w && !memcmp(same.loss, apart.loss, sizeof same.loss) &&
              !memcmp(same.w, apart.w, sizeof(float) * (size_t)same.n_w),
          "tied K=4 M=%d: stages apart (copies) train bit-identically to stages sharing memory", m);
    free(same.w);
    free(apart.w);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    printf("usage: test_tied models/transformer-nmt.yaml\n");
    return 2;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/gp_tied_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  spec_errors();
  count_check(argv[1]);
  sum_check(dir, "0");
  sum_check(dir, "0.01");
  files_check(dir);
  grid(argv[1]);
  rmdir(dir);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
