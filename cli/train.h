/* gpipe-train's parts: the flags and the run they configure (train.c), the training and
 * evaluation loop (train_loop.c), and what it reports (train_report.c). Private to them. */
#ifndef GP_CLI_TRAIN_H
#define GP_CLI_TRAIN_H

#include <stdio.h>

#include "cli/args.h"
#include "cli/progress.h"
#include "core/train/trainer.h"
#include "data/data.h"

enum {
  F_STEPS,
  F_EPOCHS,
  F_BATCH,
  F_SEED,
  F_SET,
  F_DATA,
  F_LOG,
  F_SAVE,
  F_LOAD,
  F_CKPT_DIR,
  F_CKPT_EVERY,
  F_RESUME,
  F_OVERWRITE,
  F_SHARD_SIZE,
  F_THREADS,
  F_EVAL_EVERY,
  F_STAGES,
  F_MICRO,
  F_SCHEDULE,
  F_REMAT,
  F_BALANCE,
  F_DEVICES,
  F_PIN,
  F_WATCHDOG,
  F_PRECISION,
  F_NONDET,
  F_MEMORY,
  F_TRACE,
  F_PARTITION,
  F_QUIET,
  F_TRANSLATIONS,
  F_EVAL_ONLY,
  F_HELP,
  F_VERSION,
  F_COUNT
};

/* the flag table, F_COUNT entries and the NULL that ends it (a table of another length does
 * not compile against this declaration) */
extern gp_flag tr_flags[F_COUNT + 1];
extern int tr_ckpt_stale; /* temporary checkpoints of killed runs removed from --checkpoint-dir */
extern int tr_out_stale;  /* the same removed beside --save, --trace and --translations */

typedef struct run {
  gp_model *m;
  gp_data d; /* the batch sources: training, evaluated, final */
  gp_trainer t;
  int have_trainer;
  FILE *log;
  gp_precision precision; /* --precision */
  size_t mem_limit;       /* --memory-limit: per stage, 0 = none */
  size_t shard_bytes;     /* --save-shard-size (0: the default, 4 GiB) */
  int64_t ckpt_step;      /* the step of the checkpoint last written or resumed from, or -1 */
  /* the last evaluation, which the final line shows: its numbers, its split, and BLEU over
   * last_sentences (last_bleu < 0: none decoded) */
  gp_metrics last;
  gp_batch_source_stats last_st;
  double last_bleu;
  int64_t last_sentences;
  int traced, saved;   /* --trace, --save written (the run's end) */
  int64_t loaded_step; /* --load named a checkpoint: its step; else -1 */
} run;

/* train_loop.c */
gp_status tr_make_trainer(run *r, gp_plan *plan, int *threads);
gp_status tr_train(run *r);
gp_status tr_eval_only(run *r);

/* train_report.c */
void tr_weights_name(const run *r, char *buf, size_t n);
void tr_print_final(const run *r, const gp_progress *pg);
void tr_report_data(run *r, double wall);
void tr_report_pipeline(run *r);
void tr_report_memory(run *r);
void tr_note_pipeline(gp_progress *pg, const gp_plan *plan, int64_t batch);
void tr_note_model(const run *r, gp_progress *pg);
void tr_note_stale_outputs(gp_progress *pg);
void tr_blas_note(char *buf, size_t n);

/* train.c: the closing line and exit code of a failed run */
int tr_fail(gp_status s);

#endif
