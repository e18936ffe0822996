/* gpipe-train: trains and evaluates a model file. The only place (with the other programs)
 * that prints for users and chooses exit codes: 0 ok, 2 bad model file or usage, 1 failure,
 * 128 + the signal when SIGINT or SIGTERM stopped it. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/common.h"
#include "cli/ckpt_dir.h"
#include "cli/interrupt.h"
#include "cli/machine.h"
#include "cli/progress.h"
#include "core/spec/cfg.h"
#include "core/spec/spec.h"
#include "core/plan/plan_io.h"
#include "core/train/fit.h"
#include "core/train/trainer.h"
#include "data/data.h"
#include "gp_config.h"

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

static gp_flag flags[] = {
    [F_STEPS] = {"--steps", GP_FLAG_INT, "N", "train N optimizer steps in all (overrides epochs)",
                 1},
    [F_EPOCHS] = {"--epochs", GP_FLAG_INT, "N", "train N epochs", 1},
    [F_BATCH] = {"--batch-size", GP_FLAG_INT, "N", "mini-batch size", 1, .max = GP_MAX_BATCH},
    [F_SEED] = {"--seed", GP_FLAG_INT, "N", "seed of weights, shuffling and dropout", 0,
                .max = INT64_MAX},
    [F_SET] = {"--set", GP_FLAG_LIST, "KEY.PATH=VALUE",
               "override a scalar of the model file (repeatable)", 0},
    [F_DATA] = {"--data", GP_FLAG_STR, "synthetic",
                "random inputs and labels of the model's shapes", 0},
    [F_LOG] = {"--log", GP_FLAG_STR, "FILE.jsonl", "one JSON object per logged step and evaluation",
               0},
    [F_SAVE] = {"--save", GP_FLAG_STR, "FILE.safetensors", "write the final weights", 0},
    [F_LOAD] = {"--load", GP_FLAG_STR, "FILE.safetensors", "start from these weights", 0},
    [F_CKPT_DIR] = {"--checkpoint-dir", GP_FLAG_STR, "DIR",
                    "write checkpoints (each epoch and at the end)", 0},
    [F_CKPT_EVERY] = {"--checkpoint-every", GP_FLAG_INT, "N",
                      "also write a checkpoint every N steps", 1},
    [F_RESUME] = {"--resume", GP_FLAG_BOOL, NULL,
                  "continue from the checkpoint in --checkpoint-dir", 0},
    [F_OVERWRITE] = {"--overwrite", GP_FLAG_BOOL, NULL,
                     "start afresh and replace the checkpoint --checkpoint-dir holds (without "
                     "it, or --resume, a run refuses a folder that holds one)",
                     0},
    [F_THREADS] = {"--threads", GP_FLAG_INT, "N", "CPU threads (default: all cores)", 1,
                   .max = 1024},
    [F_EVAL_EVERY] = {"--eval-every", GP_FLAG_INT, "N",
                      "evaluate every N steps (default, or 0: at the end of each epoch)", 0},
    [F_STAGES] = {"--stages", GP_FLAG_INT, "K", "pipeline stages (default: the model file's)", 1},
    [F_MICRO] = {"--micro-batches", GP_FLAG_INT, "M", "micro-batches per mini-batch", 1},
    [F_SCHEDULE] = {"--schedule", GP_FLAG_STR, "gpipe|1f1b", "pipeline schedule", 0},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "always|except_last|never", "re-materialization", 0},
    [F_BALANCE] = {"--balance", GP_FLAG_STR, "a,b,...", "units per stage (default: even by FLOPs)",
                   0},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "cpu,cpu,...", "device of each stage (or one for all)",
                   0},
    [F_PIN] = {"--pin", GP_FLAG_BOOL, NULL, "pin each stage's thread to its share of the cores", 0},
    [F_WATCHDOG] = {"--watchdog", GP_FLAG_INT, "SECONDS",
                    "report a stage that waits longer (default 300)", 1},
    [F_MEMORY] = {"--memory-limit", GP_FLAG_STR, "SIZE",
                  "memory of each stage's device (512MiB, 2GiB, 1.5GB, bytes): more is an error",
                  0},
    [F_PRECISION] = {"--precision", GP_FLAG_STR, "fp32|bf16",
                     "arithmetic of GEMMs and convolutions (bf16: bfloat16 operands, f32 "
                     "accumulation; default fp32)",
                     0},
    [F_NONDET] = {"--nondeterministic", GP_FLAG_BOOL, NULL,
                  "let cuDNN pick algorithms that sum in a varying order (atomics) where faster; "
                  "results then differ between runs in the last bits",
                  0},
    [F_TRACE] = {"--trace", GP_FLAG_STR, "FILE.json",
                 "write a Chrome trace of every stage's actions (chrome://tracing, Perfetto)", 0},
    [F_PARTITION] = {"--partition", GP_FLAG_STR, "PLAN.yaml",
                     "the stages, balance, micro-batches, schedule, re-materialization and "
                     "devices of a gpipe-partition -o plan",
                     0},
    [F_QUIET] = {"--quiet", GP_FLAG_BOOL, NULL,
                 "print only errors and the closing summary (data, memory, pipeline, final result)",
                 0},
    [F_TRANSLATIONS] = {"--translations", GP_FLAG_STR, "FILE.txt",
                        "translation models: write the test split's greedy translations", 0},
    [F_EVAL_ONLY] = {"--eval-only", GP_FLAG_BOOL, NULL,
                     "evaluate the test split with the weights of --load (or the initial ones) "
                     "and stop: no training",
                     0},
    [F_HELP] = {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
    [F_VERSION] = {"--version", GP_FLAG_BOOL, NULL, "show the version", 0},
    {NULL},
};
_Static_assert(sizeof flags / sizeof flags[0] == F_COUNT + 1, "flag table");

static int fail(gp_status s) {
  /* a stage that does not fit its device: what lowers a stage's memory, on the same line */
  const char *hint = s == GP_ERR_FULL ? "; more --stages, --remat always or a smaller "
                                        "--batch-size lower each stage's memory (gpipe-partition "
                                        "MODEL.yaml --stages K shows it per stage)"
                                      : "";
  int code = gp_cli_fail("gpipe-train", s, hint);
  return s == GP_ERR_INTERRUPTED ? gp_interrupt_exit_code() : code;
}

