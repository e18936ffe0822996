/* gpipe-train's parts: the flags and the run they configure (train.c), the training and
 * evaluation loop (train_loop.c), and what it reports (train_report.c). Private to them. */
#ifndef GP_CLI_TRAIN_H
#define GP_CLI_TRAIN_H

#include <stdio.h>

#include "cli/args.h"
#include "cli/progress.h"
#include "core/dist/dist.h"
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
  F_VIRTUAL,
  F_REMAT,
  F_BALANCE,
  F_BY,
  F_CACHE,
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
  F_REPLICAS,
  F_LIVENESS,
  F_BEAM,
  F_LENPEN,
  F_NO_KV_CACHE,
  F_GENERATE,
  F_PROMPTS,
  F_TEMPERATURE,
  F_TOP_K,
  F_TOP_P,
  F_HELP,
  F_VERSION,
  F_COUNT
};

/* the flag table, F_COUNT entries and the NULL that ends it (a table of another length does
 * not compile against this declaration) */
extern gp_flag tr_flags[F_COUNT + 1];
/* --lenpen's value (1 when not given); a usage error when it is not a number */
gp_status tr_lenpen(double *out);
extern int tr_ckpt_stale; /* temporary checkpoints of killed runs removed from --checkpoint-dir */
extern int tr_out_stale;  /* the same removed beside --save, --trace and --translations */

typedef struct run {
  gp_dist dist; /* the processes (one, unless launched by mpirun or srun) */
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
  int traced, saved;    /* --trace, --save written (the run's end) */
  int64_t loaded_step;  /* --load named a checkpoint: its step; else -1 */
  char split_note[160]; /* how the split was made (train_split.c), for the pipeline line */
  /* the steps this run trained, and those during whose end stage 0 ran the next one's first
   * forwards (the steps overlapped), for the pipeline line */
  int64_t trained, overlapped;
} run;

/* train_dist.c: several processes */
/* Starts the processes' runtime; on ranks but 0 the output goes quiet (errors still print). */
gp_status tr_dist_start(run *r);
/* Whether the model's stages and replicas can be laid out over the processes (one line saying
 * what would work where not). */
gp_status tr_dist_check(const run *r);
/* The layout of the trainer's plan over the processes; a GPU stage goes to the GPU of the
 * process's local rank unless --devices names one. */
gp_status tr_dist_layout(run *r, gp_plan *plan);
/* The stages this process holds of a pipeline of `stages` (all of them in one process). */
int tr_dist_stages_here(const run *r, int stages);
/* buf from rank 0 to every process (nothing in one process). */
gp_status tr_dist_bcast(run *r, void *buf, size_t bytes);
/* The run's plan (train_split.c): --resume's recorded split, else an explicit balance, else
 * the automatic split by --by, the same in every process (rank 0 times the units). */
gp_status tr_split(run *r, int threads, gp_plan *plan);
/* Whether this process speaks for the run (rank 0, or the only one). */
int tr_dist_voice(const run *r);
/* The setup's outcome agreed by every process: an error of any, reported once (by the lowest
 * rank that failed). Returns s, or the error another process had (reported there). */
gp_status tr_dist_agree(run *r, gp_status s, int *reported_elsewhere);
/* --save at W > 1: replica 0's processes write their stages' weights, as one file (one process
 * a replica) or as parts, committed as one index by rank 0 once every part is there. */
gp_status tr_dist_save_weights(run *r, const char *path);
/* A checkpoint, the same way: every process of replica 0 writes its stages' part, rank 0
 * commits once all have (a checkpoint is whole or absent). */
gp_status tr_dist_save_checkpoint(run *r, const char *dir, const gp_ckpt_pos *pos);
/* W > 1 with --checkpoint-dir: every process must see the files rank 0 writes there (a folder
 * the hosts share); GP_ERR_USAGE naming a rank that does not. Every process calls it. */
gp_status tr_dist_shared_dir(run *r);
/* Tests (GP_TEST_SHARES=PREFIX): each process appends its replica's share of the step's batch
 * to PREFIX.RANK ("replica step first n"). */
void tr_dist_note_share(const run *r);
/* W > 1: each process reads of every batch only what its stages use (the model inputs they
 * read, of its replica's share; the labels whole), from the training and evaluated splits. */
gp_status tr_dist_want(run *r);
/* Tests (GP_TEST_DATA=PREFIX): each process writes what its training split read to PREFIX.RANK
 * ("decoded D batches B wait_s W"). */
void tr_dist_note_data(const run *r);
/* Every stage's statistics (all[K]), the stages of other processes' included (every process
 * calls it, in the same order). */
gp_status tr_dist_stats(run *r, gp_stage_stats *all);
/* An error: printed with the rank and host; at W > 1 it ends every process. */
int tr_dist_fail(run *r, gp_status s, const char *hint);

/* train_loop.c */
gp_status tr_make_trainer(run *r, gp_plan *plan, int *threads);
gp_status tr_train(run *r);
gp_status tr_eval_only(run *r);

/* train_generate.c: --generate N --prompts FILE (a language model continues token-id lines) */
gp_status tr_generate(run *r);

/* train_report.c */
void tr_weights_name(const run *r, char *buf, size_t n);
void tr_print_final(const run *r, const gp_progress *pg);
void tr_report_data(run *r, double wall);
void tr_report_pipeline(run *r);
void tr_report_memory(run *r, const gp_plan *plan);
void tr_note_pipeline(gp_progress *pg, const gp_plan *plan, int64_t batch, const char *how);
void tr_note_model(const run *r, gp_progress *pg);
void tr_note_stale_outputs(gp_progress *pg);
void tr_blas_note(char *buf, size_t n);

/* train.c: the closing line and exit code of a failed run */
int tr_fail(gp_status s);

#endif
