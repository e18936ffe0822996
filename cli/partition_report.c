/* gpipe-partition's report: the per-stage table with its hints, and the same as JSON. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/partition.h"
#include "core/decimal.h"
#include "core/eval/kvdec.h"
#include "core/io/json.h"
#include "core/exec/pass.h"
#include "core/plan/choose.h"
#include "core/plan/plan.h"
#include "data/seqfeed.h"

const char *const gp_part_by_names[] = {"flops", "params", "time", NULL};
const char *const gp_part_by_titles[] = {"estimated FLOPs", "parameters", "measured time"};

typedef struct stage_sums {
  int64_t params;
  double flops, fwd, bwd; /* flops: analytic fwd + bwd; fwd, bwd: the balancing weight */
} stage_sums;

static stage_sums sums(const gp_unit_costs *c, const gp_partition *p, int s) {
  stage_sums r = {0};
  for (int u = p->first[s]; u < p->first[s + 1]; u++) {
    r.params += c->params[u];
    r.flops += c->fwd_flops[u] + c->bwd_flops[u];
    r.fwd += c->fwd[u];
    r.bwd += c->bwd[u];
  }
  return r;
}

/* Selective re-materialization's layers in units [a, b): "37 layers (batchnorm, relu, add)". */
static void sel_layers(const gp_model *m, int a, int b, char *buf, size_t n) {
  int *reader = malloc(sizeof(int) * (size_t)(m->n_inputs + m->n_nodes));
  unsigned char *flag = calloc((size_t)m->n_nodes + 1, 1);
  snprintf(buf, n, "?");
  if (reader && flag) {
    gp_model_readers(m, reader);
    int first = m->unit_first[a], end = m->unit_first[b], count = 0;
    gp_stage_remat_set(m, reader, first, end, flag, NULL);
    char names[160] = "";
    size_t k = 0;
    for (int i = first; i < end; i++) {
      if (!flag[i]) continue;
      count++;
      const char *t = m->nodes[i].layer.type->name;
      int seen = 0;
      for (int j = first; j < i; j++)
        seen |= flag[j] && m->nodes[j].layer.type->name == t;
      if (!seen && k < sizeof names)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", t);
    }
    snprintf(buf, n, "%d layers (%s)", count, names);
  }
  free(reader);
  free(flag);
}

/* A translation model's evaluation decodes with a cache (core/eval/kvdec.h): each stage adds
 * its attention layers' keys and values for a batch of rows to what it holds. Counted on top of
 * the training estimate (decoding runs after a step, with the weights and optimizer state still
 * held and the activation arenas kept), so the sum bounds the stage's peak. */
static void decode_cache(const gp_model *m, const gp_part_request *q, const gp_partition *p) {
  gp_seq_layout L;
  if (m->data.dataset != GP_DATA_TRANSLATION || gp_seq_layout_of(m, &L) != GP_OK) return;
  unsigned char step_in[GP_MAX_MODEL_INPUTS] = {0};
  const int roles[] = {GP_SEQ_TGT_IN, GP_SEQ_TGT_MASK, GP_SEQ_TGT_SEG, GP_SEQ_TGT_POS,
                       GP_SEQ_LABEL};
  for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
    if (L.input[roles[i]] >= 0) step_in[L.input[roles[i]]] = 1;
  printf("\ndecoding    the evaluation's cache of %" PRId64 " rows (beam N: N times) adds to "
         "each stage's memory:",
         q->batch);
  for (int s = 0; s < p->stages; s++) {
    int a = m->unit_first[p->first[s]], b = m->unit_first[p->first[s + 1]];
    double c = (double)gp_kvdec_cache_bytes(m, step_in, q->batch, a, b);
    printf(" %d: %.1f MiB (%.1f in all)", s, c / 1048576.0, (p->memory[s] + c) / 1048576.0);
  }
  printf("\n");
}

static double total_time(const gp_partition *p) {
  double t = 0;
  for (int s = 0; s < p->stages; s++)
    t += p->time[s];
  return t;
}

/* One unit heavier than the largest even share of a stage: no cut between units balances K
 * stages, whatever the solver does. Says which unit, and, when it is a block instance, that
 * its layers written as top-level entries become units the partitioner can cut between. */