typedef struct run {
  gp_model *m;
  gp_data d; /* the batch sources: training, evaluated, final */
  gp_trainer t;
  int have_trainer;
  FILE *log;
  gp_precision precision; /* --precision */
  size_t mem_limit;       /* --memory-limit: per stage, 0 = none */
  int64_t ckpt_step;      /* the step of the checkpoint last written or resumed from, or -1 */
  /* the last evaluation, which the final line shows: its numbers, its split, and BLEU over
   * last_sentences (last_bleu < 0: none decoded) */
  gp_metrics last;
  gp_batch_source_stats last_st;
  double last_bleu;
  int64_t last_sentences;
  int traced, saved;      /* --trace, --save written (the run's end) */
  int64_t loaded_step;    /* --load named a checkpoint: its step; else -1 */
} run;

/* Frees the run; s, or the first error of closing the log. */
static gp_status run_free(run *r, gp_status s) {
  if (r->have_trainer && r->t.pl && gp_pipeline_wedged(r->t.pl)) {
    /* a stage is stuck in a computation and still uses the model: report and end here */
    fflush(stdout);
    _exit(fail(s));
  }
  if (r->have_trainer) gp_trainer_free(&r->t);
  gp_data_close(&r->d);
  gp_model_free(r->m);
  if (r->log && (ferror(r->log) | fclose(r->log)) && s == GP_OK)
    s = GP_ERR(GP_ERR_IO, "%s: writing the log failed", flags[F_LOG].s);
  return s;
}

/* --partition: the plan replaces the model file's pipeline section; gp_plan_make then
 * rebuilds the same plan from it (and checks the devices as for any other pipeline). */
static gp_status apply_plan_file(gp_model *m) {
  static const int clash[] = {F_STAGES, F_MICRO, F_SCHEDULE, F_REMAT, F_BALANCE, F_DEVICES};
  for (size_t i = 0; i < sizeof clash / sizeof clash[0]; i++)
    if (flags[clash[i]].given)
      return GP_ERR(GP_ERR_USAGE, "--partition and %s both set the pipeline; use one",
                    flags[clash[i]].name);
  gp_plan plan;
  GP_TRY(gp_plan_read(flags[F_PARTITION].s, m, &plan));
  gp_args_note("gpipe-train", plan.renamed);
  if (!plan.batch && !flags[F_QUIET].given)
    fprintf(stderr,
            "%s: the plan records no batch_size (written before plans did); its %d "
            "micro-batches split this run's batch of %" PRId64 "\n",
            flags[F_PARTITION].s, plan.micro, m->train.batch_size);
  gp_pipeline_spec *ps = &m->pipeline;
  ps->stages = plan.stages;
  ps->micro_batches = plan.micro;
  ps->schedule = plan.schedule;
  ps->remat = plan.remat;
  ps->n_balance = ps->n_devices = plan.stages;
  for (int s = 0; s < plan.stages; s++) {
    ps->balance[s] = plan.st[s].end_unit - plan.st[s].first_unit;
    memcpy(ps->devices[s], plan.st[s].device, sizeof ps->devices[s]);
  }
  return GP_OK;
}

static int ckpt_stale; /* temporary checkpoints of killed runs removed from --checkpoint-dir */
static int out_stale;  /* the same removed beside --save, --trace and --translations */

/* No output may be the model file, the plan or the weights read, nor another output (the
 * checkpoint folder's checkpoint and lock included); the files written after training are
 * checked before it, so a bad path does not cost the run. */
static gp_status check_files(const gp_model *m) {
  gp_file_use in[3] = {{NULL, m->file, NULL}}, out[6];
  int n_in = 1, n_out = 0;
  if (flags[F_PARTITION].given)
    in[n_in++] = (gp_file_use){"--partition", flags[F_PARTITION].s, NULL};
  if (flags[F_LOAD].given) in[n_in++] = (gp_file_use){"--load", flags[F_LOAD].s, "--save"};
  char ck[2][PATH_MAX];
  for (int i = 0; i < 2 && flags[F_CKPT_DIR].given; i++) {
    snprintf(ck[i], sizeof ck[i], "%.4000s/%s", flags[F_CKPT_DIR].s,
             i ? "lock" : "checkpoint.safetensors");
    out[n_out++] = (gp_file_use){"--checkpoint-dir", ck[i], NULL};
  }
  static const int outs[] = {F_LOG, F_SAVE, F_TRACE, F_TRANSLATIONS};
  n_out += gp_args_file_uses(flags, outs, 4, out + n_out);
  GP_TRY(gp_args_files_distinct(in, n_in, out, n_out));
  static const int late[] = {F_SAVE, F_TRACE, F_TRANSLATIONS};
  for (int i = 0; i < 3; i++)
    if (flags[late[i]].given) GP_TRY(gp_args_output_ok(&flags[late[i]], 1, &out_stale));
  /* the log is written in place (appended to on --resume): checked, left as it was */
  if (flags[F_LOG].given) GP_TRY(gp_args_output_ok(&flags[F_LOG], 0, NULL));
  return GP_OK;
}

/* Applies the flags that stand for model-file settings (but --batch-size and --micro-batches,
 * which went into the load as settings). */
