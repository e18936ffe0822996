/* The rules of settings' numbers and keys, message by message: a range check states the rule it
 * applied, open bounds as open ("p: 1 is out of range [0, 1)", "lr: 0 must be > 0"), and
 * values at a closed bound load; a number that is 0 or beyond float32's range where a positive
 * one is needed is refused where it is written; an unknown key with no near match lists the
 * keys there are. Each message is compared whole. */
#include <stdio.h>
#include <string.h>

#include "tests/spec/spec_test.h"

#define H "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
#define LOSS "loss: {type: softmax_cross_entropy}\n"
#define LIN "layers: [{type: linear, out_features: 3}]\n"
/* a layer before the classifier: "{type: ..., ...}" */
#define BEFORE(layer) "layers: [" layer ", {type: linear, out_features: 3}]\n"

typedef struct refused {
  const char *what, *yaml, *msg; /* msg: the whole message */
} refused;

static const refused cases[] = {
    /* ---- unknown keys: a near one is suggested, else the keys there are ---- */
    {"unknown layer key, none near", H BEFORE("{type: dropout, zzzz: 1}") LOSS,
     "t.yaml:2:32: unknown key 'zzzz' for dropout (its keys: p, name, from, repeat, type)"},
    {"unknown key of a layer without settings", H BEFORE("{type: relu, qqqq: 1}") LOSS,
     "t.yaml:2:29: unknown key 'qqqq' for relu (its keys: name, from, repeat, type)"},
    {"unknown key of linear", H "layers: [{type: linear, out_features: 3, zzzz: 1}]\n" LOSS,
     "t.yaml:2:48: unknown key 'zzzz' for linear (its keys: out_features, bias, init, std, name, "
     "from, repeat, type)"},
    {"a near key is still suggested", H "layers: [{type: linear, out_features: 3, bais: 1}]\n" LOSS,
     "t.yaml:2:48: unknown key 'bais' for linear; did you mean 'bias'?"},
    {"unknown optimizer key", H LIN LOSS "train: {optimizer: {type: sgd, zzzz: 1}}\n",
     "t.yaml:4:38: unknown key 'zzzz' for sgd (its keys: type, lr, weight_decay, momentum, "
     "nesterov)"},

    /* ---- ranges: the message states the rule, open bounds as open ---- */
    {"p 1", H BEFORE("{type: dropout, p: 1}") LOSS, "t.yaml:2:29: p: 1 is out of range [0, 1)"},
    {"p 1.5", H BEFORE("{type: dropout, p: 1.5}") LOSS,
     "t.yaml:2:29: p: 1.5 is out of range [0, 1)"},
    {"p -0.1", H BEFORE("{type: dropout, p: -0.1}") LOSS,
     "t.yaml:2:29: p: -0.1 is out of range [0, 1)"},
    {"label_smoothing 1", H LIN "loss: {type: softmax_cross_entropy, label_smoothing: 1}\n",
     "t.yaml:3:54: label_smoothing: 1 is out of range [0, 1)"},
    {"ignore_index 0", H LIN "loss: {type: softmax_cross_entropy, ignore_index: 0}\n",
     "t.yaml:3:51: ignore_index: 0 is out of range [-2147483648, -1]"},
    {"batchnorm momentum 1.5", H BEFORE("{type: batchnorm, momentum: 1.5}") LOSS,
     "t.yaml:2:38: momentum: 1.5 is out of range [0, 1]"},
    {"batchnorm eps 0", H BEFORE("{type: batchnorm, eps: 0}") LOSS,
     "t.yaml:2:33: eps: 0 is out of range (0, 1]"},
    {"lr -1", H LIN LOSS "train: {optimizer: {lr: -1}}\n", "t.yaml:4:25: lr: -1 must be > 0"},
    {"lr 0", H LIN LOSS "train: {optimizer: {lr: 0}}\n", "t.yaml:4:25: lr: 0 must be > 0"},
    {"adamw eps 0", H LIN LOSS "train: {optimizer: {type: adamw, eps: 0}}\n",
     "t.yaml:4:39: eps: 0 must be > 0"},
    {"weight_decay -1", H LIN LOSS "train: {optimizer: {weight_decay: -1}}\n",
     "t.yaml:4:35: weight_decay: -1 must be >= 0"},
    {"momentum -0.5", H LIN LOSS "train: {optimizer: {momentum: -0.5}}\n",
     "t.yaml:4:31: momentum: -0.5 is out of range [0, 1)"},
    {"rmsprop alpha 1", H LIN LOSS "train: {optimizer: {type: rmsprop, alpha: 1}}\n",
     "t.yaml:4:43: alpha: 1 is out of range [0, 1)"},
    {"betas item 1", H LIN LOSS "train: {optimizer: {type: adamw, betas: [0.9, 1]}}\n",
     "t.yaml:4:47: betas: 1 is out of range [0, 1)"},
    {"gamma 1.5", H LIN LOSS "train: {schedule: {type: step, step_size: 1, gamma: 1.5}}\n",
     "t.yaml:4:53: gamma: 1.5 is out of range (0, 1]"},
    {"gamma 0", H LIN LOSS "train: {schedule: {type: step, step_size: 1, gamma: 0}}\n",
     "t.yaml:4:53: gamma: 0 is out of range (0, 1]"},
    {"min_lr -1", H LIN LOSS "train: {schedule: {type: cosine, min_lr: -1}}\n",
     "t.yaml:4:42: min_lr: -1 must be >= 0"},
    {"clip_grad_norm -1", H LIN LOSS "train: {clip_grad_norm: -1}\n",
     "t.yaml:4:25: clip_grad_norm: -1 must be >= 0"},
    {"batch_size 0", H LIN LOSS "train: {batch_size: 0}\n",
     "t.yaml:4:21: batch_size: 0 is out of range [1, 16777216]"},
    {"seed -1", H LIN LOSS "train: {seed: -1}\n", "t.yaml:4:15: seed: -1 must be >= 0"},
    {"seed beyond 64 bits", H LIN LOSS "train: {seed: 99999999999999999999}\n",
     "t.yaml:4:15: seed: 99999999999999999999 is beyond 64-bit integers (at most "
     "9223372036854775807)"},
    {"a limit far below 0",
     H LIN LOSS "data: {dataset: mnist, train_limit: -99999999999999999999}\n",
     "t.yaml:4:37: train_limit: -99999999999999999999 must be >= 0"},
    {"decode_len_a above 1e6",
     H LIN LOSS "data: {dataset: translation, source: en, target: es, decode_len_a: 1000001}\n",
     "t.yaml:4:68: decode_len_a: 1000001 is out of range [0, 1000000]"},

    /* ---- a positive number that is 0, or infinite, as float32 ---- */
    {"batchnorm eps 1e-50", H BEFORE("{type: batchnorm, eps: 1e-50}") LOSS,
     "t.yaml:2:33: eps: 1e-50 is out of range (0, 1] (1e-50 is 0 as float32)"},
    {"layernorm eps 1e-50", H BEFORE("{type: layernorm, eps: 1e-50}") LOSS,
     "t.yaml:2:33: eps: 1e-50 is out of range (0, 1] (1e-50 is 0 as float32)"},
    {"normalize std 1e-50", H LIN LOSS "data: {normalize: {mean: [0.5], std: [1e-50]}}\n",
     "t.yaml:4:39: std: 1e-50 must be > 0 (1e-50 is 0 as float32)"},
    {"normalize std, the second item",
     "inputs: {x: [2, 2, 2], label: {shape: [], dtype: i32}}\n"
     "layers: [{type: flatten}, {type: linear, out_features: 3}]\n" LOSS
     "data: {normalize: {mean: [0.5, 0.5], std: [1, 1e-46]}}\n",
     "t.yaml:4:47: std: 1e-46 must be > 0 (1e-46 is 0 as float32)"},
    {"lr 1e-50", H LIN LOSS "train: {optimizer: {lr: 1e-50}}\n",
     "t.yaml:4:25: lr: 1e-50 must be > 0 (1e-50 is 0 as float32)"},
    {"adamw eps 1e-50", H LIN LOSS "train: {optimizer: {type: adamw, eps: 1e-50}}\n",
     "t.yaml:4:39: eps: 1e-50 must be > 0 (1e-50 is 0 as float32)"},
    {"batchnorm eps 1e39", H BEFORE("{type: batchnorm, eps: 1e39}") LOSS,
     "t.yaml:2:33: eps: 1e39 is beyond float32's range (about 3.4e38)"},
    {"normalize std 1e39", H LIN LOSS "data: {normalize: {mean: [0.5], std: [1e39]}}\n",
     "t.yaml:4:39: std: 1e39 is beyond float32's range (about 3.4e38)"},
    {"lr 1e39", H LIN LOSS "train: {optimizer: {lr: 1e39}}\n",
     "t.yaml:4:25: lr: 1e39 is beyond float32's range (about 3.4e38)"},
};

