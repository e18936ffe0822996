/* What gpipe-train reports: the closing lines (data, pipeline, memory, final result) and the
 * notes before training. */
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
#include "core/train/fit.h"

/* What the final line's numbers are of: the step trained to, or --eval-only's weights. */
void tr_weights_name(const run *r, char *buf, size_t n) {
  if (!tr_flags[F_EVAL_ONLY].given)
    snprintf(buf, n, "step %" PRId64, r->t.step);
  else if (!tr_flags[F_LOAD].given)
    snprintf(buf, n, "initial weights (seed %" PRIu64 ")", r->t.seed);
  else if (r->loaded_step >= 0)
    snprintf(buf, n, "weights of %s (step %" PRId64 ")", tr_flags[F_LOAD].s, r->loaded_step);
  else
    snprintf(buf, n, "weights of %s", tr_flags[F_LOAD].s);
}

/* The last line of a run: the last evaluation (of the test split). */
void tr_print_final(const run *r, const gp_progress *pg) {
  const gp_metrics *ev = &r->last;
  const gp_batch_source_stats *st = &r->last_st;
  char who[PATH_MAX + 64];
  tr_weights_name(r, who, sizeof who);
  if (!st->tokens && st->peak > 0) {
    printf("final: %s  test loss %.4f  test PSNR %.2f dB  noisy input %.2f dB (%+.2f dB)", who,
           ev->loss, ev->psnr, ev->input_psnr, ev->psnr - ev->input_psnr);
  } else if (!st->tokens) {
    printf("final: %s  test loss %.4f  test accuracy %.4f", who, ev->loss, ev->accuracy);
  } else {
    char pp[32];
    printf("final: %s  %s loss %.4f  perplexity %s  token accuracy %.4f", who, st->split, ev->loss,
           gp_progress_ppl(pp, ev->perplexity), ev->accuracy);
    if (st->left_out)
      printf("  (%lld pair%s longer than a row left out)", (long long)st->left_out,
             st->left_out == 1 ? "" : "s");
    if (r->last_bleu >= 0)
      printf("  BLEU %.2f (%lld sentence%s)", r->last_bleu, (long long)r->last_sentences,
             r->last_sentences == 1 ? "" : "s");
  }
  printf("  (%.1f s)\n", gp_now() - pg->t0);
}