static gp_status apply_flags(gp_model *m) {
  gp_train_spec *t = &m->train;
  if (flags[F_STEPS].given) t->steps = flags[F_STEPS].i;
  if (flags[F_EPOCHS].given) {
    t->epochs = flags[F_EPOCHS].i;
    if (!flags[F_STEPS].given) t->steps = 0;
  }
  if (flags[F_SEED].given) t->seed = (uint64_t)flags[F_SEED].i;
  if (flags[F_EVAL_EVERY].given) t->eval_every = flags[F_EVAL_EVERY].i;
  if (flags[F_DATA].given && strcmp(flags[F_DATA].s, "synthetic") != 0)
    return GP_ERR(GP_ERR_USAGE,
                  "--data: only 'synthetic' is accepted (the model file's data "
                  "section names real data), got '%s'",
                  flags[F_DATA].s);
  const gp_cli_pipeline pf = {&flags[F_STAGES], &flags[F_SCHEDULE], &flags[F_REMAT],
                              &flags[F_BALANCE], &flags[F_DEVICES]};
  GP_TRY(gp_cli_pipeline_apply(&pf, m, &m->pipeline));
  if (flags[F_PARTITION].given) GP_TRY(apply_plan_file(m));
  if (t->batch_size < m->pipeline.micro_batches) {
    /* either may come from a flag, the model file or (M) the plan: name where */
    int plan = flags[F_PARTITION].given;
    const char *mfrom = plan                   ? flags[F_PARTITION].s
                        : flags[F_MICRO].given ? "--micro-batches"
                                               : "pipeline.micro_batches";
    return GP_ERR(GP_ERR_USAGE,
                  "a batch of %" PRId64 " (%s) cannot be split into %d micro-batches (%s%s)",
                  t->batch_size, flags[F_BATCH].given ? "--batch-size" : "train.batch_size",
                  m->pipeline.micro_batches, plan ? "micro_batches in the plan " : "", mfrom);
  }
  static const struct {
    int flag;
    const char *why;
  } trains[] = {
      {F_STEPS, ""},
      {F_EPOCHS, ""},
      {F_SAVE, ""},
      {F_EVAL_EVERY, ""},
      {F_TRACE, " (a trace records the training steps)"},
      {F_CKPT_DIR, " (--load DIR/checkpoint.safetensors evaluates a checkpoint's weights)"},
      {F_CKPT_EVERY, " (--load DIR/checkpoint.safetensors evaluates a checkpoint's weights)"},
      {F_RESUME, " (--load DIR/checkpoint.safetensors evaluates a checkpoint's weights)"},
      {F_OVERWRITE, ""},
  };
  for (size_t i = 0; flags[F_EVAL_ONLY].given && i < sizeof trains / sizeof trains[0]; i++)
    if (flags[trains[i].flag].given)
      return GP_ERR(GP_ERR_USAGE, "--eval-only trains nothing, so %s does not apply%s",
                    flags[trains[i].flag].name, trains[i].why);
  if (flags[F_RESUME].given && !flags[F_CKPT_DIR].given)
    return GP_ERR(GP_ERR_USAGE, "--resume needs --checkpoint-dir DIR");
  if (flags[F_CKPT_EVERY].given && !flags[F_CKPT_DIR].given)
    return GP_ERR(GP_ERR_USAGE, "--checkpoint-every needs --checkpoint-dir DIR");
  if (flags[F_RESUME].given && flags[F_LOAD].given)
    return GP_ERR(GP_ERR_USAGE, "--resume and --load both set the weights; use one");
  if (flags[F_OVERWRITE].given && (flags[F_RESUME].given || !flags[F_CKPT_DIR].given))
    return GP_ERR(GP_ERR_USAGE, "--overwrite %s",
                  flags[F_RESUME].given ? "and --resume: one replaces the checkpoint, "
                                          "the other continues it; use one"
                                        : "needs --checkpoint-dir DIR");
  /* the folder first: outputs may go into it, and the checks compare files in it; one this
   * run made goes again when they refuse */
  int made = 0;
  if (flags[F_CKPT_DIR].given) GP_TRY(gp_ckpt_dir_claim(flags[F_CKPT_DIR].s, &ckpt_stale, &made));
  gp_status s = check_files(m);
  if (s == GP_OK && flags[F_CKPT_DIR].given && !flags[F_RESUME].given)
    s = gp_ckpt_dir_fresh(flags[F_CKPT_DIR].s, flags[F_OVERWRITE].given);
  if (s == GP_OK && flags[F_RESUME].given) {
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%.4000s/checkpoint.safetensors", flags[F_CKPT_DIR].s);
    if (access(ck, F_OK) != 0)
      s = GP_ERR(GP_ERR_IO, "--resume: %s holds no checkpoint to resume from (%s: %s)",
                 flags[F_CKPT_DIR].s, ck, strerror(errno));
  }
  if (s != GP_OK && made) gp_ckpt_dir_unmake(flags[F_CKPT_DIR].s);
  return s;
}

/* The training and evaluated splits (--eval-only: the test split); --translations needs a
 * translation model on real text. */
static gp_status open_data(run *r) {
  gp_model *m = r->m;
  int seq = gp_seq_is_sequence_model(m);
  if (flags[F_TRANSLATIONS].given && !seq)
    return GP_ERR(GP_ERR_USAGE, "--translations: %s is not a translation model", m->file);
  gp_data_opts o = {.synthetic = flags[F_DATA].given,
                    .train = !flags[F_EVAL_ONLY].given,
                    .eval = 1,
                    .batch = m->train.batch_size,
                    .seed = m->train.seed};
  GP_TRY(gp_data_open(m, &o, &r->d));
  if (!flags[F_TRANSLATIONS].given || gp_data_translates(&r->d)) return GP_OK;
  if (flags[F_DATA].given || m->data.dataset == GP_DATA_SYNTHETIC)
    return GP_ERR(GP_ERR_USAGE,
                  "--translations: synthetic data has no text to translate (drop --data "
                  "synthetic or --translations)");
  return GP_ERR(GP_ERR_USAGE, "--translations: %s is not a translation model", m->file);
}

