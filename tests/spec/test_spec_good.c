/* Model files that must load: the documented example (units, names, paths, shapes, parameter
 * count, every section), defaults, blocks with parameters and ${expr}, nested blocks, repeat,
 * skip connections across units, multi-input blocks, anchors, aliases and merge keys. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/spec/spec_test.h"

#define CHECK_OUT(m, path, want)                                                                   \
  do {                                                                                             \
    char b_[128];                                                                                  \
    const char *got_ = gp_t_out((m), gp_t_node((m), (path)), b_, sizeof b_);                       \
    CHECK(!strcmp(got_, (want)), "%s: output %s, expected %s", (path), got_, (want));              \
  } while (0)

/* Tensor id of the node at path. */
static int tensor(const gp_model *m, const char *path) {
  return gp_model_tensor_of_node(m, gp_t_node(m, path));
}

static int input_of(const gp_model *m, const char *path, int k) {
  int i = gp_t_node(m, path);
  return i < 0 || k >= m->nodes[i].n_in ? -99 : m->nodes[i].in[k];
}

static void test_example(const char *file) {
  gp_model *m = NULL;
  gp_status s = gp_model_load(file, NULL, 0, &m);
  CHECK(s == GP_OK, "%s: %s", file, gp_error_message());
  if (s != GP_OK) return;
  CHECK(!strcmp(m->name, "fashion-cnn"), "name %s", m->name);
  CHECK(m->n_inputs == 2, "n_inputs %d", m->n_inputs);
  CHECK(!strcmp(m->inputs[0].name, "image") && m->inputs[0].dtype == GP_F32 &&
            m->inputs[0].shape.ndim == 3 && m->inputs[0].shape.d[0] == 1 &&
            m->inputs[0].shape.d[2] == 28,
        "input 0");
  CHECK(!strcmp(m->inputs[1].name, "label") && m->inputs[1].dtype == GP_I32 &&
            m->inputs[1].shape.ndim == 0,
        "input 1");
  CHECK(m->label_input == 1, "label_input %d", m->label_input);

  static const char *const units[] = {"0", "1", "2", "3", "4", "logits"};
  static const int first[] = {0, 3, 4, 7, 10, 11, 13};
  CHECK(m->n_units == 6, "n_units %d", m->n_units);
  for (int u = 0; u < 6 && u < m->n_units; u++)
    CHECK(!strcmp(m->unit_names[u], units[u]), "unit %d named %s", u, m->unit_names[u]);
  for (int u = 0; u <= 6 && u <= m->n_units; u++)
    CHECK(m->unit_first[u] == first[u], "unit_first[%d] = %d", u, m->unit_first[u]);

  static const char *const paths[] = {"0.conv", "0.1", "0.act", "1", "2.conv", "2.1", "2.act",
                                      "3.conv", "3.1", "3.act", "4", "logits", "loss"};
  static const char *const types[] = {"conv2d",
                                      "batchnorm",
                                      "relu",
                                      "maxpool",
                                      "conv2d",
                                      "batchnorm",
                                      "relu",
                                      "conv2d",
                                      "batchnorm",
                                      "relu",
                                      "flatten",
                                      "linear",
                                      "softmax_cross_entropy"};
  CHECK(m->n_nodes == 13, "n_nodes %d", m->n_nodes);
  for (int i = 0; i < 13 && i < m->n_nodes; i++) {
    CHECK(!strcmp(m->nodes[i].layer.path, paths[i]), "node %d path %s", i, m->nodes[i].layer.path);
    CHECK(!strcmp(m->nodes[i].layer.type->name, types[i]), "node %d type %s", i,
          m->nodes[i].layer.type->name);
  }
  CHECK_OUT(m, "0.conv", "[32, 28, 28]");
  CHECK_OUT(m, "1", "[32, 14, 14]");
  CHECK_OUT(m, "2.conv", "[64, 14, 14]");
  CHECK_OUT(m, "3.act", "[64, 14, 14]");
  CHECK_OUT(m, "4", "[12544]");
  CHECK_OUT(m, "logits", "[10]");
  CHECK_OUT(m, "loss", "[]");
  /* output: act -> the next unit takes the named layer's output */
  CHECK(input_of(m, "1", 0) == tensor(m, "0.act"), "maxpool input %d", input_of(m, "1", 0));
  CHECK(input_of(m, "3.conv", 0) == tensor(m, "2.act"), "repeat chains on the block output");
  CHECK(input_of(m, "0.conv", 0) == 0, "the first layer takes the first model input");
  CHECK(input_of(m, "2.1", 0) == tensor(m, "2.conv"), "inside a block: the previous layer");
  CHECK(m->nodes[m->n_nodes - 1].unit == 5, "loss unit %d", m->nodes[m->n_nodes - 1].unit);
  CHECK(input_of(m, "loss", 0) == tensor(m, "logits") && input_of(m, "loss", 1) == 1,
        "loss inputs [logits, label]");
  CHECK(m->output_node == 11, "output_node %d", m->output_node);
  CHECK(gp_model_tensor_of_node(m, 0) == 2, "tensor_of_node");
  int conv = gp_t_node(m, "0.conv");
  CHECK(conv >= 0 && m->nodes[conv].line == 12 && m->nodes[conv].col == 9, "0.conv at %d:%d",
        conv >= 0 ? m->nodes[conv].line : 0, conv >= 0 ? m->nodes[conv].col : 0);
  CHECK(m->nodes[gp_t_node(m, "2.1")].unit == 2 && m->nodes[gp_t_node(m, "3.1")].unit == 3,
        "node units");
  /* conv 32*1*9 + bn 2*32 + conv 64*32*9 + bn 128 + conv 64*64*9 + bn 128 + linear 12544*10+10 */
  CHECK(m->n_params == 181354, "n_params %lld", (long long)m->n_params);

  const gp_data_spec *d = &m->data;
  CHECK(d->dataset == GP_DATA_FASHION_MNIST && d->n_norm == 1 &&
            fabsf(d->mean[0] - 0.2860f) < 1e-7f && fabsf(d->std[0] - 0.3530f) < 1e-7f &&
            !d->augment && d->train_limit == 0 && d->test_limit == 0 && !strcmp(d->path, ""),
        "data section");
  const gp_train_spec *t = &m->train;
  CHECK(t->batch_size == 128 && t->epochs == 5 && t->steps == 0 && t->seed == 1 &&
            t->eval_every == 0 && t->log_every == 50 && t->clip_grad_norm == 0,
        "train section");
  CHECK(t->optimizer == GP_OPT_SGD && t->lr == 0.05 && t->momentum == 0.9 && t->nesterov &&
            t->weight_decay == 5e-4,
        "optimizer");
  CHECK(t->schedule == GP_LR_COSINE && t->warmup_steps == 100 && t->min_lr == 0, "schedule");
  const gp_pipeline_spec *p = &m->pipeline;
  CHECK(p->stages == 2 && p->micro_batches == 4 && p->schedule == GP_SCHED_GPIPE &&
            p->remat == GP_REMAT_EXCEPT_LAST && p->n_devices == 1 &&
            !strcmp(p->devices[0], "cpu") && p->n_balance == 2 && p->balance[0] == 3 &&
            p->balance[1] == 3,
        "pipeline section");
  gp_model_free(m);
}