/* Where the data time went: the trainer's wait for batches, and skipped bad samples. */
void tr_report_data(run *r, double wall) {
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

/* Replicas: how long the gradients' all-reduce took a step (from its first bucket, started
 * under the last backward, to its end) and how much of that ran under the backward (hidden). */
static void tr_report_allreduce(const run *r, const gp_stage_stats *all) {
  const int R = r->m->pipeline.replicas;
  double span = 0, wait = 0;
  int64_t bytes = 0, steps = 0;
  for (int s = 0; s < gp_pipeline_stages(r->t.pl); s++) {
    span = fmax(span, all[s].allreduce_s); /* the stages' all-reduces run side by side */
    wait = fmax(wait, all[s].allreduce_wait_s);
    bytes += all[s].allreduce_bytes;
    steps = steps > all[s].allreduce_steps ? steps : all[s].allreduce_steps;
  }
  if (R < 2 || steps < 1 || span <= 0) return;
  printf("all-reduce: %.2f MiB of gradients a step over %d replicas, %.2f ms a step from its "
         "first bucket to its end, %.0f%% of it hidden under the backward\n",
         (double)bytes / steps / 1048576.0, R, 1e3 * span / steps, 100.0 * (1.0 - wait / span));
}

/* With stages: how busy each was per training step (on a GPU, the GPU's time) and how much of
 * the steps it waited (and the stage that set each step's pace), against GPipe's bubble
 * (K-1)/(M+K-1) for equal stages, the schedule simulated with the stages' mean times (the idle that
 * unequal stages alone would leave) and the steps replayed with each action's own time (adding the
 * actions' spread): where the pipeline lost time. */
void tr_report_pipeline(run *r) {
  int k = gp_pipeline_stages(r->t.pl), m = r->m->pipeline.micro_batches;
  gp_stage_stats all[GP_MAX_DEVICES];
  if (tr_dist_stats(r, all) != GP_OK) return; /* a statistic: the run stands */
  tr_report_allreduce(r, all);
  if (k < 2) return;
  char busy[GP_MAX_DEVICES * 16] = "", idle[GP_MAX_DEVICES * 16] = "";
  int on_gpu = 0;
  /* interleaved: busy per chunk, idle per stage (device), whose chunks take turns */
  const int v = gp_pipeline_chunks(r->t.pl), devs = k / v;
  for (int s = 0; s < k; s++) {
    const gp_stage_stats ss = all[s];
    if (ss.steps < 1 || ss.span_s <= 0) return; /* no training step was timed */
    on_gpu |= ss.device_time;
    size_t nb = strlen(busy), ni = strlen(idle);
    snprintf(busy + nb, sizeof busy - nb, "%s%.1f", s ? ", " : "", gp_stage_busy_ms(&ss));
    if (s < devs)
      snprintf(idle + ni, sizeof idle - ni, "%s%.1f%%", s ? ", " : "",
               100 * gp_device_idle(all, k, v, s));
  }
  double sim, rep = gp_pipeline_bubble_replayed(r->t.pl);
  char simmed[160] = "";
  if (gp_bubble_sim(gp_pipeline_schedule(r->t.pl), all, &sim) == GP_OK && isfinite(sim))
    snprintf(simmed, sizeof simmed, "; the schedule with these stage times: %.1f%%", 100 * sim);
  if (isfinite(rep))
    snprintf(simmed + strlen(simmed), sizeof simmed - strlen(simmed),
             "; with each action's own time: %.1f%%", 100 * rep);
  double slow = gp_pipeline_bubble_bottleneck(r->t.pl);
  char slowest[64] = "";
  if (isfinite(slow))
    snprintf(slowest, sizeof slowest, ", each step's busiest stage %.1f%%", 100 * slow);
  char overlap[96] = ""; /* one process: how many steps stage 0 ran the next's forwards in */
  if (r->dist.world == 1 && r->trained > 0)
    snprintf(overlap, sizeof overlap, "; steps overlapped: %" PRId64 " of %" PRId64, r->overlapped,
             r->trained);
  printf("pipeline: %s busy %s ms per step%s, %sidle %s of the steps%s (GPipe's bubble for K "
         "= %d, M = %d: %.1f%%%s)%s\n",
         v > 1 ? "chunks" : "stages", busy, on_gpu ? " (GPU time)" : "", v > 1 ? "stages " : "",
         idle, slowest, devs, m, 100.0 * (devs - 1) / (double)(m + devs - 1), simmed, overlap);
}

/* Remat auto's choice, as "; remat auto: stage 0 recomputes 6 of 8 micro-batches (estimated
 * 249.70 MiB), stage 1 none (256.90 MiB)"; "" under the fixed modes. */
static void remat_choice(const gp_plan *plan, char *buf, size_t n) {
  buf[0] = 0;
  if (plan->remat != GP_REMAT_AUTO) return;
  size_t k = (size_t)snprintf(buf, n, "; remat auto:");
  for (int s = 0; s < plan->stages && k < n; s++) {
    int rc = gp_plan_recomputed(plan, s), sc = gp_plan_selective(plan, s);
    char what[128] = "none";
    if (rc && sc)
      snprintf(what, sizeof what, "recomputes %d of %d micro-batches, %d more their cheap layers",
               rc, plan->micro, sc);
    else if (rc)
      snprintf(what, sizeof what, "recomputes %d of %d micro-batches", rc, plan->micro);
    else if (sc)
      snprintf(what, sizeof what, "recomputes the cheap layers of %d of %d micro-batches", sc,
               plan->micro);
    k += (size_t)snprintf(buf + k, n - k, "%s stage %d %s (estimated %.2f MiB)", s ? "," : "", s,
                          what, plan->mem_est[s] / 1048576.0);
  }
}

/* Each stage's measured peak of backend memory (parameters, gradients, optimizer state,
 * activations, scratch): what --memory-limit holds each stage to; and remat auto's choice. */
void tr_report_memory(run *r, const gp_plan *plan) {
  const double mib = 1048576.0;
  int k = gp_pipeline_stages(r->t.pl);
  size_t sum = 0;
  char per[GP_MAX_DEVICES * 16] = "";
  gp_stage_stats all[GP_MAX_DEVICES];
  if (tr_dist_stats(r, all) != GP_OK) return;
  for (int s = 0; s < k; s++) {
    const gp_stage_stats ss = all[s];
    sum += ss.mem_peak;
    size_t n = strlen(per);
    snprintf(per + n, sizeof per - n, "%s%.2f", s ? ", " : "", (double)ss.mem_peak / mib);
  }
  printf("memory: peak %.2f MiB (%zu bytes)", (double)sum / mib, sum);
  if (k > 1) printf(", the sum of %d stages: %s MiB", k, per);
  if (r->mem_limit) printf("; limit %.2f MiB per stage", (double)r->mem_limit / mib);
  char choice[GP_MAX_DEVICES * 128];
  remat_choice(plan, choice, sizeof choice);
  printf("%s\n", choice);
}

/* The pipeline's line, when there is more than one stage or micro-batch; with stages but one
 * micro-batch, that they take turns and what overlaps them; then how the split was made (how:
 * nothing for a given one). */
void tr_note_pipeline(gp_progress *pg, const gp_plan *plan, int64_t batch, const char *how) {
  if (plan->stages == 1 && plan->micro == 1) return;
  char bal[GP_PLAN_BALANCE_LEN], turns[160] = "";
  gp_plan_balance_str(plan, bal, sizeof bal);
  int64_t more = gp_plan_micro_hint(plan->stages, batch);
  if (plan->stages > 1 && plan->micro == 1 && more > 1)
    snprintf(turns, sizeof turns,
             " (one micro-batch: the stages take turns, as naive model parallelism; "
             "--micro-batches %" PRId64 " overlaps them)",
             more);
  char chunks[64] = ""; /* interleaved: the balance is of the chunks, stage s holding s, s + K.. */
  if (gp_plan_chunks(plan) > 1)
    snprintf(chunks, sizeof chunks, " x %d chunks (chunk c on stage c mod %d)",
             gp_plan_chunks(plan), gp_plan_devices(plan));
  gp_progress_note(pg,
                   "pipeline: %d stage%s%s of %s unit%s, %d micro-batch%s, %s schedule, "
                   "re-materialization %s%s",
                   gp_plan_devices(plan), gp_plan_devices(plan) == 1 ? "" : "s", chunks, bal,
                   strcmp(bal, "1") ? "s" : "", plan->micro, plan->micro == 1 ? "" : "es",
                   gp_schedule_names()[plan->schedule], gp_remat_names()[plan->remat], turns);
  if (how && *how) gp_progress_note(pg, "split: %s", how);
  if (plan->chosen[0] && plan->stages > 1) gp_progress_note(pg, "schedule auto: %s", plan->chosen);
}

/* The run's first lines: the model, and a sequence model's data. */
void tr_note_model(const run *r, gp_progress *pg) {
  const gp_model *m = r->m;
  char fused[48] = ""; /* (GP_FUSE=0: none) */
  if (m->n_fused) snprintf(fused, sizeof fused, " (%d fused)", m->n_fused);
  gp_progress_note(pg, "model %s: %d unit%s, %d layer%s%s, %.3fM parameters (%" PRId64 ")", m->name,
                   m->n_units, m->n_units == 1 ? "" : "s", m->n_nodes, m->n_nodes == 1 ? "" : "s",
                   fused, (double)m->n_params / 1e6, m->n_params);
  char desc[512] = "";
  if (r->d.train) gp_batch_source_describe(r->d.train, desc, sizeof desc);
  if (desc[0]) gp_progress_note(pg, "data %s", desc);
  if (r->loaded_step >= 0)
    gp_progress_note(pg,
                     "loaded the weights of step %" PRId64
                     " from the checkpoint %s (not its optimizer state or data position: "
                     "--checkpoint-dir DIR --resume continues that run)",
                     r->loaded_step, tr_flags[F_LOAD].s);
}

void tr_note_stale_outputs(gp_progress *pg) {
  if (tr_out_stale)
    gp_progress_note(pg,
                     "removed %d temporary file%s that killed runs left beside the output files",
                     tr_out_stale, tr_out_stale == 1 ? "" : "s");
}

/* The OpenBLAS kernels gpipe chose in place of OpenBLAS's own pick, for the machine line. */
void tr_blas_note(char *buf, size_t n) {
  buf[0] = 0;
  if (gp_blas_replaced()) /* see gp_blas_pick_kernels */
    snprintf(buf, n, " (OpenBLAS %s kernels: it had picked %s for this CPU)", gp_blas_kernels(),
             gp_blas_replaced());
}