/* The training data's position: (epoch, next batch). */
static void data_tell(const run *r, int64_t *epoch, int64_t *index) {
  gp_batch_source_tell(r->d.train, epoch, index);
}

/* Whether the training loop evaluates after step s (the run's end evaluates besides). */
static int eval_at(const gp_train_spec *ts, int64_t s, int64_t per_epoch) {
  if (ts->eval_every > 0) return s % ts->eval_every == 0;
  return per_epoch > 0 && s % per_epoch == 0;
}

/* eval_due: the evaluation after this step was cut short, and a resumed run does it first. */
static gp_status checkpoint(run *r, gp_progress *pg, int eval_due) {
  gp_ckpt_pos pos = {.eval_due = eval_due, .elapsed_s = gp_progress_elapsed(pg)};
  data_tell(r, &pos.epoch, &pos.index);
  GP_TRY(gp_trainer_save_checkpoint(&r->t, flags[F_CKPT_DIR].s, &pos));
  r->ckpt_step = r->t.step;
  gp_progress_note(pg, "checkpoint  step %" PRId64 "  %s/checkpoint.safetensors", r->t.step,
                   flags[F_CKPT_DIR].s);
  return GP_OK;
}

/* SIGINT or SIGTERM asked to stop, between steps or in an evaluation (`during`: "in the
 * evaluation ", or NULL), which is dropped: what was trained is kept in a checkpoint (when
 * there is a folder for one), the trace so far is written, and the run ends with the signal's
 * exit code. --save is written only by a run that trained every step. */
static gp_status stop_interrupted(run *r, gp_progress *pg, int64_t total, const char *during) {
  const char *sig = gp_interrupt_name(gp_interrupted());
  GP_TRY(gp_progress_interrupted(pg, r->t.step, sig));
  char kept[PATH_MAX + 128];
  if (r->t.step == 0) {
    snprintf(kept, sizeof kept, "no step was trained");
  } else if (flags[F_CKPT_DIR].given) {
    if (r->ckpt_step != r->t.step) GP_TRY(checkpoint(r, pg, during != NULL));
    snprintf(kept, sizeof kept,
             "%s/checkpoint.safetensors holds step %" PRId64 ": --resume goes on",
             flags[F_CKPT_DIR].s, r->t.step);
  } else if (r->saved) {
    snprintf(kept, sizeof kept, "%s holds the weights of step %" PRId64, flags[F_SAVE].s,
             r->t.step);
  } else {
    snprintf(kept, sizeof kept, "nothing was saved (--checkpoint-dir DIR keeps a run to resume)");
  }
  if (flags[F_TRACE].given && !r->traced) {
    GP_TRY(gp_pipeline_write_trace(r->t.pl, flags[F_TRACE].s));
    gp_progress_note(pg, "wrote the trace to %s", flags[F_TRACE].s);
  }
  gp_progress_done(pg);
  return GP_ERR(GP_ERR_INTERRUPTED,
                "%s received: stopped %safter step %" PRId64 " of %" PRId64 "; %s", sig,
                during ? during : "", r->t.step, total, kept);
}

/* An evaluation's loss is finite unless the weights are not (the last step's update can make
 * them so after its own loss was computed). */
static gp_status eval_finite(const run *r, const char *split, double loss) {
  if (isfinite(loss)) return GP_OK;
  return GP_ERR(GP_ERR_RUNTIME,
                "the %s loss is %s after step %" PRId64 " (lower the learning rate?)", split,
                isnan(loss) ? "NaN" : "infinite", r->t.step);
}

/* The translations in corpus order, one a line (a sentence not decoded has none). */
static gp_status write_hyps(FILE *fp, const char *path, const void *arg) {
  (void)path; /* gp_args_write_output checks the stream */
  const gp_decode_result *h = arg;
  for (int64_t p = 0; p < h->n_text; p++)
    if (h->text[p]) fprintf(fp, "%s\n", h->text[p]);
  return GP_OK;
}

/* BLEU of the greedy translations of an evaluated split. */
typedef struct bleu_eval {
  double bleu; /* < 0: nothing decoded */
  int64_t sentences;
  char line[160]; /* sacreBLEU's verbose line */
  double seconds;
} bleu_eval;

/* Where the data decodes translations: greedy decoding of the evaluated split, scored by
 * BLEU; the final split's translations go to --translations. */
static gp_status translate(run *r, int final, bleu_eval *out) {
  memset(out, 0, sizeof *out);
  out->bleu = -1;
  gp_decode_set set;
  int any;
  GP_TRY(gp_data_decode_set(&r->d, final, &set, &any));
  if (!any) return GP_OK;
  double t0 = gp_now();
  gp_decode_result res;
  gp_status s = gp_decode_bleu(&r->t, &set, &res);
  gp_decode_set_free(&set);
  GP_TRY(s);
  const gp_flag hyps = {.name = "--translations", .s = flags[F_TRANSLATIONS].s};
  if (final && flags[F_TRANSLATIONS].given) s = gp_args_write_output(&hyps, write_hyps, &res);
  out->bleu = res.bleu;
  out->sentences = res.sentences;
  snprintf(out->line, sizeof out->line, "%s", res.bleu_line);
  out->seconds = gp_now() - t0;
  gp_decode_result_free(&res);
  return s;
}

/* An evaluation of the split evaluated during training (final 0) or of the final one
 * (final 1; for images they are the same test split): loss and accuracy, and for tokens
 * perplexity and, for translations, BLEU. */
