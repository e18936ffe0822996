/* A loaded model file: the layer graph with every shape inferred and checked, and the
 * data, train and pipeline sections with defaults filled in. Built by gp_model_load
 * (core/spec/), read by the trainer, partitioner and executor; it knows no YAML. */
#ifndef GP_SPEC_H
#define GP_SPEC_H

#include <stdint.h>

#include "core/layer.h"

#define GP_MAX_MODEL_INPUTS 8
/* Stages (and devices) of one pipeline: a pipeline of 1,024 devices, or R replicas of fewer */
#define GP_MAX_DEVICES 1024
/* A batch beyond this is a typo; it also keeps byte products far from overflow. */
#define GP_MAX_BATCH ((int64_t)1 << 24)
#define GP_SPEC_NAME 64
/* Micro-batches per mini-batch: the one limit of M, wherever M comes from (model files, plan
 * files, --micro-batches, gpipe-bench's lists) and of the executor, which keeps a per-step
 * table of M + 1 sample offsets. */
#define GP_MAX_MICRO_BATCHES 4096

/* Limits of expansion: a model file beyond them is refused with an error. */
#define GP_SPEC_MAX_NODES 100000                /* layers after block and repeat expansion */
#define GP_SPEC_MAX_REPEAT 10000                /* one repeat: count */
#define GP_SPEC_MAX_YAML_NODES 1000000          /* YAML nodes visited, aliases counted each time */
#define GP_SPEC_MAX_ELEMENTS ((int64_t)1 << 40) /* elements of one tensor or parameter */

typedef struct gp_model_input {
  char name[GP_SPEC_NAME];
  gp_shape shape; /* per sample */
  gp_dtype dtype; /* GP_F32 for images, GP_I32 for labels and token ids */
} gp_model_input;

typedef struct gp_node {
  gp_layer layer;
  int n_in;
  int in[GP_MAX_INPUTS]; /* tensor ids: 0..n_inputs-1 model inputs, n_inputs + i node i */
  int unit;              /* top-level unit this node belongs to */
  int line, col;         /* where it was written */
  int trains; /* its output depends on a trainable parameter: backward needs its gradient */
} gp_node;

typedef enum gp_dataset {
  GP_DATA_NONE,
  GP_DATA_FASHION_MNIST,
  GP_DATA_MNIST,
  GP_DATA_CIFAR10,
  GP_DATA_CIFAR100,
  GP_DATA_IMAGENET,
  GP_DATA_TRANSLATION,
  GP_DATA_SYNTHETIC,
  GP_DATA_TEXT, /* one language's sentences, for a language model */
} gp_dataset;

enum { GP_TASK_CLASSIFY, GP_TASK_DENOISE };

typedef struct gp_data_spec {
  gp_dataset dataset;
  char path[512];        /* directory of the files; "" = the dataset's default */
  int n_norm;            /* 0 = no normalization */
  float mean[4], std[4]; /* per channel, on the 0..1 scale */
  int augment;           /* dataset-standard train augmentation */
  int64_t train_limit;   /* 0 = all samples; else the first N (quick runs) */
  int64_t test_limit;
  int coarse_labels; /* CIFAR-100: the 20 superclasses instead of the 100 classes */
  /* What an image dataset feeds: class labels (GP_TASK_CLASSIFY), or (GP_TASK_DENOISE) the
   * clean image as an f32 target and the image plus Gaussian noise of noise_std (0..1 scale)
   * as the input (data/data.c) */
  int task;
  double noise_std;
  /* Loading (data/loader.h): decode threads (-1 = automatic, 0 = on the caller's thread),
   * batches prepared ahead, a shuffle buffer for streamed shards (records), bad samples
   * tolerated (0 = the first one is an error). */
  int workers, prefetch;
  int64_t shuffle_buffer, max_skips;
  /* ImageNet: shard lists (brace patterns, lists, @file, a directory) relative to path,
   * classes.txt, the number of classes, samples per epoch of a streamed train split (0 =
   * unknown), and the side of the square crops (evaluation resizes the shorter side to
   * image_size * 256 / 224 first). */
  char train_shards[512], test_shards[512], classes_file[512];
  int64_t num_classes, train_samples;
  int image_size;
  /* Translation and text: path/{train,valid,test}.LANG.ids (spm_encode ids) with the
   * SentencePiece vocabulary vocab_file (relative to path); source and target languages
   * (text: target only); the special ids; the split evaluated during training (the test
   * split is evaluated at the end); sentences greedily decoded for BLEU at each evaluation
   * (0 = all; -1 = none) and the longest output as source length * a + b. */
  char source[16], target[16], vocab_file[512], eval_split[16];
  int64_t pad_id, bos_id, eos_id, bleu_samples;
  double decode_len_a, decode_len_b;
  /* Where the file's data section is (line 0: it has none), for the errors in it that only
   * opening the data finds (CIFAR without a path): gp_data_error_at (data/data.h). */
  int line, col;
} gp_data_spec;