#define MIN_HEAD "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"

static void test_defaults(void) {
  gp_model *m = gp_t_load("defaults",
                          MIN_HEAD "layers:\n  - {type: linear, out_features: 3}\n"
                                   "loss: {type: softmax_cross_entropy}\n",
                          NULL, 0);
  if (!m) return;
  CHECK(!strcmp(m->name, "t"), "name from the file name: %s", m->name);
  CHECK(m->n_units == 1 && !strcmp(m->unit_names[0], "0") && !strcmp(m->nodes[0].layer.path, "0"),
        "one unit '0'");
  CHECK(m->n_params == 15, "n_params %lld", (long long)m->n_params);
  CHECK(m->data.dataset == GP_DATA_NONE && m->data.n_norm == 0, "no data section");
  const gp_train_spec *t = &m->train;
  CHECK(t->batch_size == 32 && t->epochs == 1 && t->steps == 0 && t->seed == 0 &&
            t->log_every == 50 && t->eval_every == 0 && t->clip_grad_norm == 0,
        "train defaults");
  CHECK(t->optimizer == GP_OPT_SGD && t->lr == 0.1 && t->momentum == 0 && !t->nesterov &&
            t->weight_decay == 0,
        "sgd defaults");
  CHECK(t->schedule == GP_LR_CONSTANT && t->warmup_steps == 0, "constant schedule");
  const gp_pipeline_spec *p = &m->pipeline;
  CHECK(p->stages == 1 && p->micro_batches == 1 && p->schedule == GP_SCHED_AUTO &&
            p->remat == GP_REMAT_AUTO && p->n_devices == 1 && !strcmp(p->devices[0], "cpu") &&
            p->n_balance == 0,
        "pipeline defaults (schedule and remat auto)");
  gp_model_free(m);

  /* "cuda" is cuda:0 (docs/model-format.md), stored in the form the executor knows */
  gp_override dev[] = {{"pipeline.devices.1", "cuda"}};
  m = gp_t_load("cuda",
                MIN_HEAD "layers: [{type: linear, out_features: 3}, {type: relu}]\n"
                         "loss: softmax_cross_entropy\n"
                         "pipeline: {stages: 2, devices: [cuda, cuda:1]}\n",
                dev, 1);
  CHECK(m && m->pipeline.n_devices == 2 && !strcmp(m->pipeline.devices[0], "cuda:0") &&
            !strcmp(m->pipeline.devices[1], "cuda:0"),
        "devices: [cuda, cuda:1] with pipeline.devices.1=cuda: %s, %s",
        m ? m->pipeline.devices[0] : "-", m ? m->pipeline.devices[1] : "-");
  gp_model_free(m);

  gp_override ov[] = {{"train.optimizer.type", "adamw"}};
  m = gp_t_load("adamw defaults",
                MIN_HEAD "layers: [{type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n",
                ov, 1);
  if (m) {
    const gp_train_spec *a = &m->train;
    CHECK(a->optimizer == GP_OPT_ADAMW && a->lr == 1e-3 && a->beta1 == 0.9 && a->beta2 == 0.999 &&
              a->eps == 1e-8 && a->weight_decay == 0.01,
          "adamw defaults");
    gp_model_free(m);
  }
  /* a typed section set to a type alone replaces the mapping: sgd's momentum and nesterov go
   * (adamw has neither), and a later --set adds to the new type */
  static const char *const sgd_file =
      MIN_HEAD "layers: [{type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n"
               "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}}\n";
  gp_override whole[] = {{"train.optimizer", "adamw"}, {"train.optimizer.lr", "0.002"}};
  for (int n = 1; n <= 2; n++) {
    m = gp_t_load("--set train.optimizer=adamw over an sgd mapping", sgd_file, whole, n);
    CHECK(m && m->train.optimizer == GP_OPT_ADAMW && m->train.lr == (n == 1 ? 1e-3 : 0.002) &&
              m->train.weight_decay == 0.01 && m->train.beta1 == 0.9,
          "--set train.optimizer=adamw%s: adamw with its defaults", n == 2 ? " then lr" : "");
    gp_model_free(m);
  }
  m = gp_t_load("rmsprop defaults and a step schedule",
                MIN_HEAD "layers: [{type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n"
                         "train: {optimizer: rmsprop, schedule: {type: step, step_size: 10, "
                         "gamma: 0.5}, steps: 7}\n",
                NULL, 0);
  if (m) {
    const gp_train_spec *r = &m->train;
    CHECK(r->optimizer == GP_OPT_RMSPROP && r->lr == 0.01 && r->alpha == 0.99 && r->eps == 1e-8 &&
              r->momentum == 0 && r->weight_decay == 0,
          "rmsprop defaults");
    CHECK(r->schedule == GP_LR_STEP && r->step_size == 10 && r->gamma == 0.5 && r->steps == 7,
          "step schedule");
    gp_model_free(m);
  }
  /* the name from the file name follows name:'s rule: no control characters (a line break
   * split the plan gpipe-partition -o wrote, which gpipe-train then refused) */
  if (gp_model_load_string(MIN_HEAD "layers: [{type: linear, out_features: 3}]\n"
                                    "loss: softmax_cross_entropy\n",
                           "dir/a\nstages: 9.yaml", NULL, 0, &m) == GP_OK) {
    CHECK(!strcmp(m->name, "a_stages: 9"), "name from 'a\\nstages: 9.yaml': '%s'", m->name);
    gp_model_free(m);
  } else {
    CHECK(0, "a control character in the file name: %s", gp_error_message());
  }
  /* ... nor noncharacters, which the name check refuses */
  if (gp_model_load_string(MIN_HEAD "layers: [{type: linear, out_features: 3}]\n"
                                    "loss: softmax_cross_entropy\n",
                           "dir/a\xef\xbf\xbe\xc3\xa9.yaml", NULL, 0, &m) == GP_OK) {
    CHECK(!strcmp(m->name, "a___\xc3\xa9"), "name from 'a<U+FFFE>\xc3\xa9.yaml': '%s'", m->name);
    gp_model_free(m);
  } else {
    CHECK(0, "a noncharacter in the file name: %s", gp_error_message());
  }
  /* a block no entry uses: what depends on its parameters is not read (nothing to read it with) */
  if (gp_model_load_string(MIN_HEAD "blocks: {u: {params: {c: ~, t: relu}, layers: [\n"
                                    "  {type: conv2d, out_channels: $c, kernel: '${c // 0}'},\n"
                                    "  {type: $t, from: nowhere}]}}\n"
                                    "layers: [{type: linear, out_features: 3}]\n"
                                    "loss: softmax_cross_entropy\n",
                           "t.yaml", NULL, 0, &m) == GP_OK)
    gp_model_free(m);
  else
    CHECK(0, "an unused block with parameters: %s", gp_error_message());
  /* and it is valid UTF-8 (JSON, plans): a Latin-1 byte, a character the 63-byte cut splits */
  static const struct {
    const char *file, *name;
  } u8[] = {
      {"d/m\xffx.yaml", "m_x"},
      {"d/caf\xc3\xa9.yaml", "caf\xc3\xa9"},
      {"d/\xed\xa0\x80s.yaml", "___s"}, /* a surrogate */
      {"d/a\xc2\x85"
       "b\xe2\x80\xa8"
       "c\xe2\x80\xa9.yaml",
       "a__b___c___"},                           /* U+0085, U+2028/9 */
      {"d/\xc2\xa0\xc2\x9f.yaml", "\xc2\xa0__"}, /* U+00A0 is kept, U+009F is a control */
      {"d/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9\xc3\xa9.yaml",
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_"},
  };
  for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++) {
    if (gp_model_load_string(MIN_HEAD "layers: [{type: linear, out_features: 3}]\n"
                                      "loss: softmax_cross_entropy\n",
                             u8[i].file, NULL, 0, &m) != GP_OK) {
      CHECK(0, "name from %s: %s", u8[i].file, gp_error_message());
      continue;
    }
    CHECK(!strcmp(m->name, u8[i].name), "name from %s: '%s'", u8[i].file, m->name);
    gp_model_free(m);
  }
  m = gp_t_load("adamw settings",
                MIN_HEAD
                "layers: [{type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n"
                "train: {optimizer: {type: adamw, lr: 3e-4, betas: [0.8, 0.95], eps: 1e-6, "
                "weight_decay: 0}}\n"
                "data: {dataset: cifar10, normalize: {mean: [0.5, 0.4, 0.3], std: [0.2, "
                "0.25, 0.3]}, augment: true, train_limit: 100}\n"
                "pipeline: {devices: cuda:0, schedule: 1f1b, remat: never}\n",
                NULL, 0);
  if (m) {
    const gp_train_spec *a = &m->train;
    CHECK(a->lr == 3e-4 && a->beta1 == 0.8 && a->beta2 == 0.95 && a->eps == 1e-6 &&
              a->weight_decay == 0,
          "adamw settings");
    CHECK(m->data.dataset == GP_DATA_CIFAR10 && m->data.n_norm == 3 &&
              fabsf(m->data.std[1] - 0.25f) < 1e-7f && m->data.augment &&
              m->data.train_limit == 100,
          "cifar10 data");
    CHECK(m->pipeline.n_devices == 1 && !strcmp(m->pipeline.devices[0], "cuda:0") &&
              m->pipeline.schedule == GP_SCHED_1F1B && m->pipeline.remat == GP_REMAT_NEVER,
          "pipeline settings");
    CHECK(!m->pipeline.renamed[0], "remat: is no old name: %s", m->pipeline.renamed);
    gp_model_free(m);
  }
  /* checkpoint: is remat:'s old name: read, and noted with where it was written */
  m = gp_t_load("pipeline.checkpoint",
                MIN_HEAD "layers: [{type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n"
                         "pipeline: {schedule: 1f1b, checkpoint: always}\n",
                NULL, 0);
  if (m) {
    CHECK(m->pipeline.remat == GP_REMAT_ALWAYS, "checkpoint: always is read as remat: always");
    CHECK(strstr(m->pipeline.renamed, "pipeline.checkpoint is now pipeline.remat") &&
              strchr(m->pipeline.renamed, ':'),
          "the old name is noted: '%s'", m->pipeline.renamed);
    gp_model_free(m);
  }
}