static gp_status evaluate(run *r, gp_progress *pg, int64_t epoch, int final, gp_metrics *ev) {
  gp_batch_source *src = final ? r->d.test : r->d.eval;
  gp_batch_source_stats st;
  gp_batch_source_stats_get(src, &st);
  double t0 = gp_now();
  bleu_eval be;
  GP_TRY(gp_trainer_evaluate(&r->t, src, ev));
  GP_TRY(translate(r, final, &be));
  if (st.tokens)
    GP_TRY(gp_progress_eval_seq(pg, r->t.step, epoch, st.split, ev->loss, ev->accuracy,
                                ev->perplexity, ev->ppl_targets, st.left_out, be.bleu, be.sentences,
                                gp_now() - t0));
  else
    GP_TRY(
        gp_progress_eval(pg, r->t.step, epoch, ev->loss, ev->accuracy, ev->samples, gp_now() - t0));
  GP_TRY(eval_finite(r, st.split, ev->loss));
  if (be.bleu >= 0)
    gp_progress_note(pg, "  %s: %s (%lld sentence%s, greedy, %.1f s)", st.split, be.line,
                     (long long)be.sentences, be.sentences == 1 ? "" : "s", be.seconds);
  r->last = *ev;
  r->last_st = st;
  r->last_bleu = be.bleu;
  r->last_sentences = be.sentences;
  return GP_OK;
}

/* What the final line's numbers are of: the step trained to, or --eval-only's weights. */
static void weights_name(const run *r, char *buf, size_t n) {
  if (!flags[F_EVAL_ONLY].given)
    snprintf(buf, n, "step %" PRId64, r->t.step);
  else if (!flags[F_LOAD].given)
    snprintf(buf, n, "initial weights (seed %" PRIu64 ")", r->t.seed);
  else if (r->loaded_step >= 0)
    snprintf(buf, n, "weights of %s (step %" PRId64 ")", flags[F_LOAD].s, r->loaded_step);
  else
    snprintf(buf, n, "weights of %s", flags[F_LOAD].s);
}

/* The last line of a run: the last evaluation (of the test split). */
static void print_final(const run *r, const gp_progress *pg) {
  const gp_metrics *ev = &r->last;
  const gp_batch_source_stats *st = &r->last_st;
  char who[PATH_MAX + 64];
  weights_name(r, who, sizeof who);
  if (!st->tokens) {
    printf("final: %s  test loss %.4f  test accuracy %.4f", who, ev->loss, ev->accuracy);
  } else {
    char pp[32];
    printf("final: %s  %s loss %.4f  perplexity %s  token accuracy %.4f", who, st->split,
           ev->loss, gp_progress_ppl(pp, ev->perplexity), ev->accuracy);
    if (st->left_out)
      printf("  (%lld pair%s longer than a row left out)", (long long)st->left_out,
             st->left_out == 1 ? "" : "s");
    if (r->last_bleu >= 0)
      printf("  BLEU %.2f (%lld sentence%s)", r->last_bleu, (long long)r->last_sentences,
             r->last_sentences == 1 ? "" : "s");
  }
  printf("  (%.1f s)\n", gp_now() - pg->t0);
}

/* An evaluation that a signal drops, to stop with what was trained (stop_interrupted). */
static gp_status evaluate_or_stop(run *r, gp_progress *pg, int64_t epoch, gp_metrics *ev,
                                  int64_t total) {
  gp_status s = evaluate(r, pg, epoch, 0, ev);
  return s == GP_ERR_INTERRUPTED ? stop_interrupted(r, pg, total, "in the evaluation ") : s;
}

/* Where the data time went: the trainer's wait for batches, and skipped bad samples. */
static void report_data(run *r, double wall) {
  gp_batch_source_stats st;
  gp_batch_source_stats_get(r->d.train, &st);
  if (st.workers < 0) return; /* no decode threads: token rows are made as they are asked for */
  printf("data: %d decode thread%s, waited %.2f s for %" PRId64 " batch%s (%.1f%% of %.1f s)\n",
         st.workers, st.workers == 1 ? "" : "s", st.wait_s, st.batches, st.batches == 1 ? "" : "es",
         wall > 0 ? 100.0 * st.wait_s / wall : 0.0, wall);
  if (st.skipped > 0)
    fprintf(stderr, "gpipe-train: warning: skipped %" PRId64 " bad training sample%s (first: %s)\n",
            st.skipped, st.skipped == 1 ? "" : "s", st.first_skip);
  gp_batch_source_stats_get(r->d.test, &st);
  if (st.skipped > 0)
    fprintf(stderr, "gpipe-train: warning: skipped %" PRId64 " bad test sample%s (first: %s)\n",
            st.skipped, st.skipped == 1 ? "" : "s", st.first_skip);
}

/* With stages: how busy each was per training step (on a GPU, the GPU's time) and how much of
 * the steps it waited (and the stage that set each step's pace), against GPipe's bubble
 * (K-1)/(M+K-1) for equal stages, the schedule simulated with the stages' mean times (the idle that
 * unequal stages alone would leave) and the steps replayed with each action's own time (adding the
 * actions' spread): where the pipeline lost time. */
static void report_pipeline(run *r) {
  int k = gp_pipeline_stages(r->t.pl), m = r->m->pipeline.micro_batches;
  if (k < 2) return;
  char busy[GP_MAX_DEVICES * 16] = "", idle[GP_MAX_DEVICES * 16] = "";
  int on_gpu = 0;
  for (int s = 0; s < k; s++) {
    gp_stage_stats ss;
    gp_pipeline_stats(r->t.pl, s, &ss);
    if (ss.steps < 1 || ss.span_s <= 0) return; /* no training step was timed */
    on_gpu |= ss.device_time;
    size_t nb = strlen(busy), ni = strlen(idle);
    snprintf(busy + nb, sizeof busy - nb, "%s%.1f", s ? ", " : "", gp_stage_busy_ms(&ss));
    snprintf(idle + ni, sizeof idle - ni, "%s%.1f%%", s ? ", " : "", 100 * gp_stage_idle(&ss));
  }
  double sim, rep = gp_pipeline_bubble_replayed(r->t.pl);
  char simmed[160] = "";
  if (gp_pipeline_bubble_sim(r->t.pl, &sim) == GP_OK && isfinite(sim))
    snprintf(simmed, sizeof simmed, "; the schedule with these stage times: %.1f%%", 100 * sim);
  if (isfinite(rep))
    snprintf(simmed + strlen(simmed), sizeof simmed - strlen(simmed),
             "; with each action's own time: %.1f%%", 100 * rep);
  double slow = gp_pipeline_bubble_bottleneck(r->t.pl);
  char slowest[64] = "";
  if (isfinite(slow))
    snprintf(slowest, sizeof slowest, ", each step's busiest stage %.1f%%", 100 * slow);
  printf("pipeline: stages busy %s ms per step%s, idle %s of the steps%s (GPipe's bubble for K "
         "= %d, M = %d: %.1f%%%s)\n",
         busy, on_gpu ? " (GPU time)" : "", idle, slowest, k, m,
         100.0 * (k - 1) / (double)(m + k - 1), simmed);
}