static void granularity_hint(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c) {
  double total = 0, big = 0, speeds = 0, fastest = 0;
  int at = 0;
  for (int u = 0; u < c->n; u++) {
    double w = c->fwd[u] + c->bwd[u];
    total += w;
    if (w > big) big = w, at = u;
  }
  for (int s = 0; s < q->stages; s++) {
    speeds += q->speed[s];
    if (q->speed[s] > fastest) fastest = q->speed[s];
  }
  double share = fastest / speeds; /* the most an even split gives one stage */
  if (q->stages < 2 || total <= 0 || big / total <= 1.05 * share) return;
  /* the loss is a node of the last unit, not a layer the file lists in it */
  int layers = m->unit_first[at + 1] - m->unit_first[at] - (at == m->n_units - 1);
  printf("hint        unit %d '%s' alone is %.1f%% of the %s, more than an even stage's %.1f%%: "
         "no cut between units balances %d stages",
         at, m->unit_names[at], 100 * big / total, gp_part_by_titles[q->by], 100 * share,
         q->stages);
  if (layers > 1) {
    /* would writing the block out help? its heaviest layer's part of the unit, by the same
     * measure (parameters, else the analytic FLOPs, also for measured time) */
    double in_unit = 0, heavy = 0;
    int hi = m->unit_first[at];
    for (int i = m->unit_first[at]; i < m->unit_first[at] + layers; i++) {
      gp_cost k;
      gp_node_cost(m, i, &k);
      double w = q->by == GP_COST_PARAMS ? (double)k.params : k.fwd_flops + k.bwd_flops;
      in_unit += w;
      if (w > heavy) heavy = w, hi = i;
    }
    double heavy_share = in_unit > 0 ? big / total * heavy / in_unit : 0;
    if (heavy_share <= 1.05 * share)
      printf("; its %d layers written as top-level entries of layers: are units to cut between",
             layers);
    else
      printf(" (nor would its %d layers written out: '%s' alone is %s%.1f%%%s)", layers,
             m->nodes[hi].layer.path, q->by == GP_COST_TIME ? "about " : "", 100 * heavy_share,
             q->by == GP_COST_TIME ? ", from its share of the unit's FLOPs" : "");
  }
  printf("\n");
}

