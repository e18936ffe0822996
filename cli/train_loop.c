/* gpipe-train's loop: steps, evaluations, checkpoints, interruption, and --eval-only. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/ckpt_dir.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/machine.h"
#include "cli/train.h"
#include "core/plan/plan_io.h"
#include "core/train/checkpoint.h"
#include "core/train/fit.h"

/* The training data's position: (epoch, next batch). A batch fetched ahead (the next step's,
 * announced to the last one) is not trained yet: the position is the one before it. */
static void data_tell(const run *r, int64_t *epoch, int64_t *index) {
  if (r->have_trainer && r->t.have_next) {
    *epoch = r->t.cur_epoch;
    *index = r->t.cur_index;
    return;
  }
  gp_batch_source_tell(r->d.train, epoch, index);
}

/* Whether the training loop evaluates after step s (the run's end evaluates besides). */
static int eval_at(const gp_train_spec *ts, int64_t s, int64_t per_epoch) {
  if (ts->eval_every > 0) return s % ts->eval_every == 0;
  return per_epoch > 0 && s % per_epoch == 0;
}

/* Whether the loop checkpoints after step s (not the run's last: that one follows the final
 * evaluations). */
static int checkpoint_at(int64_t s, int64_t per_epoch, int64_t total) {
  int epoch_end = per_epoch > 0 && s % per_epoch == 0;
  return tr_flags[F_CKPT_DIR].given &&
         (epoch_end || (tr_flags[F_CKPT_EVERY].given && s % tr_flags[F_CKPT_EVERY].i == 0)) &&
         s != total;
}

/* Whether step s (1-based) is told the next step's batch, so that the steps may overlap
 * (gp_trainer_step_ahead): only where the pipeline overlaps steps at all (one process, no
 * barrier), and when nothing comes between s and s + 1, an evaluation or a checkpoint, which
 * would have to come after the next step's early forwards. (A signal may still stop the run
 * after s: the batch fetched ahead is then untrained, and data_tell the position before it.) */
static int fetch_ahead(const run *r, int64_t s, int64_t per_epoch, int64_t total) {
  return r->dist.world == 1 && gp_pipeline_overlap(r->t.pl) > 0 && s < total &&
         !eval_at(&r->m->train, s, per_epoch) && !checkpoint_at(s, per_epoch, total);
}

/* eval_due: the evaluation after this step was cut short, and a resumed run does it first. */
static gp_status checkpoint(run *r, gp_progress *pg, int eval_due) {
  gp_ckpt_pos pos = {.eval_due = eval_due, .elapsed_s = gp_progress_elapsed(pg)};
  data_tell(r, &pos.epoch, &pos.index);
  GP_TRY(tr_dist_save_checkpoint(r, tr_flags[F_CKPT_DIR].s, &pos));
  r->ckpt_step = r->t.step;
  char held[PATH_MAX]; /* checkpoint.safetensors, or the index of a sharded one */
  gp_ckpt_find(tr_flags[F_CKPT_DIR].s, held, sizeof held);
  gp_progress_note(pg, "checkpoint  step %" PRId64 "  %s", r->t.step, held);
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
  } else if (tr_flags[F_CKPT_DIR].given) {
    if (r->ckpt_step != r->t.step) GP_TRY(checkpoint(r, pg, during != NULL));
    char held[PATH_MAX]; /* checkpoint.safetensors, or the index of a sharded one */
    gp_ckpt_find(tr_flags[F_CKPT_DIR].s, held, sizeof held);
    snprintf(kept, sizeof kept, "%s holds step %" PRId64 ": --resume goes on", held, r->t.step);
  } else if (r->saved) {
    snprintf(kept, sizeof kept, "%s holds the weights of step %" PRId64, tr_flags[F_SAVE].s,
             r->t.step);
  } else {
    snprintf(kept, sizeof kept, "nothing was saved (--checkpoint-dir DIR keeps a run to resume)");
  }
  if (tr_flags[F_TRACE].given && !r->traced) {
    GP_TRY(gp_pipeline_write_trace(r->t.pl, tr_flags[F_TRACE].s));
    gp_progress_note(pg, "wrote the trace to %s", tr_flags[F_TRACE].s);
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
  char how[240]; /* "greedy", "beam 4, lenpen 1", and why the cache was not used */
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
  set.beam = (int)(tr_flags[F_BEAM].given ? tr_flags[F_BEAM].i : 0);
  set.uncached = tr_flags[F_NO_KV_CACHE].given;
  if (tr_lenpen(&set.lenpen) != GP_OK) set.lenpen = 1.0; /* checked at the start */
  gp_decode_result res;
  gp_status s = gp_decode_bleu(&r->t, &set, &res);
  const int beam = set.beam;
  const double lenpen = set.lenpen;
  gp_decode_set_free(&set);
  GP_TRY(s);
  const gp_flag hyps = {.name = "--translations", .s = tr_flags[F_TRANSLATIONS].s};
  if (final && tr_flags[F_TRANSLATIONS].given) s = gp_args_write_output(&hyps, write_hyps, &res);
  out->bleu = res.bleu;
  out->sentences = res.sentences;
  snprintf(out->line, sizeof out->line, "%s", res.bleu_line);
  out->seconds = gp_now() - t0;
  if (beam >= 1)
    snprintf(out->how, sizeof out->how, "beam %d, lenpen %g", beam, lenpen);
  else
    snprintf(out->how, sizeof out->how, "greedy%s%s", res.uncached_why[0] ? ", uncached: " : "",
             res.uncached_why);
  gp_decode_result_free(&res);
  return s;
}

