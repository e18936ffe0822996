/* The layer registry: every layer type by the name a model file uses. A type is listed
 * here only once it works end to end (configure, shape, cost, forward, backward). */
#include <string.h>

#include "layers/layers.h"

static const gp_layer_type *const types[] = {
    &gp_layer_identity,       &gp_layer_relu,      &gp_layer_gelu,
    &gp_layer_tanh,           &gp_layer_sigmoid,   &gp_layer_flatten,
    &gp_layer_linear,         &gp_layer_conv2d,    &gp_layer_batchnorm,
    &gp_layer_layernorm,      &gp_layer_maxpool,   &gp_layer_avgpool,
    &gp_layer_global_avgpool, &gp_layer_dropout,   &gp_layer_add,
    &gp_layer_concat,         &gp_layer_pad,       &gp_layer_softmax_cross_entropy,
    &gp_layer_pad2d,          &gp_layer_slice,     &gp_layer_embedding,
    &gp_layer_positional,     &gp_layer_attention,
};

#define N_TYPES (sizeof types / sizeof types[0])

static const char *const names[] = {
    "identity",       "relu",    "gelu",      "tanh",       "sigmoid",   "flatten",
    "linear",         "conv2d",  "batchnorm", "layernorm",  "maxpool",   "avgpool",
    "global_avgpool", "dropout", "add",       "concat",     "pad",       "softmax_cross_entropy",
    "pad2d",          "slice",   "embedding", "positional", "attention", NULL,
};

_Static_assert(sizeof names / sizeof names[0] == N_TYPES + 1, "one name per registered type");

const gp_layer_type *gp_layer_type_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < N_TYPES; i++)
    if (strcmp(types[i]->name, name) == 0) return types[i];
  return NULL;
}

const char *const *gp_layer_type_names(void) {
  return names;
}