void gp_part_print_table(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                         const gp_partition *p) {
  /* the pipeline gives the first batch % M micro-batches one more sample than the rest */
  char size[48], share[64] = "";
  int64_t b = q->replicas > 1 ? q->replica_batch : q->batch; /* what a replica cuts */
  if (b % q->micro == 0 && q->batch % q->replicas == 0)
    snprintf(size, sizeof size, "%" PRId64, q->micro_batch);
  else
    snprintf(size, sizeof size, "%" PRId64 "-%" PRId64, q->batch / q->replicas / q->micro,
             q->micro_batch);
  if (q->replicas > 1)
    snprintf(share, sizeof share, ", %" PRId64 "%s a replica", b,
             q->batch % q->replicas ? " at most" : "");
  const int devs = q->stages / q->chunks; /* interleaved: the rows are chunks */
  char chunks[48] = "";
  if (q->chunks > 1) snprintf(chunks, sizeof chunks, " x %d chunks", q->chunks);
  char fused[48] = ""; /* layer pairs run as one node (GP_FUSE=0: none) */
  if (m->n_fused) snprintf(fused, sizeof fused, " (%d fused)", m->n_fused);
  printf("model %s: %d unit%s%s, %.3fM parameters; %d stage%s%s, %d micro-batch%s of %s"
         " (batch %" PRId64 "%s); %s schedule, re-materialization %s; %s %s\n\n",
         m->name, m->n_units, m->n_units == 1 ? "" : "s", fused, (double)m->n_params / 1e6, devs,
         devs == 1 ? "" : "s", chunks, q->micro, q->micro == 1 ? "" : "es", size, q->batch, share,
         gp_schedule_names()[q->schedule], gp_remat_names()[q->remat],
         q->fixed ? "split given by --balance, predicted from" : "balanced by",
         gp_part_by_titles[q->by == GP_COST_PARAMS && q->fixed ? GP_COST_FLOPS : q->by]);
  char names[GP_MAX_DEVICES][160];
  int w = 5;
  for (int s = 0; s < p->stages; s++) {
    int a = p->first[s], b = p->first[s + 1] - 1;
    if (a == b)
      snprintf(names[s], sizeof names[s], "%d %s", a, m->unit_names[a]);
    else
      snprintf(names[s], sizeof names[s], "%d-%d %s .. %s", a, b, m->unit_names[a],
               m->unit_names[b]);
    if ((int)strlen(names[s]) > w) w = (int)strlen(names[s]);
  }
  double tt = total_time(p);
  printf("%s  %-*s  count     params   GFLOPs  time %%  memory MiB      recompute  "
         "sends/micro-batch\n",
         q->chunks > 1 ? "chunk  stage" : "stage", w, "units");
  for (int s = 0; s < p->stages; s++) {
    stage_sums r = sums(c, p, s);
    char out[32] = "-", on[16] = ""; /* interleaved: the stage (device) that holds the chunk */
    if (s < p->stages - 1)
      gp_args_bytes_str((double)c->cut_bytes[p->first[s + 1]], 1, out, sizeof out);
    char rc[40]; /* the micro-batches whose backward re-runs the forward (or its cheap layers) */
    if (p->sel_micro[s])
      snprintf(rc, sizeof rc, "%d+%ds of %d", p->recomputed[s], p->sel_micro[s], q->micro);
    else
      snprintf(rc, sizeof rc, "%d of %d", p->recomputed[s], q->micro);
    if (q->chunks > 1) snprintf(on, sizeof on, "%5d  ", s % devs);
    printf("%5d  %s%-*s  %5d  %9" PRId64 "  %7.3f  %6.1f  %10.1f  %13s  %s\n", s, on, w, names[s],
           p->first[s + 1] - p->first[s], r.params, r.flops / 1e9,
           tt > 0 ? 100 * p->time[s] / tt : 0.0, p->memory[s] / 1048576.0, rc, out);
  }
  for (int s = 0, shown = 0; s < p->stages; s++) {
    if (!p->sel_micro[s]) continue;
    char what[256];
    sel_layers(m, p->first[s], p->first[s + 1], what, sizeof what);
    printf("%s %s %d: %ds: %d micro-batches drop and recompute their cheap layers' activations "
           "alone (selective): %s, %.1f MiB a micro-batch\n",
           shown++ ? "          " : "\nremat     ", q->chunks > 1 ? "chunk" : "stage", s,
           p->sel_micro[s], p->sel_micro[s], what, p->cheap_bytes[s] / 1048576.0);
  }
  decode_cache(m, q, p);
  printf("\nimbalance   %.3f (slowest %s / mean %s time)\n", p->imbalance,
         q->chunks > 1 ? "chunk" : "stage", q->chunks > 1 ? "chunk" : "stage");
  if (q->schedule_auto && q->stages > 1) printf("schedule    auto: %s\n", q->chosen);
  printf("bubble      %.1f%% of the stages' time idle (predicted, %s, M = %d)\n", 100 * p->bubble,
         gp_schedule_names()[q->schedule], q->micro);
  printf("speed-up    %.2fx over naive %d-stage model parallelism (M = 1), %.2fx over 1 stage\n",
         p->speedup_naive, devs, p->speedup_k1);
  granularity_hint(m, q, c);
  /* Few micro-batches for K stages: what more would do (GPipe's M >= 4K keeps the bubble low) */
  int64_t more = gp_plan_micro_hint(devs, q->batch);
  if (q->chunks == 1 && q->stages > 1 && q->micro < 4 * q->stages && more > q->micro)
    printf("hint        M = %d is few for %d stages: --micro-batches %" PRId64
           " (the GPipe paper's M >= 4K) brings the ideal bubble (K-1)/(M+K-1) down to %.1f%%\n",
           q->micro, q->stages, more, 100.0 * (q->stages - 1) / (double)(more + q->stages - 1));
  if (q->has_limit) {
    char a[32], b[32];
    double worst = 0;
    int at = 0;
    for (int d = 0; d < devs; d++) { /* interleaved: a stage's chunks together */
      double used = gp_partition_device_memory(p, devs, d);
      if (used / q->dev_limit[d] > worst) worst = used / q->dev_limit[d], at = d;
    }
    printf("memory      every stage fits its limit%s; the fullest, stage %d, needs %s of %s\n",
           q->chunks > 1 ? " (its chunks together)" : "", at,
           gp_args_bytes_str(gp_partition_device_memory(p, devs, at), 1, a, sizeof a),
           gp_args_bytes_str(q->dev_limit[at], 1, b, sizeof b));
  }
}

static void json_num(double v) {
  char buf[32];
  if (isfinite(v))
    fputs(gp_decimal_shortest(v, buf, sizeof buf), stdout);
  else
    printf("null");
}