typedef enum gp_optim_kind { GP_OPT_SGD, GP_OPT_ADAMW, GP_OPT_RMSPROP } gp_optim_kind;
typedef enum gp_lr_kind { GP_LR_CONSTANT, GP_LR_STEP, GP_LR_COSINE, GP_LR_INVERSE_SQRT } gp_lr_kind;

typedef struct gp_train_spec {
  gp_optim_kind optimizer;
  double lr, momentum, weight_decay, beta1, beta2, eps, alpha;
  int nesterov;
  gp_lr_kind schedule;
  int64_t warmup_steps; /* linear warm-up from 0 to lr first (inverse_sqrt: its own) */
  int64_t step_size;    /* step: every step_size steps lr *= gamma */
  double gamma;
  double min_lr;         /* cosine: floor */
  double warmup_init_lr; /* inverse_sqrt: where the warm-up starts (fairseq's --warmup-init-lr) */
  int64_t d_model;       /* inverse_sqrt: > 0 = Vaswani's form, lr * d_model^-0.5 * ... */
  double clip_grad_norm; /* 0 = off */
  int64_t batch_size;
  int64_t epochs;     /* used when steps == 0 */
  int64_t steps;      /* 0 = epochs decide */
  int64_t eval_every; /* steps between evaluations; 0 = at the end of each epoch */
  int64_t log_every;  /* steps between log lines */
  uint64_t seed;
} gp_train_spec;

/* Optimizer state buffers per trainable parameter, each as large as the parameters: SGD with
 * momentum 1 (without 0), AdamW 2, RMSProp 1 (2 with momentum). The one count that the
 * optimizer allocates and the planner and gpipe-partition predict memory from. */
#define GP_OPT_MAX_SLOTS 2
int gp_optimizer_slots(const gp_train_spec *t);

/* The zero-bubble kinds run with the backward split in two (B, then W deferred); interleaved
 * runs with pipeline.virtual_stages >= 2. */
typedef enum gp_schedule_kind {
  /* schedule: auto (the default): the planner picks one of the others (core/plan/choose.h);
   * only specs and requests hold it, never a plan or a list */
  GP_SCHED_AUTO = -1,
  GP_SCHED_GPIPE,
  GP_SCHED_1F1B,
  GP_SCHED_ZB_H1,
  GP_SCHED_ZB_H2,
  GP_SCHED_INTERLEAVED /* gp_schedule_build_interleaved */
} gp_schedule_kind;
/* The schedules whose lists re-materialize nothing (the zero-bubble ones hold each micro-batch
 * until its W; interleaved has no recompute yet): remat auto means never there. */
static inline int gp_schedule_keeps_all(gp_schedule_kind k) {
  return k == GP_SCHED_ZB_H1 || k == GP_SCHED_ZB_H2 || k == GP_SCHED_INTERLEAVED;
}
/* auto: per stage, as few of its in-flight micro-batches drop their activations as make its
 * estimated memory fit its limit (core/plan/plan.h's remat_drop); none without a limit. */
typedef enum gp_remat {
  GP_REMAT_ALWAYS,
  GP_REMAT_EXCEPT_LAST,
  GP_REMAT_NEVER,
  GP_REMAT_AUTO
} gp_remat;

