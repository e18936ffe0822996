/* The data of a run, as gpipe-train and gpipe-bench open it for a model file: batch sources
 * (core/train/batch_source.h) of the training split and of the splits evaluated, whatever
 * the data (image loaders, token rows of sequence models, synthetic), so the programs and the
 * trainer read them all one way. */
#ifndef GP_DATA_DATA_H
#define GP_DATA_DATA_H

#include "core/eval/decode.h"
#include "core/train/batch_source.h"
#include "data/loader.h"
#include "data/seqdata.h"

typedef struct gp_data_opts {
  int synthetic;                /* random data of the model's shapes (--data synthetic) */
  int train;                    /* open the training split */
  int eval;                     /* open the splits evaluated */
  int64_t batch;                /* rows of a global batch */
  uint64_t seed;                /* shuffling, augmentation and synthetic data */
  int64_t synthetic_batches;    /* synthetic images: training batches an epoch (0 = 16); token
                                   data always has 16 */
  const gp_loader_opts *loader; /* image loaders' options; NULL = the data section's */
} gp_data_opts;

typedef struct gp_data {
  gp_batch_source *train;  /* NULL unless opts.train (token data: always) */
  gp_batch_source *eval;   /* evaluated during training: the eval split of token data, the
                              test split of images (NULL unless opts.eval) */
  gp_batch_source *test;   /* the final evaluation's split: eval itself for images */
  gp_seqdata *seq;         /* sequence models: their corpora, for decoding */
  gp_batch_source *own[2]; /* the image loaders' sources */
} gp_data;

/* Opens what m's data section names (or synthetic data): errors in user terms naming the
 * model file, the data section's place in it ("m.yaml:30:3: data.path: ..."), or the data
 * file; a model whose inputs the data cannot fill, a target of another kind than data.task's
 * (i32 labels to classify, the image as f32 to denoise: data/denoise.h), data of another
 * sample shape or class count, or a training split of less than one batch are errors. */
gp_status gp_data_open(const gp_model *m, const gp_data_opts *o, gp_data *out);
void gp_data_close(gp_data *d); /* accepts a zeroed struct */

/* Whether the evaluations decode translations (a translation model on real text). */
int gp_data_translates(const gp_data *d);
/* What decoding the eval split (final 0) or the test split (final 1) reads; *any = 0 where
 * nothing is decoded (see gp_seqdata_decode_set). */
gp_status gp_data_decode_set(gp_data *d, int final, gp_decode_set *out, int *any);

/* Models that are not sequence models are fed (x, y) batches: the one f32 input that is not
 * the labels, found in *out. Otherwise an error in user terms naming m's file and inputs;
 * `data` says what feeds them ("synthetic data"). */
gp_status gp_data_input(const gp_model *m, const char *data, const gp_model_input **out);
/* The classes m's output scores: the size of its last dimension (1 for a scalar). */
int64_t gp_model_classes(const gp_model *m);
/* s, and where it is an error in the data section that opening the data found (GP_ERR_SPEC:
 * "data.path: set it ..."), its message located at that section ("m.yaml:30:3: "), as the
 * errors found when the file is read are. */
gp_status gp_data_error_at(const gp_model *m, gp_status s);

/* An image loader's batches of `batch` samples as a source for m, a model of one f32 input
 * and labels (gp_data_input); split ("train", "test") names it in its stats. own: l goes with
 * the source (and is freed when making it fails). */
gp_status gp_loader_batch_source(gp_loader *l, const gp_model *m, int64_t batch, const char *split,
                                 int own, gp_batch_source **out);

#endif
