/* Model files that must be refused: each case checks the status and the message, which starts
 * with "t.yaml:LINE:COL: " where the problem was written and says what is wrong. */
#include <stdio.h>
#include <string.h>

#include "tests/spec/spec_test.h"

/* Line 1 of most cases; their layers start on line 2 or 3. */
#define H "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
#define LOSS "loss: {type: softmax_cross_entropy}\n"
#define LIN "layers: [{type: linear, out_features: 3}]\n"

typedef struct bad {
  const char *what, *yaml;
  gp_status code;
  const char *msg[5]; /* in order in the message */
} bad;

static const bad cases[] = {
    /* ---- YAML ---- */
    {"syntax error", H "layers: [\n", GP_ERR_SPEC, {"t.yaml:3:1: ", "YAML syntax error"}},
    {"syntax error: bad indentation", H "layers:\n  - {type: relu}\n bad: 1\n", GP_ERR_SPEC,
     {"t.yaml:4:", "YAML syntax error"}},
    {"empty file", "", GP_ERR_SPEC, {"t.yaml:1:1: ", "the file is empty"}},
    {"only a comment", "# nothing here\n", GP_ERR_SPEC, {"t.yaml:1:1: ", "the file is empty"}},
    {"multiple documents", H LIN LOSS "---\n" H, GP_ERR_SPEC,
     {"t.yaml:4:1: ", "a second YAML document", "exactly one document"}},
    {"root is a list", "- a\n- b\n", GP_ERR_SPEC,
     {"t.yaml:1:1: ", "the top level must be a mapping", "got a list"}},
    {"root is a scalar", "hello\n", GP_ERR_SPEC, {"t.yaml:1:1: ", "must be a mapping"}},
    {"non-string key", H "? [a, b]\n: 1\n", GP_ERR_SPEC,
     {"t.yaml:2:3: ", "a key must be a plain name, not a list"}},
    {"mapping key", H "{a: 1}: 2\n", GP_ERR_SPEC, {"t.yaml:2:1: ", "not a mapping"}},
    {"duplicate key", H LIN LOSS "train: {}\ntrain: {}\n", GP_ERR_SPEC,
     {"t.yaml:5:1: ", "duplicate key 'train' (first at line 4)"}},
    {"duplicate key in a flow mapping", H "layers: [{type: relu, type: tanh}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:23: ", "duplicate key 'type'"}},
    {"undefined alias", H "layers: *nope\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:9: ", "YAML syntax error", "undefined alias"}},
    {"recursive alias", H "layers: &a [*a]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:9: ", "alias refers to a node that contains it"}},
    {"merge of a scalar", H "layers: [{<<: 3, type: relu}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:15: ", "the merge key '<<' takes a mapping"}},

    /* ---- keys ---- */
    {"unknown top-level key", H "layer:\n  - {type: linear, out_features: 2}\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:1: ", "unknown key 'layer' at the top level; did you mean 'layers'?"}},
    {"unknown top-level key, no suggestion", H LIN LOSS "zzzz: 1\n", GP_ERR_SPEC,
     {"t.yaml:4:1: ", "unknown key 'zzzz' at the top level"}},
    {"missing inputs", LIN LOSS, GP_ERR_SPEC, {"t.yaml:1:1: ", "missing required key 'inputs'"}},
    {"missing layers", H LOSS, GP_ERR_SPEC, {"t.yaml:1:1: ", "missing required key 'layers'"}},
    {"missing loss", H LIN, GP_ERR_SPEC, {"t.yaml:1:1: ", "missing required key 'loss'"}},
    {"unknown layer type", H "layers:\n  - {type: conv, out_channels: 2}\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:3:12: ", "unknown layer type 'conv'; did you mean 'conv2d'?"}},
    {"a line break in a value", H "layers: [{type: \"re\\nlu\"}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:17: ", "unknown layer type 're\\nlu'"}},
    {"unknown layer type, no suggestion", H "layers: [{type: qqqqqqqq}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:17: ", "unknown layer type 'qqqqqqqq'"}},
    {"unknown layer key", H "layers:\n  - {type: linear, out_features: 2, bais: false}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:43: ", "unknown key 'bais' for linear; did you mean 'bias'?"}},
    {"misspelt required layer key", H "layers:\n  - {type: linear, out_featurs: 2}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:33: ", "unknown key 'out_featurs'", "did you mean 'out_features'?"}},
    {"misspelt structural key", H "layers:\n  - {type: relu, nmae: r}\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:3:24: ", "unknown key 'nmae' for relu; did you mean 'name'?"}},
    {"type and block", H "layers: [{type: relu, block: b}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:10: ", "either type: (a layer) or block: (a block), not both"}},
    {"neither type nor block", H "layers: [{name: a}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:10: ", "an entry needs type: (a layer) or block: (a block)"}},
    {"entry is not a mapping", H "layers: [relu]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:10: ", "a layers: entry must be a mapping, got a single value"}},
    {"unknown data key", H LIN LOSS "data: {dataset: mnist, agument: true}\n", GP_ERR_SPEC,
     {"t.yaml:4:33: ", "unknown key 'agument' for data; did you mean 'augment'?"}},
    {"unknown train key", H LIN LOSS "train:\n  batchsize: 3\n", GP_ERR_SPEC,
     {"t.yaml:5:14: ", "unknown key 'batchsize' for train; did you mean 'batch_size'?"}},
    {"unknown optimizer key", H LIN LOSS "train: {optimizer: {type: sgd, momentun: 0.9}}\n",
     GP_ERR_SPEC, {"t.yaml:4:42: ", "unknown key 'momentun' for sgd; did you mean 'momentum'?"}},
    {"unknown optimizer", H LIN LOSS "train: {optimizer: adam}\n", GP_ERR_SPEC,
     {"t.yaml:4:20: ", "unknown value 'adam'; did you mean 'adamw'?"}},
    {"unknown pipeline key", H LIN LOSS "pipeline: {stage: 1}\n", GP_ERR_SPEC,
     {"t.yaml:4:19: ", "unknown key 'stage' for pipeline; did you mean 'stages'?"}},
    {"unknown input key", "inputs: {x: {shape: [4], dtyp: i32}}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:26: ", "unknown key 'dtyp' for an input; did you mean 'dtype'?"}},
    {"unknown dtype", "inputs: {x: {shape: [4], dtype: i31}}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:33: ", "unknown type 'i31'; did you mean 'i32'?"}},

    /* ---- values ---- */
    {"negative out_features", H "layers:\n  - {type: linear, out_features: -3}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:34: ", "out_features: -3 is out of range"}},
    {"non-integer out_features", H "layers: [{type: linear, out_features: many}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "out_features: expected an integer, got 'many'"}},
    {"batch_size 0", H LIN LOSS "train: {batch_size: 0}\n", GP_ERR_SPEC,
     {"t.yaml:4:21: ", "batch_size: 0 is out of range"}},
    {"lr 0", H LIN LOSS "train: {optimizer: {type: sgd, lr: 0}}\n", GP_ERR_SPEC,
     {"t.yaml:4:36: ", "lr: must be greater than 0, got 0"}},
    {"momentum 1", H LIN LOSS "train: {optimizer: {type: sgd, momentum: 1}}\n", GP_ERR_SPEC,
     {"t.yaml:4:42: ", "momentum: must be in [0, 1), got 1"}},
    {"nesterov without momentum", H LIN LOSS "train: {optimizer: {type: sgd, nesterov: true}}\n",
     GP_ERR_SPEC, {"t.yaml:4:42: ", "nesterov: needs momentum greater than 0"}},
    {"betas out of range", H LIN LOSS "train: {optimizer: {type: adamw, betas: [0.9, 1.5]}}\n",
     GP_ERR_SPEC, {"t.yaml:4:41: ", "betas: must be in [0, 1), got 1.5"}},
    {"step schedule without step_size", H LIN LOSS "train: {schedule: step}\n", GP_ERR_SPEC,
     {"t.yaml:4:19: ", "missing required key 'step_size'"}},
    {"min_lr above lr", H LIN LOSS "train: {schedule: {type: cosine, min_lr: 1}}\n",
     GP_ERR_SPEC, {"t.yaml:4:42: ", "min_lr: 1 is more than lr 0.1"}},
    {"normalize lengths", H LIN LOSS "data: {normalize: {mean: [0.5, 0.5], std: [0.2]}}\n",
     GP_ERR_SPEC, {"t.yaml:4:", "mean and std need the same number of values", "got 2 and 1"}},
    {"normalize std 0", H LIN LOSS "data: {normalize: {mean: [0.5], std: [0]}}\n", GP_ERR_SPEC,
     {"t.yaml:4:", "std: every value must be greater than 0"}},
    {"unknown dataset", H LIN LOSS "data: {dataset: fashion_mnist}\n", GP_ERR_SPEC,
     {"t.yaml:4:17: ", "unknown value 'fashion_mnist'; did you mean 'fashion-mnist'?"}},
    {"micro_batches above batch_size", H LIN LOSS "train: {batch_size: 4}\npipeline: {micro_batches: 8}\n",
     GP_ERR_SPEC, {"t.yaml:5:27: ", "micro_batches: 8 is more than batch_size 4"}},
    {"more stages than units", H LIN LOSS "pipeline: {stages: 2}\n", GP_ERR_SPEC,
     {"t.yaml:4:20: ", "2 stages but the model has only 1 unit"}},
    {"balance count", H "layers: [{type: relu}, {type: linear, out_features: 3}]\n" LOSS
                        "pipeline: {stages: 2, balance: [1, 1, 1]}\n",
     GP_ERR_SPEC, {"t.yaml:4:32: ", "balance: expected 2 values, got 3"}},
    {"balance sum", H "layers: [{type: relu}, {type: linear, out_features: 3}]\n" LOSS
                      "pipeline: {stages: 2, balance: [1, 2]}\n",
     GP_ERR_SPEC, {"t.yaml:4:32: ", "balance: the stages hold 3 units in all", "has 2 units"}},
    {"balance entry 0", H "layers: [{type: relu}, {type: linear, out_features: 3}]\n" LOSS
                          "pipeline: {stages: 2, balance: [0, 2]}\n",
     GP_ERR_SPEC, {"t.yaml:4:33: ", "balance: 0 is out of range"}},
    {"devices count", H "layers: [{type: relu}, {type: linear, out_features: 3}]\n" LOSS
                        "pipeline: {stages: 2, devices: [cpu, cpu, cpu]}\n",
     GP_ERR_SPEC, {"t.yaml:4:32: ", "3 devices for 2 stages"}},
    {"bad device", H LIN LOSS "pipeline: {devices: [gpu0]}\n", GP_ERR_SPEC,
     {"t.yaml:4:22: ", "unknown device 'gpu0'"}},
    {"bad input name", "inputs: {'a b': [4]}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:10: ", "'a b' is not a valid name"}},
    {"bad name", H "layers: [{type: relu, name: a.b}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:29: ", "'a.b' is not a valid name"}},
    {"zero dimension", "inputs: {x: [4, 0]}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:17: ", "input 'x': a dimension must be a positive integer, got '0'"}},
    {"too many inputs to a layer", H "layers: [{type: relu, from: [x, x]}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:10: ", "relu takes 1 input, got 2"}},
    {"too few inputs to add", H "layers: [{type: add}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:10: ", "add takes 2 to 8 inputs, got 1", "from:"}},
    {"loss takes a model input", H "layers: [{type: relu}]\nloss: {type: softmax_cross_entropy, "
                                   "from: [x, label]}\n",
     GP_ERR_SPEC, {"t.yaml:3:7: ", "first input must be a layer's output", "'x'"}},
    {"repeat 0", H "layers: [{type: relu, repeat: 0}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:31: ", "repeat: expected a positive integer, got '0'"}},

    /* ---- shapes ---- */
    {"shape mismatch", H "layers:\n  - {type: linear, out_features: 3, name: a}\n"
                         "  - {type: add, from: [x, a]}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:4:5: ", "add: ", "[3]", "[4]"}},
    {"shape mismatch in a block",
     H "blocks:\n  b:\n    layers:\n      - {type: linear, out_features: 5, name: fc}\n"
       "      - {type: add, from: [fc, in]}\n"
       "layers: [{type: relu}, {block: b}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:6:9: ", "add: ", "[4]", "[5]", "(in block 'b' used at line 7)"}},
    {"conv on a flat input", H "layers: [{type: conv2d, out_channels: 2, kernel: 3}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:10: conv2d", "[4]"}},
    {"dims overflow", "inputs: {x: [1000000000, 1000000000, 1000000000]}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:13: ", "input 'x': ", "[1000000000, 1000000000, 1000000000]",
      "has more than"}},
    {"dims overflow int64", "inputs: {x: [9223372036854775807, 9223372036854775807]}\n" LIN LOSS,
     GP_ERR_SPEC, {"t.yaml:1:13: ", "has more than"}},
    {"dims beyond int64", "inputs: {x: [99999999999999999999999]}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:1:14: ", "too large"}},
    {"huge parameter", "inputs: {x: [1000000000], label: {shape: [], dtype: i32}}\n"
                       "layers: [{type: linear, out_features: 1000000000}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:10: ", "linear: ", "more than 2^40"}},

    /* ---- names and references ---- */
    {"undefined reference", H "layers:\n  - {type: relu, from: nope}\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:3:24: ", "from: no tensor named 'nope' in the top level"}},
    {"undefined reference, suggestion", H "layers:\n  - {type: relu, name: hidden}\n"
                                          "  - {type: relu, from: hiden}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:4:24: ", "no tensor named 'hiden'", "did you mean 'hidden'?"}},
    {"later reference", H "layers:\n  - {type: relu, from: b}\n  - {type: relu, name: b}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:24: ", "from: 'b' is defined later (line 4); "}},
    {"self reference", H "layers:\n  - {type: relu, name: r, from: r}\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:3:33: ", "'r' is this entry's own output", "cycle"}},
    {"outer name inside a block",
     H "blocks: {b: {layers: [{type: add, from: [in, x]}]}}\nlayers: [{block: b}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:46: ", "no tensor named 'x' in block 'b'"}},
    {"duplicate unit name", H "layers:\n  - {type: relu, name: a}\n  - {type: relu, name: a}\n"
                              "  - {type: linear, out_features: 3}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:4:5: ", "unit name 'a' is used twice"}},
    {"name equal to a unit index", H "layers:\n  - {type: relu}\n  - {type: relu, name: '0'}\n"
                                     "  - {type: linear, out_features: 3}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:4:5: ", "unit name '0' is used twice"}},
    {"duplicate path in a block",
     H "blocks: {b: {layers: [{type: relu, name: '1'}, {type: relu}]}}\n"
       "layers: [{block: b}, {type: linear, out_features: 3}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:", "layer path '0.1' is used twice (first by the layer at line 2)"}},
    {"loss name clash", H "layers: [{type: linear, out_features: 3, name: loss}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:7: ", "layer path 'loss' is used twice"}},

    /* ---- blocks ---- */
    {"unknown block", H "blocks: {conv_bn: {layers: [{type: relu}]}}\n"
                        "layers: [{block: convbn}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:18: ", "unknown block 'convbn'; did you mean 'conv_bn'?"}},
    {"missing required param", H "blocks:\n  b:\n    params: {c: ~}\n"
                                 "    layers: [{type: linear, out_features: $c}]\n"
                                 "layers:\n  - {block: b}\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:7:5: ", "block 'b' needs parameter 'c'", "no default"}},
    {"unknown param", H "blocks: {b: {params: {c: 1}, layers: [{type: linear, out_features: $c}]}}\n"
                        "layers: [{block: b, cc: 3}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:21: ", "block 'b' has no parameter 'cc'; did you mean 'c'?"}},
    {"unknown $param in a block", H "blocks: {b: {params: {chan: 1}, layers: [{type: linear, "
                                    "out_features: $chn}]}}\nlayers: [{block: b}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:71: ", "block 'b' has no parameter 'chn'; did you mean 'chan'?"}},
    {"$param at the top level", H "layers: [{type: linear, out_features: $c}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "'$c': parameters can only be used inside a block"}},
    {"block recursion", H "blocks:\n  a: {layers: [{block: b}]}\n  b: {layers: [{block: a}]}\n"
                          "layers: [{block: a}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:4:24: ", "block 'a' uses itself (a -> b -> a)"}},
    {"block self recursion", H "blocks: {a: {layers: [{block: a}]}}\nlayers: [{block: a}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:31: ", "block 'a' uses itself (a -> a)"}},
    {"block input count", H "blocks: {b: {inputs: [p, q], layers: [{type: add, from: [p, q]}]}}\n"
                            "layers: [{block: b}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:3:10: ", "block 'b' takes 2 inputs (p, q), got 1", "from:"}},
    {"block with no layers", H "blocks: {b: {layers: []}}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:2:22: ", "block 'b' has no layers"}},
    {"unknown block key", H "blocks: {b: {layer: [{type: relu}]}}\n" LIN LOSS, GP_ERR_SPEC,
     {"t.yaml:2:14: ", "unknown key 'layer' in block 'b'; did you mean 'layers'?"}},
    {"param named like an entry key", H "blocks: {b: {params: {name: 1}, layers: [{type: relu}]}}\n"
                                        LIN LOSS,
     GP_ERR_SPEC, {"t.yaml:2:23: ", "'name' is a key of every block entry"}},

    /* ---- ${expr} ---- */
    {"division by zero", H "layers: [{type: linear, out_features: '${4 // (2 - 2)}'}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "in '${4 // (2 - 2)}': division by zero"}},
    {"expression syntax", H "layers: [{type: linear, out_features: '${3 *}'}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "in '${3 *}': expected a number, a parameter or '('"}},
    {"unbalanced parenthesis", H "layers: [{type: linear, out_features: '${(3 + 1}'}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "expected ')' at the end"}},
    {"non-integer result", H "layers: [{type: linear, out_features: '${3 / 2}'}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "out_features: expected an integer, got '1.5'"}},
    {"integer overflow", H "layers: [{type: linear, out_features: '${9223372036854775807 + 1}'}]\n"
                         LOSS,
     GP_ERR_SPEC, {"t.yaml:2:39: ", "integer overflow"}},
    {"non-numeric parameter", H "blocks: {b: {params: {c: abc}, layers: [{type: linear, "
                                "out_features: '${c + 1}'}]}}\nlayers: [{block: b}]\n" LOSS,
     GP_ERR_SPEC, {"t.yaml:2:70: ", "parameter 'c' is 'abc', not a number"}},
    {"empty expression", H "layers: [{type: linear, out_features: '${ }'}]\n" LOSS, GP_ERR_SPEC,
     {"t.yaml:2:39: ", "an empty expression"}},
};

static void test_io(void) {
  gp_model *m = (gp_model *)1;
  gp_status s = gp_model_load("/nonexistent/dir/model.yaml", NULL, 0, &m);
  CHECK(s == GP_ERR_IO && m == NULL, "missing file: %s %s", gp_status_name(s),
        gp_error_message());
  CHECK(strstr(gp_error_message(), "/nonexistent/dir/model.yaml"), "names the file: %s",
        gp_error_message());
  s = gp_model_load("/", NULL, 0, &m);
  CHECK(s == GP_ERR_IO, "a directory: %s %s", gp_status_name(s), gp_error_message());
}

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int n = 0;
    while (n < 5 && cases[i].msg[n]) n++;
    gp_t_load_fails(cases[i].what, cases[i].yaml, NULL, 0, cases[i].code, cases[i].msg, n);
  }
  test_io();
  return gp_t_finish("spec bad files");
}