/* Each stage's measured peak of backend memory (parameters, gradients, optimizer state,
 * activations, scratch): what --memory-limit holds each stage to. */
static void report_memory(run *r) {
  const double mib = 1048576.0;
  int k = gp_pipeline_stages(r->t.pl);
  size_t sum = 0;
  char per[GP_MAX_DEVICES * 16] = "";
  for (int s = 0; s < k; s++) {
    gp_stage_stats ss;
    gp_pipeline_stats(r->t.pl, s, &ss);
    sum += ss.mem_peak;
    size_t n = strlen(per);
    snprintf(per + n, sizeof per - n, "%s%.2f", s ? ", " : "", (double)ss.mem_peak / mib);
  }
  printf("memory: peak %.2f MiB (%zu bytes)", (double)sum / mib, sum);
  if (k > 1) printf(", the sum of %d stages: %s MiB", k, per);
  if (r->mem_limit) printf("; limit %.2f MiB per stage", (double)r->mem_limit / mib);
  printf("\n");
}

/* The pipeline's line, when there is more than one stage or micro-batch; with stages but one
 * micro-batch, that they take turns and what overlaps them. */
static void note_pipeline(gp_progress *pg, const gp_plan *plan, int64_t batch) {
  if (plan->stages == 1 && plan->micro == 1) return;
  char bal[GP_PLAN_BALANCE_LEN], turns[160] = "";
  gp_plan_balance_str(plan, bal, sizeof bal);
  int64_t more = gp_plan_micro_hint(plan->stages, batch);
  if (plan->stages > 1 && plan->micro == 1 && more > 1)
    snprintf(turns, sizeof turns,
             " (one micro-batch: the stages take turns, as naive model parallelism; "
             "--micro-batches %" PRId64 " overlaps them)",
             more);
  gp_progress_note(pg,
                   "pipeline: %d stage%s of %s unit%s, %d micro-batch%s, %s schedule, "
                   "re-materialization %s%s",
                   plan->stages, plan->stages == 1 ? "" : "s", bal, strcmp(bal, "1") ? "s" : "",
                   plan->micro, plan->micro == 1 ? "" : "es", gp_schedule_names()[plan->schedule],
                   gp_remat_names()[plan->remat], turns);
}

/* The trainer of the model's pipeline, on *threads CPU threads, with the weights of --load. */
static gp_status make_trainer(run *r, gp_plan *plan, int *threads) {
  gp_model *m = r->m;
  *threads = flags[F_THREADS].given ? (int)flags[F_THREADS].i : gp_cpu_cores();
  GP_TRY(gp_plan_make(m, &m->pipeline, plan));
  gp_pipeline_opts po = {.cores = *threads,
                         .pin = flags[F_PIN].given,
                         .watchdog_s = flags[F_WATCHDOG].given ? (double)flags[F_WATCHDOG].i : 0,
                         .trace = flags[F_TRACE].given,
                         .precision = r->precision,
                         .nondeterministic = flags[F_NONDET].given,
                         .mem_limit = r->mem_limit};
  GP_TRY(gp_trainer_init(&r->t, m, plan, &po, m->train.seed));
  r->t.check = gp_interrupt_check; /* a signal ends an evaluation within a batch */
  r->have_trainer = 1;
  r->loaded_step = -1;
  if (flags[F_LOAD].given) GP_TRY(gp_trainer_load_weights(&r->t, flags[F_LOAD].s, &r->loaded_step));
  return GP_OK;
}

/* The run's first lines: the model, and a sequence model's data. */
static void note_model(const run *r, gp_progress *pg) {
  const gp_model *m = r->m;
  gp_progress_note(pg, "model %s: %d unit%s, %d layer%s, %.3fM parameters (%" PRId64 ")", m->name,
                   m->n_units, m->n_units == 1 ? "" : "s", m->n_nodes, m->n_nodes == 1 ? "" : "s",
                   (double)m->n_params / 1e6, m->n_params);
  char desc[512] = "";
  if (r->d.train) gp_batch_source_describe(r->d.train, desc, sizeof desc);
  if (desc[0]) gp_progress_note(pg, "data %s", desc);
  if (r->loaded_step >= 0)
    gp_progress_note(pg,
                     "loaded the weights of step %" PRId64
                     " from the checkpoint %s (not its optimizer state or data position: "
                     "--checkpoint-dir DIR --resume continues that run)",
                     r->loaded_step, flags[F_LOAD].s);
}

static void note_stale_outputs(gp_progress *pg) {
  if (out_stale)
    gp_progress_note(pg,
                     "removed %d temporary file%s that killed runs left beside the output files",
                     out_stale, out_stale == 1 ? "" : "s");
}

/* The OpenBLAS kernels gpipe chose in place of OpenBLAS's own pick, for the machine line. */
static void blas_note(char *buf, size_t n) {
  buf[0] = 0;
  if (gp_blas_replaced()) /* see gp_blas_pick_kernels */
    snprintf(buf, n, " (OpenBLAS %s kernels: it had picked %s for this CPU)", gp_blas_kernels(),
             gp_blas_replaced());
}