typedef struct gp_pipeline_spec {
  int stages; /* 1 = no pipelining */
  int micro_batches;
  /* V: model chunks per stage (device), K V chunks in all, chunk c of device d the model's
   * (c K + d)-th part; >= 2 only with the interleaved schedule, 1 otherwise */
  int virtual_stages;
  int replicas; /* data-parallel copies of the pipeline, each on its share of the batch */
  gp_schedule_kind schedule; /* GP_SCHED_AUTO (the default): the plan picks one */
  gp_remat remat;
  size_t
      mem_limit; /* bytes per stage (--memory-limit; not in files): remat auto fits it; 0 = none */
  int n_devices;
  char devices[GP_MAX_DEVICES][16]; /* "cpu", "cuda:0" */
  int n_balance;                    /* 0 = automatic */
  int balance[GP_MAX_DEVICES];      /* units per stage */
  /* a plan file's processes: (gpipe-train --partition): each stage's process, by its position
   * in the replica; n_procs: the positions (0: as even in stages as can be) */
  int n_procs;
  int procs[GP_MAX_DEVICES];
  /* across processes (mpirun; not in files): P, the processes a replica spans (0 or 1: one),
   * and their link, which schedule auto charges every hand-off between two of them (0: the
   * default for one host, gp_link_local_default), in seconds: FLOP costs at seconds_per_flop
   * (0: not known, so interleaved is left out there) */
  int across_procs;
  double link_latency_s, link_bytes_per_s, seconds_per_flop;
  /* "model.yaml:12:15: pipeline.checkpoint is now pipeline.remat" when the file used the old
   * name (the program tells the user); "" otherwise */
  char renamed[320];
} gp_pipeline_spec;

/* One parameter of the graph: node index and index into its layer's pdesc. */
typedef struct gp_param_ref {
  int node, param;
} gp_param_ref;

/* An enabled group of the tied: section: one logical parameter held as a copy by every member
 * (on whatever stage holds the member's node). Every copy starts from member 0's initial
 * value, and before each optimizer step every copy's gradient is replaced by the sum of all
 * members' gradients, summed in member order, so the copies stay identical. */
typedef struct gp_tied_group {
  char name[GP_SPEC_NAME];
  int n;                 /* members, >= 2 */
  gp_param_ref *members; /* in the order the file lists them */
  int64_t numel;         /* elements of each copy */
} gp_tied_group;

typedef struct gp_model {
  char name[GP_SPEC_NAME];
  char *file;
  int n_inputs;
  gp_model_input inputs[GP_MAX_MODEL_INPUTS];
  int label_input; /* index of the labels input, or -1 */
  int n_nodes;
  gp_node *nodes; /* topological (file) order; the loss is the last node */
  int n_units;
  int *unit_first;   /* n_units + 1 entries: unit u = nodes [unit_first[u], unit_first[u+1]) */
  char **unit_names; /* "0", "stem", "cells.3" */
  int output_node;   /* the node whose output feeds the loss (the logits) */
  int64_t n_params;  /* trainable elements; a tied group counts once */
  int n_fused;       /* node pairs the fusion pass made one (core/spec/fuse.c) */
  int n_tied;        /* enabled tied groups (disabled ones are checked, then dropped) */
  gp_tied_group *tied;
  gp_data_spec data;
  gp_train_spec train;
  gp_pipeline_spec pipeline;
} gp_model;

/* One --set key.path=value override, or a flag that stands for a setting. */
typedef struct gp_override {
  const char *path; /* "train.optimizer.lr", "layers.3.out_channels" */
  const char *value;
  const char *by; /* what set it, for messages ("--batch-size 256"); NULL: --set path=value */
} gp_override;

/* Loads and checks a model file. Errors: GP_ERR_SPEC "file:line:col: what", GP_ERR_IO when
 * the file cannot be read. */
gp_status gp_model_load(const char *file, const gp_override *ov, int n_ov, gp_model **out);
gp_status gp_model_load_string(const char *text, const char *file_name, const gp_override *ov,
                               int n_ov, gp_model **out);
void gp_model_free(gp_model *m);
/* The fusion pass (core/spec/fuse.c), which gp_model_load runs last: adjacent node pairs of
 * one unit (linear + relu/gelu, add + layernorm/rmsnorm) become one node each, m->n_fused of
 * them; GP_FUSE=0: none. Node and tensor ids after them shift down. */
gp_status gp_model_fuse(gp_model *m);
/* Tensor id of node i's output. */
int gp_model_tensor_of_node(const gp_model *m, int node);
/* The enabled tied group that parameter `param` of node `node` belongs to, or -1; *member
 * (may be NULL) is its index among the group's members. */
int gp_model_tied_group(const gp_model *m, int node, int param, int *member);

#endif
