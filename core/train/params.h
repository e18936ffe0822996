/* The parameters of a range of nodes (a stage): one contiguous buffer for trainable
 * parameters, one for buffers (running statistics), one for gradients and one for the
 * layers' statistics accumulators, with each layer's pointers set into them. */
#ifndef GP_PARAMS_H
#define GP_PARAMS_H

#include "core/spec/spec.h"

typedef struct gp_params {
  gp_backend *be;
  float *train;   /* n_train floats: trainable parameters in node order */
  float *grad;    /* n_train floats */
  float *buffers; /* n_buffers floats */
  float *stats;   /* n_stats floats */
  int64_t n_train, n_buffers, n_stats;
  int first_node, end_node;
  gp_layer_bind *bind; /* end_node - first_node: each layer's pointers into the buffers */
} gp_params;

/* Lays out and allocates the parameters of nodes [first, end) of m, binds every layer's
 * param/grad/stats pointers in p->bind (the model is not written), and initializes values from
 * seed (a tied copy as its group's first member). */
gp_status gp_params_init(gp_params *p, const gp_model *m, int first, int end, gp_backend *be,
                         uint64_t seed);
/* Node i's bindings (first_node <= i < end_node). */
static inline gp_layer_bind *gp_params_bind(const gp_params *p, int node) {
  return &p->bind[node - p->first_node];
}
void gp_params_free(gp_params *p);
gp_status gp_params_zero_grad(gp_params *p);

/* Adds every parameter and buffer (named "<layer path>.<name>") to a safetensors writer,
 * staging device data in host memory owned by *stage (free it after writing). A NaN or an
 * infinity is refused (GP_ERR_RUNTIME naming it): such weights are of no use to anyone. */
struct gp_st_writer;
gp_status gp_params_add_to_writer(gp_params *p, const gp_model *m, struct gp_st_writer *w,
                                  float **stage);
/* Loads every parameter and buffer of the range by name from a file or a sharded set (only the
 * shards that hold them are read); missing or mis-shaped tensors, and values that are not
 * finite, are errors naming them. A tied parameter missing from f is read from another member
 * of its group that f holds. */
struct gp_shards;
gp_status gp_params_load_from(gp_params *p, const gp_model *m, struct gp_shards *f,
                              const char *file_name);
/* GP_ERR_DATA naming file_name and the tensor when one of the n floats at v (which need not be
 * aligned) is NaN or infinite: a run would train on (and a checkpoint resume from) weights that
 * are not numbers, and only say so later as a NaN loss. */
gp_status gp_params_check_finite(const char *file_name, const char *tensor, const void *v,
                                 int64_t n);
/* A tensor of f that is no parameter of m (other than names starting with ignore_prefix, which
 * may be NULL) is an error naming it; so are members of a tied group that differ in f (those of
 * nodes [node_lo, node_hi) are compared, so a process reads the shards of its own stages). */
gp_status gp_params_check_names(const gp_model *m, struct gp_shards *f, const char *file_name,
                                const char *ignore_prefix, int node_lo, int node_hi);
/* 0 and the node and parameter index (each may be NULL) of the parameter "<layer path>.<name>";
 * -1 when m has none of that name. */
int gp_params_lookup(const gp_model *m, const char *name, int *node, int *param);

#endif