static gp_status train(run *r) {
  gp_model *m = r->m;
  const gp_train_spec *ts = &m->train;
  int64_t b = ts->batch_size;
  int64_t per_epoch = gp_batch_source_batches(r->d.train); /* < 0: a stream of unknown size */
  if (per_epoch < 0 && ts->steps <= 0)
    return GP_ERR(GP_ERR_SPEC,
                  "%s: the training shards are streamed and their size is unknown: set "
                  "train.steps, or data.train_samples to count in epochs",
                  m->file);
  int64_t total = ts->steps > 0 ? ts->steps : ts->epochs * per_epoch;
  GP_TRY(gp_fit_check_batchnorm(m, b, m->pipeline.micro_batches)); /* training only */
  int threads;
  gp_plan plan;
  GP_TRY(make_trainer(r, &plan, &threads));
  r->ckpt_step = -1;
  gp_ckpt_pos pos = {0};
  if (flags[F_RESUME].given) {
    GP_TRY(gp_trainer_load_checkpoint(&r->t, flags[F_CKPT_DIR].s, &pos));
    r->ckpt_step = r->t.step;
    if (r->t.step > total)
      return GP_ERR(GP_ERR_USAGE,
                    "%s/checkpoint.safetensors is at step %" PRId64 ", past the %" PRId64
                    " steps of this run",
                    flags[F_CKPT_DIR].s, r->t.step, total);
    gp_status sk = gp_batch_source_seek(r->d.train, pos.epoch, pos.index);
    if (sk != GP_OK)
      return gp_error_prefix(GP_ERR_DATA,
                             "%s/checkpoint.safetensors: its data position (gpipe.epoch %" PRId64
                             ", gpipe.index %" PRId64 ") is not in this run's training data: ",
                             flags[F_CKPT_DIR].s, pos.epoch, pos.index);
  }
  /* a finished run's checkpoint: its evaluations are logged already; they are repeated only
   * for the final line */
  int complete = flags[F_RESUME].given && r->t.step == total && !pos.eval_due;
  int64_t log_dropped = 0;
  if (flags[F_LOG].given && !complete) { /* a finished run's log is left as it is */
    if (r->t.step)
      GP_TRY(gp_progress_log_resume(flags[F_LOG].s, r->t.step, (int)pos.eval_due, &r->log,
                                    &log_dropped));
    else if (!(r->log = fopen(flags[F_LOG].s, "w")))
      return GP_ERR(GP_ERR_IO, "--log %s: cannot write: %s", flags[F_LOG].s, strerror(errno));
  }

  gp_progress pg;
  gp_progress_init(&pg, flags[F_QUIET].given, r->log, flags[F_LOG].s);
  if (flags[F_RESUME].given) GP_TRY(gp_progress_resumed(&pg, r->t.step, pos.elapsed_s));
  note_model(r, &pg);
  char blas[128];
  blas_note(blas, sizeof blas);
  char epoch_size[64] = "epoch size unknown: streamed shards"; /* per_epoch < 0 */
  if (per_epoch >= 0) snprintf(epoch_size, sizeof epoch_size, "%" PRId64 " per epoch", per_epoch);
  gp_progress_note(&pg,
                   "training %" PRId64 " step%s of batch %" PRId64 " (%s), %d CPU thread%s%s, "
                   "precision %s%s",
                   total, total == 1 ? "" : "s", b, epoch_size, threads, threads == 1 ? "" : "s",
                   blas, r->precision == GP_PREC_BF16 ? "bf16" : "fp32",
                   r->t.step ? ", resumed" : "");
  note_pipeline(&pg, &plan, b);
  note_stale_outputs(&pg);
  if (ckpt_stale)
    gp_progress_note(&pg, "removed %d temporary checkpoint%s a killed run left in %s", ckpt_stale,
                     ckpt_stale == 1 ? "" : "s", flags[F_CKPT_DIR].s);
  if (log_dropped)
    gp_progress_note(&pg, "log: cut %" PRId64 " line%s logged after step %" PRId64 "%s from %s",
                     log_dropped, log_dropped == 1 ? "" : "s", r->t.step,
                     pos.eval_due ? " (the checkpoint's) or by its evaluation (done again)"
                                  : " (the checkpoint's)",
                     flags[F_LOG].s);
  if (complete)
    gp_progress_note(&pg,
                     "the checkpoint is at the run's last step, %" PRId64
                     ": nothing to train; the final evaluation is repeated%s",
                     total, flags[F_LOG].given ? " (not logged again)" : "");
  int64_t every = ts->log_every > 0 ? ts->log_every : 50;
  gp_rate rate;
  gp_rate_init(&rate, gp_now());
  gp_metrics ev = {0}, tr = {0};
  int evaluated_last = 0;
  if (pos.eval_due && eval_at(ts, r->t.step, per_epoch)) { /* cut short by a signal: first */
    int64_t epoch, idx;
    data_tell(r, &epoch, &idx);
    GP_TRY(evaluate_or_stop(r, &pg, idx == 0 && epoch > 0 ? epoch - 1 : epoch, &ev, total));
    evaluated_last = 1;
  }
  while (r->t.step < total) {
    if (gp_interrupted()) return stop_interrupted(r, &pg, total, NULL);
    int64_t epoch, idx;
    gp_batch sb;
    GP_TRY(gp_batch_source_next(r->d.train, &sb, NULL));
    data_tell(r, &epoch, &idx); /* the epoch this batch came from */
    if (idx == 0 && epoch > 0) epoch--;
    double lr = gp_lr_at(ts, r->t.step, total);
    GP_TRY(gp_trainer_step(&r->t, &sb, lr, &tr));
    double shown = gp_rate_add(&rate, sb.n, gp_now());
    int64_t s = r->t.step;
    GP_TRY(gp_progress_step(&pg, s, total, epoch, tr.loss, tr.accuracy, lr, shown,
                            s % every == 0 || s == total));
    evaluated_last = 0;
    int epoch_end = per_epoch > 0 && s % per_epoch == 0;
    if (eval_at(ts, s, per_epoch)) {
      GP_TRY(evaluate_or_stop(r, &pg, epoch, &ev, total));
      evaluated_last = 1;
    }
    if (flags[F_CKPT_DIR].given &&
        (epoch_end || (flags[F_CKPT_EVERY].given && s % flags[F_CKPT_EVERY].i == 0)) && s != total)
      GP_TRY(checkpoint(r, &pg, 0));
  }
  int64_t epoch, idx;
  data_tell(r, &epoch, &idx);
  if (!evaluated_last && r->d.test == r->d.eval)
    GP_TRY(evaluate_or_stop(r, &pg, epoch, &ev, total));
  if (r->d.test != r->d.eval) { /* the test split, apart from the one evaluated so far */
    gp_status es = evaluate(r, &pg, epoch, 1, &ev);
    if (es == GP_ERR_INTERRUPTED)
      return stop_interrupted(r, &pg, total, "in the final evaluation ");
    GP_TRY(es);
  }
  /* after every evaluation, so that a resumed run repeats none of them */
  if (flags[F_CKPT_DIR].given && (r->ckpt_step != r->t.step || pos.eval_due))
    GP_TRY(checkpoint(r, &pg, 0));
  if (flags[F_TRACE].given) {
    GP_TRY(gp_pipeline_write_trace(r->t.pl, flags[F_TRACE].s));
    gp_progress_note(&pg, "wrote the trace to %s", flags[F_TRACE].s);
    r->traced = 1;
  }
  if (flags[F_SAVE].given) {
    GP_TRY(gp_trainer_save_weights(&r->t, flags[F_SAVE].s));
    gp_progress_note(&pg, "saved weights to %s", flags[F_SAVE].s);
    r->saved = 1;
  }
  gp_progress_done(&pg);
  report_data(r, gp_now() - pg.t0);
  report_memory(r);
  report_pipeline(r);
  print_final(r, &pg);
  return GP_OK;
}

