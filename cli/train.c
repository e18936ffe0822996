/* gpipe-train: trains and evaluates a model file. This file: the flags, the run they set up,
 * and main with its exit codes: 0 ok, 2 bad model file or usage, 1 failure, 128 + the signal
 * when SIGINT or SIGTERM stopped it. The loop is in train_loop.c, the reports in
 * train_report.c. */
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
#include "cli/train.h"
#include "cli/common.h"
#include "cli/split.h"
#include "cli/ckpt_dir.h"
#include "cli/dist_voice.h"
#include "cli/interrupt.h"
#include "cli/machine.h"
#include "cli/progress.h"
#include "core/spec/cfg.h"
#include "core/spec/spec.h"
#include "core/plan/plan_io.h"
#include "core/train/fit.h"
#include "core/train/checkpoint.h"
#include "core/train/trainer.h"
#include "data/data.h"
#include "gp_config.h"

gp_flag tr_flags[] = {
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
    [F_SHARD_SIZE] = {"--save-shard-size", GP_FLAG_STR, "SIZE",
                      "the largest file --save and checkpoints write (default 4GiB); larger ones "
                      "become shards and an index",
                      0},
    [F_THREADS] = {"--threads", GP_FLAG_INT, "N", "CPU threads (default: all cores)", 1,
                   .max = 1024},
    [F_EVAL_EVERY] = {"--eval-every", GP_FLAG_INT, "N",
                      "evaluate every N steps (default, or 0: at the end of each epoch)", 0},
    [F_STAGES] = {"--stages", GP_FLAG_INT, "K", "pipeline stages (default: the model file's)", 1},
    [F_MICRO] = {"--micro-batches", GP_FLAG_INT, "M", "micro-batches per mini-batch", 1},
    [F_SCHEDULE] = {"--schedule", GP_FLAG_STR, "gpipe|1f1b|zb-h1|zb-h2|interleaved|auto",
                    "pipeline schedule (default auto: the fastest simulated)", 0},
    [F_VIRTUAL] = {"--virtual-stages", GP_FLAG_INT, "V",
                   "interleaved: model chunks per stage (K x V chunks in all)", 1},
    [F_REMAT] = {"--remat", GP_FLAG_STR, "auto|always|except_last|never", "re-materialization", 0},
    [F_BALANCE] = {"--balance", GP_FLAG_STR, "a,b,...",
                   "units per stage (default: the split of --by; --resume: the checkpoint's)", 0},
    [F_BY] = {"--by", GP_FLAG_STR, "time|flops|params",
              "the automatic split balances unit times measured here (default; cached), "
              "estimated FLOPs or parameters",
              0},
    [F_CACHE] = {"--cache-dir", GP_FLAG_STR, "DIR",
                 "where --by time keeps measurements (default ~/.cache/gpipe)", 0},
    [F_DEVICES] = {"--devices", GP_FLAG_STR, "cpu,cpu,...", "device of each stage (or one for all)",
                   0},
    [F_PIN] = {"--pin", GP_FLAG_BOOL, NULL, "pin each stage's thread to its share of the cores", 0},
    [F_WATCHDOG] = {"--watchdog", GP_FLAG_INT, "SECONDS",
                    "report a stage that waits longer (default 300)", 1},
    [F_MEMORY] = {"--memory-limit", GP_FLAG_STR, "SIZE",
                  "memory of each stage's device (512MiB, 2GiB, 1.5GB, bytes): more is an error",
                  0},
    [F_PRECISION] = {"--precision", GP_FLAG_STR, "fp32|bf16|bf16-mixed",
                     "arithmetic of GEMMs and convolutions (bf16: bfloat16 operands, f32 "
                     "accumulation; bf16-mixed: also bf16 activations between layers; default "
                     "fp32)",
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
    [F_REPLICAS] = {"--replicas", GP_FLAG_INT, "R",
                    "data-parallel replicas of the pipeline, each over W / R of the processes "
                    "mpirun started (default: the model file's, 1)",
                    1},
    [F_LIVENESS] = {"--liveness-timeout", GP_FLAG_INT, "SECONDS",
                    "under mpirun: a process not heard from this long ends the run (default 20)",
                    1},
    [F_BEAM] = {"--beam", GP_FLAG_INT, "N",
                "translation models: beam search with N beams (default: greedy; --beam 1 searches, "
                "giving greedy's translations)",
                1, 1024},
    [F_LENPEN] = {"--lenpen", GP_FLAG_STR, "A",
                  "beam search: a finished hypothesis scores sum log p / length^A (fairseq's "
                  "length penalty; default 1)",
                  0},
    [F_NO_KV_CACHE] = {"--no-kv-cache", GP_FLAG_BOOL, NULL,
                       "decode by rerunning the whole model for every token (the reference the "
                       "cache must equal)",
                       0},
    [F_GENERATE] = {"--generate", GP_FLAG_INT, "N",
                    "language models: continue each line of --prompts by N ids (no training)", 1},
    [F_PROMPTS] = {"--prompts", GP_FLAG_STR, "FILE", "--generate's prompts, token ids a line", 0},
    [F_TEMPERATURE] = {"--temperature", GP_FLAG_STR, "T",
                       "--generate: sample from softmax(logits / T); 0 (default): greedy", 0},
    [F_TOP_K] = {"--top-k", GP_FLAG_INT, "K", "--generate: sample among the K likeliest ids", 1},
    [F_TOP_P] = {"--top-p", GP_FLAG_STR, "P",
                 "--generate: sample among the likeliest ids whose probability reaches P (0, 1]",
                 0},
    [F_HELP] = {"--help", GP_FLAG_BOOL, NULL, "show this help", 0},
    [F_VERSION] = {"--version", GP_FLAG_BOOL, NULL, "show the version", 0},
    {NULL},
};

int tr_ckpt_stale, tr_out_stale;

gp_status tr_lenpen(double *out) {
  double v = 1.0;
  if (tr_flags[F_LENPEN].given) {
    char *end;
    v = strtod(tr_flags[F_LENPEN].s, &end);
    if (end == tr_flags[F_LENPEN].s || *end || !isfinite(v))
      return GP_ERR(GP_ERR_USAGE,
                    "--lenpen %s: not a number (fairseq's length penalty: 1 "
                    "divides by the length, 0 not at all)",
                    tr_flags[F_LENPEN].s);
  }
  if (out) *out = v;
  return GP_OK;
}

static run *the_run;  /* for tr_fail: errors across processes name the rank */
static int voice = 1; /* this process speaks for the run: it checks and claims the outputs */

int tr_fail(gp_status s) {
  /* a stage that does not fit its device: what lowers a stage's memory, on the same line */
  const char *hint = s == GP_ERR_FULL ? "; more --stages, --remat always or a smaller "
                                        "--batch-size lower each stage's memory (gpipe-partition "
                                        "MODEL.yaml --stages K shows it per stage)"
                                      : "";
  int code = the_run ? tr_dist_fail(the_run, s, hint) : gp_cli_fail("gpipe-train", s, hint);
  return s == GP_ERR_INTERRUPTED ? gp_interrupt_exit_code() : code;
}

/* Frees the run; s, or the first error of closing the log. */
static gp_status run_free(run *r, gp_status s) {
  if (r->have_trainer && r->t.pl && gp_pipeline_wedged(r->t.pl)) {
    /* a stage is stuck in a computation and still uses the model: report and end here */
    fflush(stdout);
    _exit(tr_fail(s));
  }
  if (r->have_trainer) gp_trainer_free(&r->t);
  gp_data_close(&r->d);
  gp_model_free(r->m);
  if (r->log && (ferror(r->log) | fclose(r->log)) && s == GP_OK)
    s = GP_ERR(GP_ERR_IO, "%s: writing the log failed", tr_flags[F_LOG].s);
  return s;
}

/* --partition: the plan replaces the model file's pipeline section; gp_plan_make then
 * rebuilds the same plan from it (and checks the devices as for any other pipeline). */
static gp_status apply_plan_file(gp_model *m) {
  static const int clash[] = {F_STAGES, F_MICRO,   F_SCHEDULE, F_VIRTUAL,
                              F_REMAT,  F_BALANCE, F_DEVICES};
  for (size_t i = 0; i < sizeof clash / sizeof clash[0]; i++)
    if (tr_flags[clash[i]].given)
      return GP_ERR(GP_ERR_USAGE, "--partition and %s both set the pipeline; use one",
                    tr_flags[clash[i]].name);
  gp_plan plan;
  GP_TRY(gp_plan_read(tr_flags[F_PARTITION].s, m, &plan));
  gp_args_note("gpipe-train", plan.renamed);
  if (!plan.batch && !tr_flags[F_QUIET].given)
    fprintf(stderr,
            "%s: the plan records no batch_size (written before plans did); its %d "
            "micro-batches split this run's batch of %" PRId64 "\n",
            tr_flags[F_PARTITION].s, plan.micro, m->train.batch_size);
  gp_pipeline_spec *ps = &m->pipeline;
  ps->stages = gp_plan_devices(&plan);
  ps->virtual_stages = gp_plan_chunks(&plan);
  ps->micro_batches = plan.micro;
  ps->schedule = plan.schedule;
  ps->remat = plan.remat;
  ps->n_balance = plan.stages; /* the chunks */
  ps->n_devices = ps->stages;
  for (int s = 0; s < plan.stages; s++) {
    ps->balance[s] = plan.st[s].end_unit - plan.st[s].first_unit;
    if (s < ps->stages) memcpy(ps->devices[s], plan.st[s].device, sizeof ps->devices[s]);
  }
  ps->n_procs = plan.n_procs; /* read under mpirun (tr_dist_layout) */
  memcpy(ps->procs, plan.procs, sizeof ps->procs);
  return GP_OK;
}

/* No output may be the model file, the plan or the weights read, nor another output (the
 * checkpoint folder's checkpoint and lock included); the files written after training are
 * checked before it, so a bad path does not cost the run. */
static gp_status check_files(const gp_model *m) {
  gp_file_use in[3] = {{NULL, m->file, NULL}}, out[6];
  int n_in = 1, n_out = 0;
  if (tr_flags[F_PARTITION].given)
    in[n_in++] = (gp_file_use){"--partition", tr_flags[F_PARTITION].s, NULL};
  if (tr_flags[F_LOAD].given) in[n_in++] = (gp_file_use){"--load", tr_flags[F_LOAD].s, "--save"};
  char ck[2][PATH_MAX];
  for (int i = 0; i < 2 && tr_flags[F_CKPT_DIR].given; i++) {
    snprintf(ck[i], sizeof ck[i], "%.4000s/%s", tr_flags[F_CKPT_DIR].s,
             i ? "lock" : "checkpoint.safetensors");
    out[n_out++] = (gp_file_use){"--checkpoint-dir", ck[i], NULL};
  }
  static const int outs[] = {F_LOG, F_SAVE, F_TRACE, F_TRANSLATIONS};
  n_out += gp_args_file_uses(tr_flags, outs, 4, out + n_out);
  GP_TRY(gp_args_files_distinct(in, n_in, out, n_out));
  static const int late[] = {F_SAVE, F_TRACE, F_TRANSLATIONS};
  for (int i = 0; i < 3; i++)
    if (tr_flags[late[i]].given) GP_TRY(gp_args_output_ok(&tr_flags[late[i]], 1, &tr_out_stale));
  /* the log is written in place (appended to on --resume): checked, left as it was */
  if (tr_flags[F_LOG].given) GP_TRY(gp_args_output_ok(&tr_flags[F_LOG], 0, NULL));
  return GP_OK;
}

/* Applies the flags that stand for model-file settings (but --batch-size and --micro-batches,
 * which went into the load as settings). */
static gp_status apply_flags(gp_model *m) {
  gp_train_spec *t = &m->train;
  if (tr_flags[F_STEPS].given) t->steps = tr_flags[F_STEPS].i;
  if (tr_flags[F_EPOCHS].given) {
    t->epochs = tr_flags[F_EPOCHS].i;
    if (!tr_flags[F_STEPS].given) t->steps = 0;
  }
  if (tr_flags[F_SEED].given) t->seed = (uint64_t)tr_flags[F_SEED].i;
  gp_cost_by by; /* a bad --by is refused whether or not the run splits automatically */
  const gp_cli_split sf = {"gpipe-train", &tr_flags[F_BY], NULL, 1};
  GP_TRY(gp_cli_split_by(&sf, &by));
  if (tr_flags[F_REPLICAS].given) m->pipeline.replicas = (int)tr_flags[F_REPLICAS].i;
  if (tr_flags[F_EVAL_EVERY].given) t->eval_every = tr_flags[F_EVAL_EVERY].i;
  if (tr_flags[F_DATA].given && strcmp(tr_flags[F_DATA].s, "synthetic") != 0)
    return GP_ERR(GP_ERR_USAGE,
                  "--data: only 'synthetic' is accepted (the model file's data "
                  "section names real data), got '%s'",
                  tr_flags[F_DATA].s);
  const gp_cli_pipeline pf = {&tr_flags[F_STAGES],  &tr_flags[F_SCHEDULE], &tr_flags[F_REMAT],
                              &tr_flags[F_BALANCE], &tr_flags[F_DEVICES],  &tr_flags[F_VIRTUAL]};
  GP_TRY(gp_cli_pipeline_apply(&pf, m, &m->pipeline));
  if (tr_flags[F_PARTITION].given) GP_TRY(apply_plan_file(m));
  if (t->batch_size < (int64_t)m->pipeline.micro_batches * m->pipeline.replicas &&
      m->pipeline.replicas > 1)
    return GP_ERR(GP_ERR_USAGE,
                  "a batch of %" PRId64 " over %d replicas of %d micro-batches: each replica "
                  "needs a sample a micro-batch (use a batch of %" PRId64 " or more)",
                  t->batch_size, m->pipeline.replicas, m->pipeline.micro_batches,
                  (int64_t)m->pipeline.micro_batches * m->pipeline.replicas);
  if (t->batch_size < m->pipeline.micro_batches) {
    /* either may come from a flag, the model file or (M) the plan: name where */
    int plan = tr_flags[F_PARTITION].given;
    const char *mfrom = plan                      ? tr_flags[F_PARTITION].s
                        : tr_flags[F_MICRO].given ? "--micro-batches"
                                                  : "pipeline.micro_batches";
    return GP_ERR(GP_ERR_USAGE,
                  "a batch of %" PRId64 " (%s) cannot be split into %d micro-batches (%s%s)",
                  t->batch_size, tr_flags[F_BATCH].given ? "--batch-size" : "train.batch_size",
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
      {F_SHARD_SIZE, ""},
  };
  for (size_t i = 0; tr_flags[F_EVAL_ONLY].given && i < sizeof trains / sizeof trains[0]; i++)
    if (tr_flags[trains[i].flag].given)
      return GP_ERR(GP_ERR_USAGE, "--eval-only trains nothing, so %s does not apply%s",
                    tr_flags[trains[i].flag].name, trains[i].why);
  if (tr_flags[F_RESUME].given && !tr_flags[F_CKPT_DIR].given)
    return GP_ERR(GP_ERR_USAGE, "--resume needs --checkpoint-dir DIR");
  GP_TRY(tr_lenpen(NULL));
  if (tr_flags[F_BEAM].given && tr_flags[F_NO_KV_CACHE].given)
    return GP_ERR(GP_ERR_USAGE, "--beam %lld searches with the cache; --no-kv-cache is greedy only",
                  (long long)tr_flags[F_BEAM].i);
  if (tr_flags[F_CKPT_EVERY].given && !tr_flags[F_CKPT_DIR].given)
    return GP_ERR(GP_ERR_USAGE, "--checkpoint-every needs --checkpoint-dir DIR");
  if (tr_flags[F_RESUME].given && tr_flags[F_LOAD].given)
    return GP_ERR(GP_ERR_USAGE, "--resume and --load both set the weights; use one");
  if (tr_flags[F_OVERWRITE].given && (tr_flags[F_RESUME].given || !tr_flags[F_CKPT_DIR].given))
    return GP_ERR(GP_ERR_USAGE, "--overwrite %s",
                  tr_flags[F_RESUME].given ? "and --resume: one replaces the checkpoint, "
                                             "the other continues it; use one"
                                           : "needs --checkpoint-dir DIR");
  /* the folder first: outputs may go into it, and the checks compare files in it; one this
   * run made goes again when they refuse */
  int made = 0;
  if (!voice) return GP_OK; /* rank 0's outputs: checked there (two checks would race) */
  if (tr_flags[F_CKPT_DIR].given)
    GP_TRY(gp_ckpt_dir_claim(tr_flags[F_CKPT_DIR].s, &tr_ckpt_stale, &made));
  gp_status s = check_files(m);
  if (s == GP_OK && tr_flags[F_CKPT_DIR].given && !tr_flags[F_RESUME].given)
    s = gp_ckpt_dir_fresh(tr_flags[F_CKPT_DIR].s, tr_flags[F_OVERWRITE].given);
  if (s == GP_OK && tr_flags[F_RESUME].given) {
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%.4000s/checkpoint.safetensors", tr_flags[F_CKPT_DIR].s);
    char held[PATH_MAX]; /* checkpoint.safetensors, or the index of a sharded one */
    if (!gp_ckpt_find(tr_flags[F_CKPT_DIR].s, held, sizeof held) && access(ck, F_OK) != 0)
      s = GP_ERR(GP_ERR_IO, "--resume: %s holds no checkpoint to resume from (%s: %s)",
                 tr_flags[F_CKPT_DIR].s, ck, strerror(errno));
  }
  if (s != GP_OK && made) gp_ckpt_dir_unmake(tr_flags[F_CKPT_DIR].s);
  return s;
}

/* The training and evaluated splits (--eval-only: the test split); --translations needs a
 * translation model on real text. */
static gp_status open_data(run *r) {
  gp_model *m = r->m;
  int seq = gp_seq_is_sequence_model(m);
  if (tr_flags[F_TRANSLATIONS].given && !seq)
    return GP_ERR(GP_ERR_USAGE, "--translations: %s is not a translation model", m->file);
  gp_data_opts o = {.synthetic = tr_flags[F_DATA].given,
                    .train = !tr_flags[F_EVAL_ONLY].given,
                    .eval = 1,
                    .batch = m->train.batch_size,
                    .seed = m->train.seed};
  GP_TRY(gp_data_open(m, &o, &r->d));
  if (!tr_flags[F_TRANSLATIONS].given || gp_data_translates(&r->d)) return GP_OK;
  if (tr_flags[F_DATA].given || m->data.dataset == GP_DATA_SYNTHETIC)
    return GP_ERR(GP_ERR_USAGE,
                  "--translations: synthetic data has no text to translate (drop --data "
                  "synthetic or --translations)");
  return GP_ERR(GP_ERR_USAGE, "--translations: %s is not a translation model", m->file);
}

int main(int argc, char **argv) {
  gp_args_std_fds();
  gp_interrupt_install("gpipe-train",
                       "stopping after the step under way (an evaluation is cut short)");
  const char *pos[1];
  int npos;
  run r = {0};
  gp_status s = gp_args_parse(argc, argv, tr_flags, pos, 1, &npos);
  if (s != GP_OK) return tr_fail(s);
  if (tr_flags[F_HELP].given) {
    gp_args_usage("gpipe-train", "MODEL.yaml [flags]", tr_flags);
    return 0;
  }
  if (tr_flags[F_VERSION].given) {
    printf("gpipe-train %s\n", GP_VERSION);
    return 0;
  }
  if (npos != 1) {
    gp_args_free(tr_flags);
    fprintf(
        stderr,
        "gpipe-train: expected one model file (usage: gpipe-train MODEL.yaml [flags]; --help)\n");
    return 2;
  }
  gp_blas_pick_kernels(argv);
  s = tr_dist_start(&r);
  if (s != GP_OK) return tr_fail(s);
  the_run = &r;
  voice = tr_dist_voice(&r);
  const gp_cli_load load = {"gpipe-train", &tr_flags[F_SET], &tr_flags[F_BATCH], &tr_flags[F_MICRO],
                            NULL};
  if (s == GP_OK) s = gp_cli_model_load(&load, pos[0], &r.m);
  if (s == GP_OK) s = apply_flags(r.m);
  if (s == GP_OK && tr_flags[F_PRECISION].given)
    s = gp_args_precision("--precision", tr_flags[F_PRECISION].s, &r.precision);
  if (s == GP_OK && tr_flags[F_MEMORY].given)
    s = gp_args_size("--memory-limit", tr_flags[F_MEMORY].s, &r.mem_limit);
  if (s == GP_OK && tr_flags[F_SHARD_SIZE].given)
    s = gp_args_size("--save-shard-size", tr_flags[F_SHARD_SIZE].s, &r.shard_bytes);
  if (s == GP_OK) s = open_data(&r);
  if (s == GP_OK) s = tr_dist_check(&r);
  int elsewhere = 0;
  s = tr_dist_agree(&r, s, &elsewhere);
  if (s == GP_OK) { /* all of them got here: the checkpoint folder is every process's */
    s = tr_dist_shared_dir(&r);
    s = tr_dist_agree(&r, s, &elsewhere);
  }
  if (s != GP_OK && r.dist.world > 1) { /* reported once, by the lowest rank that failed */
    if (!elsewhere) the_run = NULL;
    gp_cli_dist_setup_failed(&r.dist, "gpipe-train", elsewhere);
    gp_status f = run_free(&r, s);
    gp_args_free(tr_flags);
    gp_dist_finalize(&r.dist);
    return gp_status_exit_code(f);
  }
  if (s == GP_OK && tr_flags[F_GENERATE].given) {
    s = tr_generate(&r);
  } else if (s == GP_OK && tr_flags[F_EVAL_ONLY].given) {
    gp_interrupt_install("gpipe-train", "stopping the evaluation");
    s = tr_eval_only(&r);
  } else if (s == GP_OK) {
    s = tr_train(&r);
  }
  s = run_free(&r, s);
  if (s == GP_OK && (fflush(stdout) != 0 || ferror(stdout)))
    s = GP_ERR(GP_ERR_IO, "stdout: writing failed");
  gp_args_free(tr_flags);
  if (s != GP_OK) return tr_fail(s); /* W > 1: ends every process */
  gp_dist_finalize(&r.dist);
  return 0;
}
