/* The one layer interface. A layer type is a table of functions registered by the name the
 * YAML uses (layers/registry.c). Shapes here are per sample (no batch dimension); runtime
 * tensors carry the batch as dimension 0. Gradient convention: parameter gradients +=,
 * input gradients = (a NULL din[i].data means that input needs no gradient). */
#ifndef GP_LAYER_H
#define GP_LAYER_H

#include <stdint.h>

#include "core/arena.h"
#include "core/backend.h"
#include "core/spec/cfg.h"
#include "core/spec/settings.h"
#include "core/tensor.h"

#define GP_MAX_INPUTS 8
#define GP_MAX_PARAMS 4

typedef enum gp_init {
  GP_INIT_ZEROS,
  GP_INIT_ONES,
  /* PyTorch's defaults for conv and linear: weight U(-b, b), b = 1/sqrt(fan_in)
   * (kaiming_uniform with a = sqrt(5)); bias U(-b, b) with the same b. */
  GP_INIT_UNIFORM_FAN_IN,
  GP_INIT_KAIMING_NORMAL, /* N(0, 2/fan_in): He et al., for ReLU nets (init: he) */
  GP_INIT_NORMAL,         /* N(0, 1): PyTorch's nn.Embedding */
  /* U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fan_out = elements / fan_in (Glorot; PyTorch's
   * MultiheadAttention in_proj_weight) */
  GP_INIT_XAVIER_UNIFORM,
  /* [max_len, dim] sinusoidal positions (Vaswani et al.): element (pos, j) is
   * sin(pos / 10000^(2i/dim)) for even j = 2i and cos(pos / 10000^(2i/dim)) for odd j = 2i+1 */
  GP_INIT_SINUSOIDAL,
  /* N(0, 1/fan_in): an embedding scaled by sqrt(dim) starts at unit size (fairseq's and
   * tensor2tensor's Transformer embeddings, std dim^-0.5) */
  GP_INIT_NORMAL_FAN_IN,
  /* N(0, std^2), std from gp_param_desc.std (init: normal; GPT-2's and Llama's 0.02) */
  GP_INIT_NORMAL_STD,
} gp_init;

typedef struct gp_param_desc {
  char name[24];  /* "weight", "bias", "running_mean", ... */
  gp_shape shape; /* full parameter shape */
  gp_init init;
  int64_t fan_in;
  double std;    /* GP_INIT_NORMAL_STD's standard deviation */
  int trainable; /* 0: a buffer (running statistics): saved and loaded, never optimized */
  /* 1: row zero_row of the first dimension starts at 0 whatever the init (an embedding's
   * padding_idx, as PyTorch) */
  int has_zero_row;
  int64_t zero_row;
} gp_param_desc;

/* Per sample: FLOPs and bytes (f32). The executor multiplies by the batch. */
typedef struct gp_cost {
  double fwd_flops, bwd_flops;
  /* the part of bwd_flops that computes input gradients: not run when no input of the layer
   * takes one (a layer fed only by model inputs). Parameter-free layers need not set it: with
   * no input gradient their backward does not run at all. */
  double bwd_data_flops;
  int64_t params;      /* trainable elements */
  int64_t saved_bytes; /* what forward keeps for backward beyond its input and output */
  /* saved_bytes where the stage runs bf16 on a GPU with fused kernels (attention through
   * cuDNN keeps a log-sum-exp per row instead of the T x T probabilities); 0: the same */
  int64_t saved_bytes_fused;
  int64_t out_bytes;
  int64_t w_bytes; /* what B alone keeps for its W beyond dout (attention's d(projections)) */
  /* of saved_bytes, what forward keeps over its input where gp_node_over_input allows
   * (gp_layer_type.saves_over_input): the loss's probabilities over the logits */
  int64_t over_input_bytes;
  /* gradients of its own inner tensors a backward allocates (a fused node's, core/fused.c),
   * beside those of its inputs that the planner counts */
  int64_t inner_grad_bytes;
} gp_cost;

typedef struct gp_layer gp_layer;

/* Which half of a backward runs (zero-bubble schedules, Qi et al. 2024, split it in two).
 * BOTH: today's backward. INPUT (B): the input gradients only; the parameter gradients are
 * left alone. WEIGHT (W): the parameter gradients only (+=, in the same order as BOTH), din is
 * not written; it reads what B left: the layer's inputs, dout and the saved state (and what B
 * added to it, attention's projection gradients), so those must live until W. B then W gives
 * the bytes of BOTH. Call a half through gp_layer_backward_part. */
typedef enum gp_grad_part { GP_GRAD_BOTH = 0, GP_GRAD_INPUT, GP_GRAD_WEIGHT } gp_grad_part;

/* What a forward or backward pass runs in. */
#define GP_EXEC_MAX_HOST 8 /* = GP_MAX_MODEL_INPUTS */

/* A layer's runtime bindings in one stage: where its parameters, their gradients and its
 * statistics live. They belong to the stage (gp_params), not to the layer, so a loaded model
 * stays const and several stages or pipelines can run one model. */
