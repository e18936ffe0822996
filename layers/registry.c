/* The layer registry: every layer type by the name a model file uses. A type is listed
 * here only once it works end to end (configure, shape, cost, forward, backward). */
#include <pthread.h>
#include <string.h>

#include "layers/layers.h"

static const gp_layer_type *const types[] = {
    &gp_layer_identity,
    &gp_layer_relu,
    &gp_layer_gelu,
    &gp_layer_tanh,
    &gp_layer_sigmoid,
    &gp_layer_flatten,
    &gp_layer_linear,
    &gp_layer_conv2d,
    &gp_layer_batchnorm,
    &gp_layer_layernorm,
    &gp_layer_maxpool,
    &gp_layer_avgpool,
    &gp_layer_global_avgpool,
    &gp_layer_dropout,
    &gp_layer_add,
    &gp_layer_concat,
    &gp_layer_pad,
    &gp_layer_softmax_cross_entropy,
    &gp_layer_pad2d,
    &gp_layer_slice,
    &gp_layer_embedding,
    &gp_layer_positional,
    &gp_layer_attention,
    &gp_layer_rmsnorm,
    &gp_layer_silu,
    &gp_layer_mul,
    &gp_layer_reshape,
    &gp_layer_permute,
    &gp_layer_groupnorm,
    &gp_layer_mse,
    &gp_layer_l1,
    &gp_layer_bce_with_logits,
    &gp_layer_conv_transpose2d,
    &gp_layer_upsample,
    &gp_layer_conv1d,
};

#define N_TYPES (sizeof types / sizeof types[0])

/* The names are the tables' own (C cannot take them at compile time from other objects), so
 * no second list can drift from them; filled once, by whichever thread asks first. */
static const char *names[N_TYPES + 1];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void fill_names(void) {
  for (size_t i = 0; i < N_TYPES; i++)
    names[i] = types[i]->name;
  names[N_TYPES] = NULL;
}

const gp_layer_type *gp_layer_type_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < N_TYPES; i++)
    if (strcmp(types[i]->name, name) == 0) return types[i];
  return NULL;
}

const char *const *gp_layer_type_names(void) {
  pthread_once(&names_once, fill_names);
  return names;
}