/* --eval-only: the test split's evaluation of the weights of --load (or the initial ones), the
 * lines a training run ends with, and nothing trained or saved. */
static gp_status eval_only(run *r) {
  gp_model *m = r->m;
  int64_t b = m->train.batch_size;
  int threads;
  gp_plan plan;
  GP_TRY(make_trainer(r, &plan, &threads));
  if (r->loaded_step >= 0) r->t.step = r->loaded_step; /* what the evaluation is of */
  if (flags[F_LOG].given && !(r->log = fopen(flags[F_LOG].s, "w")))
    return GP_ERR(GP_ERR_IO, "--log %s: cannot write: %s", flags[F_LOG].s, strerror(errno));
  gp_progress pg;
  gp_progress_init(&pg, flags[F_QUIET].given, r->log, flags[F_LOG].s);
  note_model(r, &pg);
  char blas[128], who[PATH_MAX + 64];
  blas_note(blas, sizeof blas);
  weights_name(r, who, sizeof who);
  gp_progress_note(&pg,
                   "evaluating the %s on the test split (no training), batch %" PRId64
                   ", %d CPU thread%s%s, precision %s",
                   who, b, threads, threads == 1 ? "" : "s", blas,
                   r->precision == GP_PREC_BF16 ? "bf16" : "fp32");
  note_pipeline(&pg, &plan, b);
  note_stale_outputs(&pg);
  gp_metrics ev = {0};
  gp_status s = evaluate(r, &pg, 0, 1, &ev);
  if (s == GP_ERR_INTERRUPTED)
    return GP_ERR(s, "%s received: stopped the evaluation; no result",
                  gp_interrupt_name(gp_interrupted()));
  GP_TRY(s);
  gp_progress_done(&pg);
  report_memory(r);
  print_final(r, &pg);
  return GP_OK;
}

int main(int argc, char **argv) {
  gp_args_std_fds();
  gp_interrupt_install("gpipe-train",
                       "stopping after the step under way (an evaluation is cut short)");
  const char *pos[1];
  int npos;
  run r = {0};
  gp_status s = gp_args_parse(argc, argv, flags, pos, 1, &npos);
  if (s != GP_OK) return fail(s);
  if (flags[F_HELP].given) {
    gp_args_usage("gpipe-train", "MODEL.yaml [flags]", flags);
    return 0;
  }
  if (flags[F_VERSION].given) {
    printf("gpipe-train %s\n", GP_VERSION);
    return 0;
  }
  if (npos != 1) {
    gp_args_free(flags);
    fprintf(
        stderr,
        "gpipe-train: expected one model file (usage: gpipe-train MODEL.yaml [flags]; --help)\n");
    return 2;
  }
  gp_blas_pick_kernels(argv);
  const gp_cli_load load = {"gpipe-train", &flags[F_SET], &flags[F_BATCH], &flags[F_MICRO], NULL};
  if (s == GP_OK) s = gp_cli_model_load(&load, pos[0], &r.m);
  if (s == GP_OK) s = apply_flags(r.m);
  if (s == GP_OK && flags[F_PRECISION].given)
    s = gp_args_precision("--precision", flags[F_PRECISION].s, &r.precision);
  if (s == GP_OK && flags[F_MEMORY].given)
    s = gp_args_size("--memory-limit", flags[F_MEMORY].s, &r.mem_limit);
  if (s == GP_OK) s = open_data(&r);
  if (s == GP_OK && flags[F_EVAL_ONLY].given) {
    gp_interrupt_install("gpipe-train", "stopping the evaluation");
    s = eval_only(&r);
  } else if (s == GP_OK) {
    s = train(&r);
  }
  s = run_free(&r, s);
  if (s == GP_OK && (fflush(stdout) != 0 || ferror(stdout)))
    s = GP_ERR(GP_ERR_IO, "stdout: writing failed");
  gp_args_free(flags);
  return s == GP_OK ? 0 : fail(s);
}