/* An evaluation of the split evaluated during training (final 0) or of the final one
 * (final 1; for images they are the same test split): loss and accuracy (denoising: PSNR),
 * and for tokens perplexity and, for translations, BLEU. */
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
  else if (st.peak > 0)
    GP_TRY(gp_progress_eval_psnr(pg, r->t.step, epoch, ev->loss, ev->psnr, ev->input_psnr,
                                 ev->samples, gp_now() - t0));
  else
    GP_TRY(
        gp_progress_eval(pg, r->t.step, epoch, ev->loss, ev->accuracy, ev->samples, gp_now() - t0));
  GP_TRY(eval_finite(r, st.split, ev->loss));
  if (be.bleu >= 0)
    gp_progress_note(pg, "  %s: %s (%lld sentence%s, %s, %.1f s)", st.split, be.line,
                     (long long)be.sentences, be.sentences == 1 ? "" : "s", be.how, be.seconds);
  r->last = *ev;
  r->last_st = st;
  r->last_bleu = be.bleu;
  r->last_sentences = be.sentences;
  return GP_OK;
}

/* An evaluation that a signal drops, to stop with what was trained (stop_interrupted). */
static gp_status evaluate_or_stop(run *r, gp_progress *pg, int64_t epoch, gp_metrics *ev,
                                  int64_t total) {
  gp_status s = evaluate(r, pg, epoch, 0, ev);
  return s == GP_ERR_INTERRUPTED ? stop_interrupted(r, pg, total, "in the evaluation ") : s;
}

/* The trainer of the model's pipeline, on *threads CPU threads, with the weights of --load. */
gp_status tr_make_trainer(run *r, gp_plan *plan, int *threads) {
  gp_model *m = r->m;
  /* the cores of a host are shared among its processes: no oversubscription by default */
  int share = gp_cpu_cores() / r->dist.local_size;
  *threads = tr_flags[F_THREADS].given ? (int)tr_flags[F_THREADS].i : share > 1 ? share : 1;
  m->pipeline.mem_limit = r->mem_limit; /* what remat auto fits */
  GP_TRY(tr_split(r, *threads, plan));
  GP_TRY(tr_dist_layout(r, plan));
  gp_pipeline_opts po = {.cores = *threads,
                         .pin = tr_flags[F_PIN].given,
                         .watchdog_s =
                             tr_flags[F_WATCHDOG].given ? (double)tr_flags[F_WATCHDOG].i : 0,
                         .trace = tr_flags[F_TRACE].given,
                         .precision = r->precision,
                         .nondeterministic = tr_flags[F_NONDET].given,
                         .mem_limit = r->mem_limit,
                         .dist = &r->dist};
  GP_TRY(gp_trainer_init(&r->t, m, plan, &po, m->train.seed));
  r->t.check = gp_interrupt_check; /* a signal ends an evaluation within a batch */
  r->t.shard_bytes = (int64_t)r->shard_bytes;
  r->have_trainer = 1;
  r->loaded_step = -1;
  if (tr_flags[F_LOAD].given)
    GP_TRY(gp_trainer_load_weights(&r->t, tr_flags[F_LOAD].s, &r->loaded_step));
  return tr_dist_want(r);
}