typedef struct gp_layer_bind {
  float *param[GP_MAX_PARAMS]; /* device pointers into the stage's contiguous buffers */
  float *grad[GP_MAX_PARAMS];  /* NULL for buffers */
  float *stats;                /* stats_floats() floats, or NULL */
  int64_t stats_count;         /* values per channel pooled in stats since the last step_end */
} gp_layer_bind;

/* One attention layer's state while decoding a batch one position a step: the layer (a copy
 * whose queries are one position a row) appends its new key and value at position len
 * (self-attention), or projects the memory once at the first step and keeps it (len = the
 * memory's length). kv holds rows x cap positions of row_floats / cap floats each, allocated by
 * the layer from arena at its first step; ids the segment ids (or key-padding flags) of the
 * positions held, rows x cap. The decoder reorders rows (beam search) by whole rows. */
typedef struct gp_kv_cache {
  gp_arena *arena;
  int64_t cap, len, rows;
  int64_t row_floats, row_ids; /* floats of one row of kv, ids of one row of ids */
  float *kv;
  int32_t *ids;
} gp_kv_cache;

typedef struct gp_exec {
  gp_backend *be;
  gp_arena *arena; /* saved state lives here until the micro-batch's backward is done */
  int training;    /* 0: evaluation (batchnorm uses running statistics, dropout is off) */
  int recompute;   /* 1: a re-materializing forward: must not touch running statistics */
  int over_input;  /* 1: this forward may write over in[0] (gp_layer_type.saves_over_input) */
  uint64_t seed;   /* run seed; dropout key = hash(seed, step, layer path), counter = the
                      element's index in the mini-batch (so masks do not depend on M) */
  int64_t step;
  int micro;             /* which micro-batch (for messages; masks use sample_offset) */
  int64_t sample_offset; /* first sample of this micro-batch in the mini-batch */
  int64_t loss_count;    /* samples in the whole mini-batch: loss layers scale by 1/loss_count */
  double loss_sum;       /* host accumulators that loss layers add to */
  int64_t correct;
  int64_t counted;
  /* Host copies of the model inputs of this pass, by their device pointers (see
   * gp_exec_host_copy); n_host 0: none known. */
  int n_host;
  const void *host_dev[GP_EXEC_MAX_HOST];
  const void *host_src[GP_EXEC_MAX_HOST];
  /* Optional (NULL: none): called before (end 0) and after (end 1) each layer's forward or
   * backward, e.g. to trace layers; on_layer_ctx is the caller's. */
  void (*on_layer)(const struct gp_exec *e, int node, int backward, int end);
  void *on_layer_ctx;
  /* The bindings of nodes [bind_first, ...) (the stage's gp_params.bind); the pass points bind
   * at the running layer's before calling it. */
  gp_layer_bind *binds;
  int bind_first;
  gp_layer_bind *bind;
  /* The half of the backward to run (zero: both); gp_layer_backward_part sets it. */
  gp_grad_part grad_part;
  /* B of a split backward: where the pass puts the gradients W will not read and its
   * temporaries, freed when B is done, so the slot keeps only what W reads (NULL: arena). */
  gp_arena *temp;
  /* Incremental decoding (core/eval/kvdec.c): the running attention layer's keys and values
   * kept across steps; NULL in training and evaluation, whose paths never read it. */
  struct gp_kv_cache *cache;
} gp_exec;

/* Whether the running backward adds into the parameter gradients (not B alone). */
static inline int gp_exec_weight_grads(const gp_exec *e) {
  return e->grad_part != GP_GRAD_INPUT;
}

/* The host copy of a tensor the pass got from a model input (labels, positions), or NULL:
 * a layer that needs such values on the host reads them here instead of copying them back
 * from the device, which on a GPU would wait for its queue. */
static inline const void *gp_exec_host_copy(const gp_exec *e, const void *dev) {
  for (int i = 0; i < e->n_host; i++)
    if (e->host_dev[i] == dev) return e->host_src[i];
  return NULL;
}