/* Values at a closed bound, or just inside an open one as float32, load. */
static const char *const loads[] = {
    H BEFORE("{type: dropout, p: 0}") LOSS,
    H BEFORE("{type: dropout, p: 0.9999999}") LOSS,
    H BEFORE("{type: batchnorm, eps: 1, momentum: 1}") LOSS,
    H BEFORE("{type: batchnorm, eps: 1e-45, momentum: 0}") LOSS, /* float32's least: not 0 */
    H BEFORE("{type: layernorm, eps: 1}") LOSS,
    H LIN "loss: {type: softmax_cross_entropy, ignore_index: -1}\n",
    H LIN LOSS "train: {optimizer: {lr: 1e-45, weight_decay: 0, momentum: 0}}\n",
    H LIN LOSS "train: {schedule: {type: step, step_size: 1, gamma: 1}}\n",
    H LIN LOSS "train: {batch_size: 16777216, seed: 9223372036854775807}\n",
    H LIN LOSS "data: {normalize: {mean: [0.5], std: [3.4e38]}}\n",
};

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const refused *c = &cases[i];
    if (gp_t_load_fails(c->what, c->yaml, NULL, 0, GP_ERR_SPEC, &c->msg, 1))
      CHECK(strcmp(gp_error_message(), c->msg) == 0, "%s: the message is '%s', not '%s'", c->what,
            gp_error_message(), c->msg);
  }
  for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
    char what[32];
    snprintf(what, sizeof what, "loads %zu", i);
    gp_model_free(gp_t_load(what, loads[i], NULL, 0));
  }
  return gp_t_finish("spec ranges");
}