gp_status tr_train(run *r) {
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
  /* training only; a replica's micro-batches are b / R / M samples */
  GP_TRY(gp_fit_check_batchnorm(m, b / m->pipeline.replicas, m->pipeline.micro_batches));
  int threads;
  gp_plan plan;
  GP_TRY(tr_make_trainer(r, &plan, &threads));
  r->ckpt_step = -1;
  gp_ckpt_pos pos = {0};
  if (tr_flags[F_RESUME].given) {
    GP_TRY(gp_trainer_load_checkpoint(&r->t, tr_flags[F_CKPT_DIR].s, &pos));
    r->ckpt_step = r->t.step;
    if (r->t.step > total)
      return GP_ERR(GP_ERR_USAGE,
                    "%s/checkpoint.safetensors is at step %" PRId64 ", past the %" PRId64
                    " steps of this run",
                    tr_flags[F_CKPT_DIR].s, r->t.step, total);
    gp_status sk = gp_batch_source_seek(r->d.train, pos.epoch, pos.index);
    if (sk != GP_OK)
      return gp_error_prefix(GP_ERR_DATA,
                             "%s/checkpoint.safetensors: its data position (gpipe.epoch %" PRId64
                             ", gpipe.index %" PRId64 ") is not in this run's training data: ",
                             tr_flags[F_CKPT_DIR].s, pos.epoch, pos.index);
  }
  /* a finished run's checkpoint: its evaluations are logged already; they are repeated only
   * for the final line */
  int complete = tr_flags[F_RESUME].given && r->t.step == total && !pos.eval_due;
  int64_t log_dropped = 0;
  if (tr_flags[F_LOG].given && !complete && tr_dist_voice(r)) { /* rank 0 writes the log; a
                                                                 * finished run's is left */
    if (r->t.step)
      GP_TRY(gp_progress_log_resume(tr_flags[F_LOG].s, r->t.step, (int)pos.eval_due, &r->log,
                                    &log_dropped));
    else if (!(r->log = fopen(tr_flags[F_LOG].s, "w")))
      return GP_ERR(GP_ERR_IO, "--log %s: cannot write: %s", tr_flags[F_LOG].s, strerror(errno));
  }

  gp_progress pg;
  gp_progress_init(&pg, tr_flags[F_QUIET].given, r->log, tr_flags[F_LOG].s);
  if (tr_flags[F_RESUME].given) GP_TRY(gp_progress_resumed(&pg, r->t.step, pos.elapsed_s));
  tr_note_model(r, &pg);
  char blas[128];
  tr_blas_note(blas, sizeof blas);
  char epoch_size[64] = "epoch size unknown: streamed shards"; /* per_epoch < 0 */
  if (per_epoch >= 0) snprintf(epoch_size, sizeof epoch_size, "%" PRId64 " per epoch", per_epoch);
  gp_progress_note(&pg,
                   "training %" PRId64 " step%s of batch %" PRId64 " (%s), %d CPU thread%s%s, "
                   "precision %s%s",
                   total, total == 1 ? "" : "s", b, epoch_size, threads, threads == 1 ? "" : "s",
                   blas, gp_args_precision_name(r->precision), r->t.step ? ", resumed" : "");
  tr_note_pipeline(&pg, &plan, b, r->split_note);
  tr_note_stale_outputs(&pg);
  if (tr_ckpt_stale)
    gp_progress_note(&pg, "removed %d temporary checkpoint%s a killed run left in %s",
                     tr_ckpt_stale, tr_ckpt_stale == 1 ? "" : "s", tr_flags[F_CKPT_DIR].s);
  if (log_dropped)
    gp_progress_note(&pg, "log: cut %" PRId64 " line%s logged after step %" PRId64 "%s from %s",
                     log_dropped, log_dropped == 1 ? "" : "s", r->t.step,
                     pos.eval_due ? " (the checkpoint's) or by its evaluation (done again)"
                                  : " (the checkpoint's)",
                     tr_flags[F_LOG].s);
  if (complete)
    gp_progress_note(&pg,
                     "the checkpoint is at the run's last step, %" PRId64
                     ": nothing to train; the final evaluation is repeated%s",
                     total, tr_flags[F_LOG].given ? " (not logged again)" : "");
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
    /* every process stops after the same step: a signal to any is a stop for all */
    int64_t stop = gp_interrupted() != 0;
    if (r->dist.world > 1) GP_TRY(gp_dist_max(&r->dist, &stop, 1));
    if (stop) return stop_interrupted(r, &pg, total, NULL);
    int64_t epoch, idx;
    GP_TRY(gp_trainer_fetch(&r->t, r->d.train, fetch_ahead(r, r->t.step + 1, per_epoch, total)));
    data_tell(r, &epoch, &idx); /* the epoch this batch came from */
    if (idx == 0 && epoch > 0) epoch--;
    double lr = gp_lr_at(ts, r->t.step, total);
    gp_stage_stats s0 = {0}; /* stage 0's early forwards: whether the step overlapped */
    const int told = r->t.have_next;
    if (told) gp_pipeline_stats(r->t.pl, 0, &s0);
    const int64_t early = s0.early;
    GP_TRY(gp_trainer_step_fetched(&r->t, lr, &tr));
    if (told) gp_pipeline_stats(r->t.pl, 0, &s0);
    r->trained++;
    r->overlapped += told && s0.early > early;
    tr_dist_note_share(r);
    double shown = gp_rate_add(&rate, r->t.cur.n, gp_now());
    int64_t s = r->t.step;
    GP_TRY(gp_progress_step(&pg, s, total, epoch, tr.loss, tr.accuracy, lr, shown,
                            s % every == 0 || s == total));
    evaluated_last = 0;
    if (eval_at(ts, s, per_epoch)) {
      GP_TRY(evaluate_or_stop(r, &pg, epoch, &ev, total));
      evaluated_last = 1;
    }
    if (checkpoint_at(s, per_epoch, total)) GP_TRY(checkpoint(r, &pg, 0));
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
  if (tr_flags[F_CKPT_DIR].given && (r->ckpt_step != r->t.step || pos.eval_due))
    GP_TRY(checkpoint(r, &pg, 0));
  if (tr_flags[F_TRACE].given) {
    GP_TRY(gp_pipeline_write_trace(r->t.pl, tr_flags[F_TRACE].s));
    gp_progress_note(&pg, "wrote the trace to %s", tr_flags[F_TRACE].s);
    r->traced = 1;
  }
  if (tr_flags[F_SAVE].given) {
    GP_TRY(tr_dist_save_weights(r, tr_flags[F_SAVE].s));
    gp_progress_note(&pg, "saved weights to %s", tr_flags[F_SAVE].s);
    r->saved = 1;
  }
  gp_progress_done(&pg);
  tr_report_data(r, gp_now() - pg.t0);
  tr_dist_note_data(r);
  tr_report_memory(r, &plan);
  tr_report_pipeline(r);
  tr_print_final(r, &pg);
  return GP_OK;
}