typedef struct gp_layer_type {
  const char *name;
  const char *doc; /* one line on what it computes (docs/layers.md) */
  int min_inputs, max_inputs;
  size_t conf_size; /* bytes of the type's settings struct at gp_layer.conf (zeroed) */
  /* Every key its YAML mapping may hold besides the structural ones (type, name, from,
   * repeat): the one declaration of each setting, read into conf by gp_settings_read and
   * written out as docs/layers.md. GP_LAYER_SETTINGS(table) fills both fields. */
  const gp_setting *settings;
  int n_settings;
  /* Reads the settings table through cfg (so every key the type knows is asked for and
   * unknown keys are found), then checks what relates settings to each other. Errors come
   * located from the cfg getters. */
  gp_status (*configure)(gp_layer *l, gp_cfg *cfg);
  /* From l->n_in, l->in_shape[] and l->in_dtype[], sets l->out_shape, and fills
   * l->pdesc/l->n_params. Errors say what is wrong with both shapes (unlocated: the loader
   * adds the layer's position). */
  gp_status (*shape)(gp_layer *l);
  void (*cost)(const gp_layer *l, gp_cost *c);
  /* out is allocated by the caller (batch + out_shape). *saved may be set to state allocated
   * from e->arena that backward needs. */
  gp_status (*forward)(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                       void **saved);
  gp_status (*backward)(const gp_layer *l, gp_exec *e, const gp_tensor *in, const gp_tensor *out,
                        const gp_tensor *dout, gp_tensor *din, void *saved);
  /* backward honours e->grad_part: with GP_GRAD_INPUT it adds nothing to the parameter
   * gradients (gp_exec_weight_grads) and keeps what W reads; GP_GRAD_WEIGHT comes with every
   * din[i].data NULL (gp_layer_backward_part), so a parameter-free layer's W is empty. */
  /* 1: the gradient of every input is dout itself, reshaped (add, identity, flatten). The
   * executor then gives the first input whose gradient is not yet held dout's memory instead
   * of a copy (and an add's second input too where gp_node_hands_both allows it), and passes
   * backward that din with data NULL (nothing to write). */
  int grad_is_dout;
  /* 1: forward may write out over in[0] when nothing else reads in[0] and its producer's
   * backward does not read its output (ReLU: its backward's mask in[0] > 0 is then y > 0,
   * the same). Saves an activation per such layer. */
  int forward_in_place;
  /* 1: backward never reads `out` (a consumer may overwrite it in place). */
  int backward_ignores_out;
  /* 1: where the executor sets gp_exec.over_input, forward may keep its saved state in in[0]'s
   * memory, writing over it, and then returns *saved = in[0].data; the executor then hands that
   * memory to backward as din[0] (written in place from the state). The loss keeps its
   * probabilities over the logits and writes their gradient there: one [n, k] buffer, not
   * three (llm.c's fused classifier). A forward may decline (its saved state elsewhere). */
  int saves_over_input;
  /* 1: a loss (the model file's `loss:`, which takes only these; `layers:` takes the others). */
  int is_loss;
  /* Optional: floats of non-persistent accumulator state at the bind's stats (batchnorm). */
  int64_t (*stats_floats)(const gp_layer *l);
  /* Optional: once per mini-batch after all backwards (apply deferred running stats). */
  gp_status (*step_end)(const gp_layer *l, gp_layer_bind *b, gp_backend *be);
  /* Fusion (core/spec/fuse.c, core/fused.c), optional. activation: an element-wise
   * activation's gp_activation. forward_act: forward, then activation act on its output, in
   * one backend op where the backend has one (pre gets the forward's output, out act(pre));
   * *taken 0: nothing run, the caller composes. forward_sum: forward of in[0] + in[1], the
   * sum written to sum (round_sum: rounded to bf16 first, bf16-mixed's activation), in one
   * backend op where the backend has one; *taken 0 as forward_act. */
  gp_activation (*activation)(const gp_layer *l);
  gp_status (*forward_act)(const gp_layer *l, gp_exec *e, gp_activation act, const gp_tensor *in,
                           gp_tensor *pre, gp_tensor *out, int *taken);
  gp_status (*forward_sum)(const gp_layer *l, gp_exec *e, int round_sum, const gp_tensor *in,
                           gp_tensor *sum, gp_tensor *out, void **saved, int *taken);
} gp_layer_type;

struct gp_layer {
  const gp_layer_type *type;
  char *path; /* "3.conv1": the prefix of its parameter names */
  void *conf;
  int n_in;
  gp_shape in_shape[GP_MAX_INPUTS];
  gp_dtype in_dtype[GP_MAX_INPUTS];
  gp_shape out_shape;
  gp_dtype out_dtype; /* GP_F32 unless shape() says otherwise */
  int n_params;
  gp_param_desc pdesc[GP_MAX_PARAMS];
};

#define GP_LAYER_SETTINGS(table)                                                                   \
  .settings = (table), .n_settings = (int)(sizeof(table) / sizeof((table)[0]))

/* The registry (layers/registry.c). */
const gp_layer_type *gp_layer_type_find(const char *name);
/* All registered names, NULL-terminated, for suggestions: the types' own names. */
const char *const *gp_layer_type_names(void);

/* Runs one half of l's backward (or both) with e->grad_part set to part for the call. For
 * GP_GRAD_WEIGHT, din is ignored (the layer sees every din[i].data NULL), and a layer
 * without parameters is not called. Run B, then W with the same in, out, dout and saved. */
gp_status gp_layer_backward_part(const gp_layer *l, gp_exec *e, gp_grad_part part,
                                 const gp_tensor *in, const gp_tensor *out, const gp_tensor *dout,
                                 gp_tensor *din, void *saved);

/* Dropout key for this layer in this step (the same for every micro-batch). */
uint64_t gp_layer_rng_key(const gp_layer *l, const gp_exec *e);

/* Deterministic initial values of parameter i, from (seed, path + "." + name); host floats. */
void gp_param_init_host(const gp_layer *l, int i, uint64_t seed, float *host);

#endif
