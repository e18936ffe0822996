/* What must fit before a run starts: stage memory against the device's (a lower bound, so a
 * refusal is certain) and batch norms against the micro-batch size. */
#include "core/train/fit.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* "8.00 TiB": sizes in messages, in the units --memory-limit reads. */
static const char *size_str(double b, char *buf, size_t n) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    u++;
  }
  snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

/* Slots of optimizer state per trainable element (core/train/optimizer.c's n_slots). */
static int optim_slots(const gp_train_spec *t) {
  if (t->optimizer == GP_OPT_ADAMW) return 2;
  if (t->optimizer == GP_OPT_RMSPROP) return t->momentum != 0.0 ? 2 : 1;
  return t->momentum != 0.0 ? 1 : 0;
}

/* Bytes node i holds for good: weights and buffers, and per trainable element its gradient
 * and optimizer state. */
static double param_bytes(const gp_model *m, int i) {
  const gp_layer *l = &m->nodes[i].layer;
  double b = 0, per = 2.0 + optim_slots(&m->train);
  for (int p = 0; p < l->n_params; p++)
    b += 4.0 * (double)gp_shape_numel(&l->pdesc[p].shape) * (l->pdesc[p].trainable ? per : 1.0);
  return b;
}

/* The machine's physical memory, or 0 when it cannot be read. */
static double physical_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

typedef struct stage_need {
  double params, act; /* params: param_bytes summed; act: the largest output of a micro-batch */
  int big;            /* the node that needs the most: its parameters or its output */
  double big_bytes;
} stage_need;

static void need_of(const gp_model *m, const gp_plan *plan, int s, stage_need *n) {
  const int64_t mb = (m->train.batch_size + plan->micro - 1) / plan->micro;
  memset(n, 0, sizeof *n);
  n->big = plan->st[s].first_node;
  for (int i = plan->st[s].first_node; i < plan->st[s].end_node; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    double p = param_bytes(m, i);
    double out =
        (double)gp_shape_numel(&l->out_shape) * (double)gp_dtype_size(l->out_dtype) * (double)mb;
    n->params += p;
    if (out > n->act) n->act = out;
    if (p > n->big_bytes || out > n->big_bytes) {
      n->big = i;
      n->big_bytes = p > out ? p : out;
    }
  }
}

static gp_status too_big(const gp_model *m, const gp_plan *plan, int s, const stage_need *n,
                         const char *whose, double limit) {
  char a[32], b[32], c[32], d[32];
  const gp_node *big = &m->nodes[n->big];
  return GP_ERR(GP_ERR_FULL,
                "stage %d (%s) cannot fit: its layers' weights, gradients and optimizer state "
                "take %s and one micro-batch's largest activation %s, at least %s in all (the "
                "largest layer: '%s' (%s) at %s:%d:%d), more than %s of %.0f bytes "
                "(%s)",
                s, plan->st[s].device, size_str(n->params, a, sizeof a),
                size_str(n->act, b, sizeof b), size_str(n->params + n->act, c, sizeof c),
                big->layer.path, big->layer.type->name, m->file, big->line, big->col, whose, limit,
                size_str(limit, d, sizeof d));
}

gp_status gp_pipeline_check_fit(const gp_model *m, const gp_plan *plan, size_t mem_limit) {
  const double ram = physical_bytes();
  stage_need cpu = {0}; /* the CPU stages together, against the machine's memory */
  double cpu_act = 0;
  int cpu_stages = 0, worst = -1;
  for (int s = 0; s < plan->stages; s++) {
    stage_need n;
    need_of(m, plan, s, &n);
    if (mem_limit && n.params + n.act > (double)mem_limit)
      return too_big(m, plan, s, &n, "its memory limit", (double)mem_limit);
    if (strcmp(plan->st[s].device, "cpu") != 0) continue;
    cpu_stages++;
    cpu.params += n.params;
    if (n.act > cpu_act) cpu_act = n.act;
    if (worst < 0 || n.big_bytes > cpu.big_bytes) {
      worst = s;
      cpu.big = n.big;
      cpu.big_bytes = n.big_bytes;
    }
  }
  cpu.act = cpu_act;
  if (cpu_stages && ram > 0 && cpu.params + cpu.act > ram)
    return too_big(m, plan, worst, &cpu, "the machine's memory", ram);
  return GP_OK;
}

gp_status gp_fit_check_batchnorm(const gp_model *m, int64_t batch, int micro) {
  const int64_t mb = micro > 0 ? batch / micro : batch; /* the smallest micro-batch */
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_node *nd = &m->nodes[i];
    const gp_shape *in = &nd->layer.in_shape[0];
    if (strcmp(nd->layer.type->name, "batchnorm") != 0 || in->ndim < 1 || in->d[0] < 1) continue;
    int64_t per = gp_shape_numel(in) / in->d[0]; /* values of a channel in one sample */
    if (mb * per > 1) continue;
    return GP_ERR(GP_ERR_USAGE,
                  "%s:%d:%d: batchnorm '%s' would normalize 1 value per channel in a "
                  "micro-batch of %lld sample (batch %lld in %d micro-batches, input of %lld "
                  "value%s per channel): its variance is 0; use fewer micro-batches or a larger "
                  "batch",
                  m->file, nd->line, nd->col, nd->layer.path, (long long)mb, (long long)batch,
                  micro, (long long)per, per == 1 ? "" : "s");
  }
  return GP_OK;
}