/* --eval-only: the test split's evaluation of the weights of --load (or the initial ones), the
 * lines a training run ends with, and nothing trained or saved. */
gp_status tr_eval_only(run *r) {
  gp_model *m = r->m;
  int64_t b = m->train.batch_size;
  int threads;
  gp_plan plan;
  GP_TRY(tr_make_trainer(r, &plan, &threads));
  if (r->loaded_step >= 0) r->t.step = r->loaded_step; /* what the evaluation is of */
  if (tr_flags[F_LOG].given && tr_dist_voice(r) && !(r->log = fopen(tr_flags[F_LOG].s, "w")))
    return GP_ERR(GP_ERR_IO, "--log %s: cannot write: %s", tr_flags[F_LOG].s, strerror(errno));
  gp_progress pg;
  gp_progress_init(&pg, tr_flags[F_QUIET].given, r->log, tr_flags[F_LOG].s);
  tr_note_model(r, &pg);
  char blas[128], who[PATH_MAX + 64];
  tr_blas_note(blas, sizeof blas);
  tr_weights_name(r, who, sizeof who);
  gp_progress_note(&pg,
                   "evaluating the %s on the test split (no training), batch %" PRId64
                   ", %d CPU thread%s%s, precision %s",
                   who, b, threads, threads == 1 ? "" : "s", blas,
                   gp_args_precision_name(r->precision));
  tr_note_pipeline(&pg, &plan, b, r->split_note);
  tr_note_stale_outputs(&pg);
  gp_metrics ev = {0};
  gp_status s = evaluate(r, &pg, 0, 1, &ev);
  if (s == GP_ERR_INTERRUPTED)
    return GP_ERR(s, "%s received: stopped the evaluation; no result",
                  gp_interrupt_name(gp_interrupted()));
  GP_TRY(s);
  gp_progress_done(&pg);
  tr_report_memory(r, &plan);
  tr_print_final(r, &pg);
  return GP_OK;
}