/* ${expr}: Python's arithmetic (/ true division, // and % floor), integral floats as ints. */
static void test_expressions(void) {
  static const struct {
    const char *expr, *out;
  } cases[] = {
      {"${(1 + 2) * 3}", "[9]"},
      {"${-7 // 2 + 10}", "[6]"},
      {"${7 % -3 + 5}", "[3]"},
      {"${-7 % 3}", "[2]"},
      {"${2.5 * 4}", "[10]"},
      {"${10 / 4 * 2}", "[5]"},
      {"${2 - 3 - 4 + 12}", "[7]"},
      {"${ 2*3+1 }", "[7]"},
      {"${8 // 3 * 3}", "[6]"},
      {"${7.5 // 2}", "[3]"},
      {"${--4}", "[4]"},
      {"${1e1 - 2}", "[8]"},
      /* the one quotient int64 cannot hold has a remainder that it can */
      {"${(-9223372036854775807 - 1) % -1 + 5}", "[5]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512];
    snprintf(text, sizeof text,
             MIN_HEAD "layers:\n  - {type: linear, out_features: '%s', name: fc}\n"
                      "  - {type: linear, out_features: 2}\nloss: softmax_cross_entropy\n",
             cases[i].expr);
    gp_model *m = gp_t_load(cases[i].expr, text, NULL, 0);
    if (!m) continue;
    CHECK_OUT(m, "fc", cases[i].out);
    gp_model_free(m);
  }
  /* integers are decimal wherever they are written: a shape, a setting, $p or ${p} */
  gp_model *m = gp_t_load("a leading zero",
                          "inputs: {x: [010], label: {shape: [], dtype: i32}}\n"
                          "blocks: {b: {params: {c: 010}, layers: [{type: linear, out_features: "
                          "$c, name: p}, {type: linear, out_features: '${c}', name: e}]}}\n"
                          "layers: [{type: linear, out_features: 010, name: fc}, {block: b}]\n"
                          "loss: softmax_cross_entropy\ntrain: {batch_size: 010}\n",
                          NULL, 0);
  if (!m) return;
  CHECK_OUT(m, "fc", "[10]");
  CHECK_OUT(m, "1.p", "[10]");
  CHECK_OUT(m, "1.e", "[10]");
  CHECK(m->train.batch_size == 10, "batch_size: 010 is %lld", (long long)m->train.batch_size);
  gp_model_free(m);
}

static const char *const blocks_yaml =
    "inputs: {x: [6], label: {shape: [], dtype: i32}}\n"
    "blocks:\n"
    "  inner:\n"
    "    params: {c: ~}\n"
    "    layers:\n"
    "      - {type: linear, out_features: $c, name: fc}\n"
    "      - {type: relu, name: act}\n"
    "  outer:\n"
    "    params: {c: 4, h: '${c * 2}', k: '${h + c}'}\n" /* defaults may use earlier params */
    "    layers:\n"
    "      - {block: inner, c: $h, name: a}\n"
    "      - {block: inner, c: $c, name: b}\n"
    "      - {type: linear, out_features: '${k // 2}'}\n"
    "layers:\n"
    "  - {block: outer, name: enc}\n"
    "  - {block: outer, c: 3}\n"
    "  - {block: inner, c: 5, repeat: 2}\n"
    "  - {type: linear, out_features: 2, name: head}\n"
    "loss: {type: softmax_cross_entropy}\n";

static void test_blocks(void) {
  gp_model *m = gp_t_load("nested blocks", blocks_yaml, NULL, 0);
  if (!m) return;
  static const char *const units[] = {"enc", "1", "2", "3", "head"};
  CHECK(m->n_units == 5, "n_units %d", m->n_units);
  for (int u = 0; u < 5 && u < m->n_units; u++)
    CHECK(!strcmp(m->unit_names[u], units[u]), "unit %d: %s", u, m->unit_names[u]);
  CHECK_OUT(m, "enc.a.fc", "[8]");
  CHECK_OUT(m, "enc.a.act", "[8]");
  CHECK_OUT(m, "enc.b.fc", "[4]");
  CHECK_OUT(m, "enc.2", "[6]"); /* k = h + c = 12, 12 // 2 */
  CHECK_OUT(m, "1.a.fc", "[6]");
  CHECK_OUT(m, "1.b.fc", "[3]");
  CHECK_OUT(m, "1.2", "[4]"); /* (6 + 3) // 2 */
  CHECK_OUT(m, "2.fc", "[5]");
  CHECK_OUT(m, "3.act", "[5]");
  CHECK(input_of(m, "enc.b.fc", 0) == tensor(m, "enc.a.act"), "b takes a's output");
  CHECK(input_of(m, "3.fc", 0) == tensor(m, "2.act"), "repeat chains");
  CHECK(m->nodes[gp_t_node(m, "enc.b.act")].unit == 0 && m->nodes[gp_t_node(m, "1.a.fc")].unit == 1,
        "a block instance is one unit");
  CHECK(m->n_nodes == 16, "n_nodes %d", m->n_nodes);
  gp_model_free(m);
}

/* ResNet-like: residual adds inside a block, across units, repeated names, reused names. */
static const char *const resnet_yaml =
    "inputs: {x: [8], y: {shape: [], dtype: i32}}\n"
    "blocks:\n"
    "  res:\n"
    "    params: {d: 8}\n"
    "    layers:\n"
    "      - {type: linear, out_features: $d, name: fc1}\n"
    "      - {type: relu}\n"
    "      - {type: linear, out_features: $d, name: fc2}\n"
    "      - {type: add, from: [fc2, in]}\n"
    "layers:\n"
    "  - {type: linear, out_features: 8, name: stem}\n"
    "  - {block: res, repeat: 3, name: stage}\n"
    "  - {type: add, from: [stage, stem], name: skip}\n"
    "  - {type: linear, out_features: 8, name: x}\n"
    "  - {type: add, from: [x, skip]}\n"
    "  - {type: linear, out_features: 2, name: head, repeat: 2}\n"
    "loss: {type: softmax_cross_entropy, from: [head.1, y]}\n";

static void test_residual(void) {
  /* "head.1" is not a tensor name (only "head" is): the loss's from must fail ... */
  static const char *const parts[] = {"t.yaml:17:", "no tensor named 'head.1'"};
  gp_t_load_fails("repeat names are units, not tensors", resnet_yaml, NULL, 0, GP_ERR_SPEC, parts,
                  2);
  /* ... and "head" names the last copy */
  gp_override fix = {"loss.from.0", "head"};
  gp_model *m = gp_t_load("resnet-like", resnet_yaml, &fix, 1);
  if (!m) return;
  static const char *const units[] = {"stem", "stage.0", "stage.1", "stage.2", "skip",
                                      "x",    "6",       "head.0",  "head.1"};
  CHECK(m->n_units == 9, "n_units %d", m->n_units);
  for (int u = 0; u < 9 && u < m->n_units; u++)
    CHECK(!strcmp(m->unit_names[u], units[u]), "unit %d: %s", u, m->unit_names[u]);
  CHECK(input_of(m, "stage.0.fc1", 0) == tensor(m, "stem"), "first copy takes stem");
  CHECK(input_of(m, "stage.0.3", 1) == tensor(m, "stem"), "block 'in' is the instance input");
  CHECK(input_of(m, "stage.1.3", 0) == tensor(m, "stage.1.fc2"), "add takes fc2");
  CHECK(input_of(m, "stage.1.3", 1) == tensor(m, "stage.0.3"), "in = previous copy's output");
  CHECK(input_of(m, "skip", 0) == tensor(m, "stage.2.3") &&
            input_of(m, "skip", 1) == tensor(m, "stem"),
        "skip across units takes the last copy and the stem");
  /* a reused name: after the layer named x, "x" is that layer, not the model input */
  CHECK(input_of(m, "6", 0) == tensor(m, "x") && input_of(m, "6", 1) == tensor(m, "skip"),
        "x is the latest definition");
  CHECK(input_of(m, "head.1", 0) == tensor(m, "head.0"), "repeated layer chains");
  CHECK(input_of(m, "loss", 0) == tensor(m, "head.1") && input_of(m, "loss", 1) == 1,
        "loss from [head, y]");
  CHECK(m->label_input == 1 && m->output_node == gp_t_node(m, "head.1"), "label and output");
  gp_model_free(m);
}

static const char *const multi_yaml = "inputs: {x: [8], label: {shape: [], dtype: i32}}\n"
                                      "blocks:\n"
                                      "  merge:\n"
                                      "    inputs: [a, b]\n"
                                      "    layers:\n"
                                      "      - {type: add, from: [a, b], name: sum}\n"
                                      "      - {type: linear, out_features: 8, name: lin}\n"
                                      "      - {type: relu, from: sum, name: r}\n"
                                      "      - {type: add, from: [lin, r], name: out}\n"
                                      "    output: '1'\n"
                                      "layers:\n"
                                      "  - {type: linear, out_features: 8, name: p}\n"
                                      "  - {type: linear, out_features: 8, name: q, from: x}\n"
                                      "  - {block: merge, from: [p, q], repeat: 2, name: m}\n"
                                      "  - {type: linear, out_features: 3}\n"
                                      "loss: {type: softmax_cross_entropy}\n";

static void test_multi_input(void) {
  /* output: '1' is not a name (unnamed entries have no tensor name) */
  static const char *const parts[] = {"t.yaml:10:13: ", "output: no tensor named '1'",
                                      "in block 'merge'"};
  gp_t_load_fails("block output must be a name", multi_yaml, NULL, 0, GP_ERR_SPEC, parts, 3);
  /* (output: sum would leave lin, r and out unread: refused, see spec_bad) */
  gp_override ov[] = {{"blocks.merge.output", "out"}};
  gp_model *m = gp_t_load("multi-input block", multi_yaml, ov, 1);
  if (!m) return;
  CHECK(input_of(m, "q", 0) == 0, "from: x is the model input");
  CHECK(input_of(m, "m.0.sum", 0) == tensor(m, "p") && input_of(m, "m.0.sum", 1) == tensor(m, "q"),
        "from: [p, q] gives the inputs in order");
  CHECK(input_of(m, "m.1.sum", 0) == tensor(m, "m.0.out") &&
            input_of(m, "m.1.sum", 1) == tensor(m, "q"),
        "the next copy takes the previous output first and keeps the other inputs");
  CHECK(input_of(m, "m.0.r", 0) == tensor(m, "m.0.sum"), "from: inside the block");
  CHECK(input_of(m, "4", 0) == tensor(m, "m.1.out"), "output: out is the block's output");
  gp_model_free(m);
}

/* A one-level mapping value is the settings key.sub (attention's rope: {theta: ...}), read
 * inside a block with a parameter substituted, and inputs: names from:'s inputs. */
static const char *const rope_yaml =
    "inputs: {x: [6, 32], pos: {shape: [6], dtype: i32}, label: {shape: [6], dtype: i32}}\n"
    "blocks:\n"
    "  dec:\n"
    "    params: {theta: 10000}\n"
    "    inputs: [h, p]\n"
    "    layers:\n"
    "      - {type: attention, heads: 4, kv_heads: 1, bias: false, causal: true,\n"
    "         rope: {theta: $theta}, from: [p, h], inputs: [pos, query], name: att}\n"
    "layers:\n"
    "  - {block: dec, from: [x, pos], name: d}\n"
    "  - {type: linear, out_features: 5}\n"
    "loss: {type: softmax_cross_entropy}\n";

static void test_nested_setting(void) {
  /* the query first: a from: that puts it second is refused at its item */
  static const char *const parts[] = {"t.yaml:8:56: ", "inputs: the first input is the query"};
  gp_t_load_fails("inputs: query second", rope_yaml, NULL, 0, GP_ERR_SPEC, parts, 2);
  gp_override ov[] = {{"blocks.dec.layers.0.from.0", "h"},
                      {"blocks.dec.layers.0.from.1", "p"},
                      {"blocks.dec.layers.0.inputs.0", "query"},
                      {"blocks.dec.layers.0.inputs.1", "pos"},
                      {"blocks.dec.params.theta", "500000"}};
  gp_model *m = gp_t_load("rope: {theta: $theta}, kv_heads 1, named inputs", rope_yaml, ov, 5);
  if (!m) return;
  /* in_proj_weight [(4 + 2) 8, 32] and out_proj.weight [32, 32], then the linear's 32 5 + 5 */
  CHECK(m->n_params == 48 * 32 + 32 * 32 + 32 * 5 + 5, "n_params %lld", (long long)m->n_params);
  CHECK(input_of(m, "d.att", 0) == 0 && input_of(m, "d.att", 1) == 1, "from: [h, p]");
  gp_model_free(m);
}

static const char *const anchors_yaml =
    "inputs: {x: [1, 8, 8], label: {shape: [], dtype: i32}}\n"
    "blocks:\n"
    "  a: {params: &p {c: 4}, layers: &body [{type: conv2d, out_channels: $c, kernel: 1}]}\n"
    "  b: {params: *p, layers: *body}\n"
    "layers:\n"
    "  - &c3 {type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
    "  - {<<: *c3, out_channels: 6, name: wide}\n"
    "  - *c3\n"
    "  - &pool {type: maxpool, kernel: 2}\n"
    "  - <<: [{type: conv2d, kernel: 1, out_channels: 5}, *c3]\n"
    "    name: mixed\n"
    "  - *pool\n"
    "  - {block: b, c: 7}\n"
    "  - {type: flatten}\n"
    "  - {type: linear, out_features: 3}\n"
    "loss: {<<: {type: softmax_cross_entropy}}\n";

static void test_anchors(void) {
  gp_model *m = gp_t_load("anchors, aliases, merge keys", anchors_yaml, NULL, 0);
  if (!m) return;
  CHECK_OUT(m, "0", "[4, 8, 8]");
  CHECK_OUT(m, "wide", "[6, 8, 8]"); /* explicit key wins over the merged one */
  CHECK_OUT(m, "2", "[4, 8, 8]");
  CHECK_OUT(m, "3", "[4, 4, 4]");
  CHECK_OUT(m, "mixed", "[5, 6, 6]"); /* kernel 1, out 5 from the first map; padding 1 from *c3 */
  CHECK_OUT(m, "5", "[5, 3, 3]");
  CHECK_OUT(m, "6.0", "[7, 3, 3]");
  CHECK_OUT(m, "8", "[3]");
  gp_model_free(m);
}

static void test_overrides(void) {
  static const char *const text =
      "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
      "blocks: {b: {params: {c: 2}, layers: [{type: linear, out_features: $c}]}}\n"
      "layers:\n"
      "  - &l {type: linear, out_features: 4}\n"
      "  - *l\n"
      "  - {block: b}\n"
      "  - {block: b}\n"
      "loss: softmax_cross_entropy\n"
      "train: {batch_size: 16, optimizer: {type: sgd, lr: 0.5}}\n";
  gp_override ov[] = {
      {"train.optimizer.lr", "0.25"},  {"layers.1.out_features", "6"}, {"train.steps", "100"},
      {"pipeline.micro_batches", "2"}, {"blocks.b.params.c", "5"},     {"layers.3.c", "3"},
      {"train.batch_size", "8"},       {"train.batch_size", "12"},
  };
  gp_model *m = gp_t_load("overrides", text, ov, 8);
  if (!m) return;
  CHECK(m->train.lr == 0.25, "lr %g", m->train.lr);
  CHECK_OUT(m, "0", "[4]"); /* the alias was copied, not changed in place */
  CHECK_OUT(m, "1", "[6]");
  CHECK(m->train.steps == 100, "an added key: steps %lld", (long long)m->train.steps);
  CHECK(m->pipeline.micro_batches == 2, "a created section: micro_batches %d",
        m->pipeline.micro_batches);
  CHECK_OUT(m, "2.0", "[5]");
  CHECK_OUT(m, "3.0", "[3]");
  CHECK(m->train.batch_size == 12, "the last --set wins: %lld", (long long)m->train.batch_size);
  gp_model_free(m);

  /* a section written empty is absent to the loader, and --set creates it as for a missing one */
  static const char *const empty = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                   "layers: [{type: linear, out_features: 3}]\n"
                                   "loss: softmax_cross_entropy\n"
                                   "train:\n"
                                   "pipeline: ~\n"
                                   "data: {normalize: null}\n";
  gp_override nul[] = {{"train.optimizer.lr", "0.25"},
                       {"pipeline.micro_batches", "2"},
                       {"data.normalize.mean", "0.5"},
                       {"data.normalize.std", "0.25"}};
  m = gp_t_load("overrides of empty sections", empty, nul, 4);
  if (!m) return;
  CHECK(m->train.lr == 0.25, "train: (empty): lr %g", m->train.lr);
  CHECK(m->pipeline.micro_batches == 2, "pipeline: ~: micro_batches %d", m->pipeline.micro_batches);
  CHECK(m->data.n_norm == 1 && m->data.std[0] == 0.25f, "normalize: null: %d values",
        m->data.n_norm);
  gp_model_free(m);

  /* a mapping written as just its type takes keys as the mapping would */
  static const char *const shorthand = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                       "layers: [{type: linear, out_features: 3}]\n"
                                       "loss: softmax_cross_entropy\n"
                                       "train: {optimizer: adamw, schedule: step}\n";
  gp_override typed[] = {{"train.optimizer.lr", "0.25"},
                         {"train.schedule.step_size", "3"},
                         {"loss.label_smoothing", "0.5"}};
  m = gp_t_load("overrides of a type written alone", shorthand, typed, 3);
  if (!m) return;
  CHECK(m->train.optimizer == GP_OPT_ADAMW && m->train.lr == 0.25, "optimizer: adamw: lr %g",
        m->train.lr);
  CHECK(m->train.schedule == GP_LR_STEP && m->train.step_size == 3,
        "schedule: step: step_size %lld", (long long)m->train.step_size);
  CHECK(!strcmp(m->nodes[m->n_nodes - 1].layer.type->name, "softmax_cross_entropy"),
        "loss: softmax_cross_entropy: %s", m->nodes[m->n_nodes - 1].layer.type->name);
  gp_model_free(m);

  /* a setting written ~, null or empty is not set, as a section is: path: ~ was the path "~" */
  static const char *const nulls = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                   "layers: [{type: linear, out_features: 3, bias: ~}]\n"
                                   "loss: softmax_cross_entropy\n"
                                   "data: {dataset: translation, source: en, target: es, path: ~,\n"
                                   "       vocab_file: null, eval_split: }\n"
                                   "train: {batch_size: ~, optimizer: {type: adamw, lr: ~}}\n"
                                   "pipeline: {devices: ~, schedule: null}\n";
  gp_override src = {"data.source", "~"};
  m = gp_t_load("null settings", nulls, &src, 0);
  if (!m) return;
  CHECK(!strcmp(m->data.path, "") && !strcmp(m->data.vocab_file, "spm.vocab") &&
            !strcmp(m->data.eval_split, "valid"),
        "path: ~: '%s', vocab_file: null: '%s', eval_split: '%s'", m->data.path, m->data.vocab_file,
        m->data.eval_split);
  CHECK(m->train.batch_size == 32 && m->train.lr == 1e-3, "batch_size: ~: %lld, lr: ~: %g",
        (long long)m->train.batch_size, m->train.lr);
  CHECK(!strcmp(m->pipeline.devices[0], "cpu") && m->pipeline.schedule == GP_SCHED_AUTO,
        "devices: ~: %s", m->pipeline.devices[0]);
  CHECK(m->n_params == 15, "bias: ~ is the default bias: %lld params", (long long)m->n_params);
  gp_model_free(m);
  /* normalize with synthetic data: one value, or one per channel of the input */
  static const char *const norm3 = "inputs: {x: [3, 2, 2], label: {shape: [], dtype: i32}}\n"
                                   "layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
                                   "loss: softmax_cross_entropy\n"
                                   "data: {dataset: synthetic, normalize: {mean: [0, 0, 0], "
                                   "std: [1, 2, 3]}}\n";
  m = gp_t_load("normalize per channel, synthetic data", norm3, NULL, 0);
  if (!m) return;
  CHECK(m->data.n_norm == 3 && m->data.std[2] == 3.0f, "normalize: %d values", m->data.n_norm);
  gp_model_free(m);
  /* workers' documented default, automatic, can be written */
  static const char *const autow = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                   "layers: [{type: linear, out_features: 3}]\n"
                                   "loss: softmax_cross_entropy\n"
                                   "data: {dataset: mnist, workers: auto}\n";
  gp_override two = {"data.workers", "2"};
  m = gp_t_load("workers: auto", autow, NULL, 0);
  if (!m) return;
  CHECK(m->data.workers == -1, "workers: auto: %d", m->data.workers);
  gp_model_free(m);
  m = gp_t_load("workers: 2", autow, &two, 1);
  if (!m) return;
  CHECK(m->data.workers == 2, "workers: 2: %d", m->data.workers);
  gp_model_free(m);
  /* ... also by --set: source ~ is unset, so translation data lacks it */
  static const char *const no_source[] = {"t.yaml:4:", "translation data needs source: LANG"};
  gp_t_load_fails("--set data.source=~", nulls, &src, 1, GP_ERR_SPEC, no_source, 2);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_spec_good tests/spec/fashion_cnn.yaml\n");
    return 2;
  }
  test_example(argv[1]);
  test_defaults();
  test_expressions();
  test_blocks();
  test_residual();
  test_multi_input();
  test_nested_setting();
  test_anchors();
  test_overrides();
  return gp_t_finish("spec good files");
}
