/* --set overrides that must be refused: a bad key path is a usage error that names the
 * override and suggests the nearest key; a bad value is a model-file error at the value. */
#include <stdio.h>
#include <string.h>

#include "tests/spec/spec_test.h"

static const char *const text = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                "layers:\n"
                                "  - {type: linear, out_features: 3}\n"
                                "loss: {type: softmax_cross_entropy}\n"
                                "train:\n"
                                "  batch_size: 8\n"
                                "  optimizer: {type: sgd, lr: 0.1}\n";

typedef struct bad_set {
  const char *path, *value;
  gp_status code;
  const char *msg[3];
} bad_set;

static const bad_set cases[] = {
    {"train.optimzer.lr",
     "0.1",
     GP_ERR_USAGE,
     {"--set train.optimzer.lr=0.1: no key 'optimzer' in 'train'; did you mean 'optimizer'?"}},
    {"trian.lr",
     "0.1",
     GP_ERR_USAGE,
     {"--set trian.lr=0.1: no key 'trian' at the top level; did you mean 'train'?"}},
    {"pipline.stages", "2", GP_ERR_USAGE, {"no key 'pipline' at the top level", "'pipeline'?"}},
    {"layers.9.out_features",
     "2",
     GP_ERR_USAGE,
     {"--set layers.9.out_features=2: ", "'layers' has 1 entry (0 to 0); there is no entry 9"}},
    {"layers.99999999999999999999.out_features", /* it said entry 9223372036854775807 */
     "2",
     GP_ERR_USAGE,
     {"'layers' has 1 entry (0 to 0); there is no entry 99999999999999999999"}},
    {"layers.first.out_features",
     "2",
     GP_ERR_USAGE,
     {"'layers' is a list: expected an index 0 to 0, got 'first'"}},
    {"layers.-1.out_features", "2", GP_ERR_USAGE, {"expected an index", "got '-1'"}},
    {"train",
     "3",
     GP_ERR_USAGE,
     {"--set train=3: 'train' is a mapping; --set changes single values only"}},
    {"layers.0", "relu", GP_ERR_USAGE, {"'layers.0' is a mapping"}},
    {"layers", "relu", GP_ERR_USAGE, {"'layers' is a list", "entries by index"}},
    {"train.batch_size.x",
     "1",
     GP_ERR_USAGE,
     {"'train.batch_size' is a single value; it has no 'x'"}},
    {"train..lr", "1", GP_ERR_USAGE, {"--set train..lr=1: ", "no empty part"}},
    {"", "1", GP_ERR_USAGE, {"--set =1: ", "no empty part"}},
    {"data.normalize.mean.0", "0.5", GP_ERR_USAGE, {"no key 'mean' in 'data.normalize'"}},
    /* a good path with a bad value: the model file's check, at the value's place, naming the
     * --set (the file holds another value there) */
    {"train.batch_size",
     "0",
     GP_ERR_SPEC,
     {"t.yaml:6:15: ", "batch_size: 0 is out of range", "(set by --set train.batch_size=0)"}},
    {"layers.0.type",
     "conv",
     GP_ERR_SPEC,
     {"t.yaml:3:12: ", "unknown layer type 'conv'", "(set by --set layers.0.type=conv)"}},
    {"layers.0.out_features",
     "x",
     GP_ERR_SPEC,
     {"t.yaml:3:34: out_features: expected an integer", "(set by --set layers.0.out_features=x)"}},
    /* an empty value is text, not a null that would take the default: a shell's unset
     * $VAR is refused */
    {"train.batch_size",
     "",
     GP_ERR_SPEC,
     {"t.yaml:6:15: ", "batch_size: expected an integer, got ''",
      "(set by --set train.batch_size=)"}},
    /* an added key is checked like one written in the file */
    {"train.optimizer.momentun",
     "0.9",
     GP_ERR_SPEC,
     {"unknown key 'momentun' for sgd", "(set by --set train.optimizer.momentun=0.9)"}},
    /* a --set value is bytes, not the file's UTF-8: this name was written into a safetensors
     * header and a plan, which gpipe then refused to read back */
    {"name", "caf\xe9", GP_ERR_SPEC, {"t.yaml:", "name: byte 0xe9 at 3 is not UTF-8 text"}},
    {"name", "\xc3", GP_ERR_SPEC, {"t.yaml:", "name: byte 0xc3 at 0 is not UTF-8 text"}},
    {"name", "a\xef\xbf\xbf", GP_ERR_SPEC, {"t.yaml:", "name: U+FFFF is not a character"}},
};

/* The file's own error (one message part), which must not be blamed on a --set. */
static void fails_naming_no_set(const char *what, const char *bad, const gp_override *ov, int n_ov,
                                const char *const *msg) {
  gp_t_load_fails(what, bad, ov, n_ov, GP_ERR_SPEC, msg, 1);
  if (strstr(gp_error_message(), "--set"))
    gp_t_fail(__FILE__, __LINE__, what, "names a --set: %s", gp_error_message());
}

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gp_override ov[2] = {{"train.batch_size", "4"}, {cases[i].path, cases[i].value}};
    int n = 0;
    while (n < 3 && cases[i].msg[n])
      n++;
    char what[128];
    snprintf(what, sizeof what, "--set %s=%s", cases[i].path, cases[i].value);
    gp_t_load_fails(what, text, ov, 2, cases[i].code, cases[i].msg, n);
  }
  /* an error elsewhere in the file names no --set */
  static const char *const bad_text = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                      "layers:\n"
                                      "  - {type: linear, out_features: 0}\n"
                                      "loss: {type: softmax_cross_entropy}\n";
  gp_override lr = {"train.optimizer.lr", "0.5"};
  static const char *const elsewhere[] = {"t.yaml:3:34: out_features: 0 is out of range"};
  fails_naming_no_set("an error away from the --set", bad_text, &lr, 1, elsewhere);
  /* a key a --set adds takes its mapping's place, where the file's own errors are reported too
   * (a missing or misspelt key): those name no --set */
  static const char *const no_inputs = "inptus: {x: [4], label: {shape: [], dtype: i32}}\n"
                                       "layers: [{type: linear, out_features: 3}]\n"
                                       "loss: {type: softmax_cross_entropy}\n";
  static const char *const misspelt[] = {"t.yaml:1:1: unknown key 'inptus' at the top level"};
  gp_override added[] = {{"pipeline.stages", "1"}, {"train.steps", "5"}};
  fails_naming_no_set("an error at the place of an added key", no_inputs, added, 2, misspelt);
  /* a key set under a type written alone is read (and checked) as the mapping's would be */
  static const char *const loss_type = "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"
                                       "layers: [{type: linear, out_features: 3}]\n"
                                       "loss: softmax_cross_entropy\n";
  gp_override smooth = {"loss.label_smoothing", "1"};
  static const char *const below[] = {"t.yaml:3:7: label_smoothing: 1 is out of range [0, 1)",
                                      "(set by --set loss.label_smoothing=1)"};
  gp_t_load_fails("a key under 'loss: TYPE'", loss_type, &smooth, 1, GP_ERR_SPEC, below, 2);
  /* NULL parts are refused, not dereferenced */
  gp_override null_ov = {NULL, "1"};
  static const char *const parts[] = {"--set: expected KEY.PATH=VALUE"};
  gp_t_load_fails("NULL path", text, &null_ov, 1, GP_ERR_USAGE, parts, 1);
  return gp_t_finish("spec --set");
}