void gp_part_print_json(const gp_model *m, const gp_part_request *q, const gp_unit_costs *c,
                        const gp_partition *p, const gp_sim_events *ev, const gp_part_dist *d) {
  printf("{\"model\": ");
  gp_json_write_str(stdout, m->name);
  printf(", \"stages\": %d, \"micro_batches\": %d, \"batch_size\": %" PRId64
         ", \"micro_batch_size\": %" PRId64 ", \"schedule\": \"%s\", \"remat\": \"%s\", "
         "\"cost_basis\": \"%s\", \"params\": %" PRId64
         ", \"optimizer_slots\": %d, \"virtual_stages\": %d,\n \"devices\": [",
         q->stages / q->chunks, q->micro, q->batch, q->micro_batch,
         gp_schedule_names()[q->schedule], gp_remat_names()[q->remat], gp_part_by_names[q->by],
         m->n_params, gp_optimizer_slots(&m->train), q->chunks);
  for (int s = 0; s < q->stages / q->chunks; s++) { /* a device a stage */
    printf(s ? ", " : "");
    gp_json_write_str(stdout, q->devices[s]);
  }
  printf("],\n \"units\": [");
  for (int u = 0; u < c->n; u++) {
    printf(u ? ",\n   {\"name\": " : "\n   {\"name\": ");
    gp_json_write_str(stdout, m->unit_names[u]);
    printf(", \"flops_fwd\": ");
    json_num(c->fwd_flops[u]);
    printf(", \"flops_bwd\": ");
    json_num(c->bwd_flops[u]);
    printf(", \"params\": %" PRId64 ", \"activation_bytes\": %" PRId64
           ", \"gradient_bytes\": %" PRId64 ", \"output_bytes\": %" PRId64
           ", \"cut_bytes_before\": %" PRId64 ", \"weight_fwd\": ",
           c->params[u], c->act_bytes[u], c->grad_bytes[u], c->out_bytes[u], c->cut_bytes[u]);
    json_num(c->fwd[u]);
    printf(", \"weight_bwd\": ");
    json_num(c->bwd[u]);
    printf("}");
  }
  printf("],\n \"partition\": [");
  double tt = total_time(p);
  for (int s = 0; s < p->stages; s++) {
    stage_sums r = sums(c, p, s);
    /* interleaved: an entry a chunk, "stage" its device's index (chunk c on stage c mod K) */
    printf("%s{\"%s\": %d, ", s ? ",\n   " : "\n   ", q->chunks > 1 ? "chunk" : "stage", s);
    if (q->chunks > 1) printf("\"stage\": %d, ", s % (q->stages / q->chunks));
    printf("\"device\": ");
    gp_json_write_str(stdout, q->devices[s]);
    printf(", \"first_unit\": %d, \"last_unit\": %d, \"units\": %d, \"params\": %" PRId64
           ", \"flops\": ",
           p->first[s], p->first[s + 1] - 1, p->first[s + 1] - p->first[s], r.params);
    json_num(r.flops);
    printf(", \"time\": ");
    json_num(p->time[s]);
    printf(", \"time_share\": ");
    json_num(tt > 0 ? p->time[s] / tt : 0);
    printf(", \"memory_bytes\": ");
    json_num(p->memory[s]);
    printf(", \"memory_limit_bytes\": ");
    json_num(q->has_limit ? q->mem_limit[s] : NAN);
    printf(", \"recomputed_micro_batches\": %d, \"dropping_slots\": %d", p->recomputed[s],
           p->drop[s]);
    printf(", \"selective_micro_batches\": %d, \"selective_slots\": %d", p->sel_micro[s],
           p->sel[s]);
    printf(", \"boundary_bytes\": %" PRId64 "}",
           s < p->stages - 1 ? c->cut_bytes[p->first[s + 1]] : (int64_t)0);
  }
  printf("],\n \"imbalance\": ");
  json_num(p->imbalance);
  printf(", \"bubble\": ");
  json_num(p->bubble);
  printf(", \"predicted_speedup\": {\"naive\": ");
  json_num(p->speedup_naive);
  printf(", \"k1\": ");
  json_num(p->speedup_k1);
  printf("}");
  if (ev) {
    printf(",\n \"timeline\": [");
    for (int s = 0; s < ev->stages; s++) {
      printf(s ? ",\n   [" : "\n   [");
      for (int i = 0; i < ev->n[s]; i++) {
        const gp_sim_event *e = &ev->event[s][i];
        printf("%s{\"kind\": \"%c\", \"micro\": %d, \"chunk\": %d, \"recompute\": %s, "
               "\"start\": ",
               i ? ", " : "", *gp_action_letter(e->kind), e->micro, e->chunk,
               e->recompute ? "true" : "false");
        json_num(e->start);
        printf(", \"end\": ");
        json_num(e->end);
        if (e->kind == GP_A_BACKWARD && e->recompute) {
          printf(", \"recompute_start\": ");
          json_num(e->rstart);
          printf(", \"recompute_end\": ");
          json_num(e->rend);
        }
        printf("}");
      }
      printf("]");
    }
    printf("]");
  }
  if (d && d->on) gp_part_dist_print_json(q, d);
  printf("}\n");
}
