/* Language-model generation with the decoding cache (see generate.h). */
#include "core/eval/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/eval/kvdec.h"
#include "core/rng.h"

typedef struct cand {
  double p;
  int32_t id;
} cand;

static int by_p_desc(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? 1 : -1;
  return x->id < y->id ? -1 : x->id > y->id; /* ties: the lower id first */
}

int32_t gp_generate_pick(const float *z, int64_t V, const gp_generate_opts *o, double u) {
  int64_t best = 0;
  for (int64_t j = 1; j < V; j++)
    if (z[j] > z[best]) best = j;
  if (o->temperature <= 0) return (int32_t)best; /* greedy: the first maximum */
  cand *c = malloc((size_t)V * sizeof *c);
  if (!c) return (int32_t)best;
  double sum = 0;
  for (int64_t j = 0; j < V; j++) {
    c[j].p = exp(((double)z[j] - (double)z[best]) / o->temperature);
    c[j].id = (int32_t)j;
    sum += c[j].p;
  }
  qsort(c, (size_t)V, sizeof *c, by_p_desc);
  int64_t keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  double acc = 0;
  for (int64_t j = 0; j < keep; j++) { /* nucleus: the first ids whose mass reaches top_p */
    acc += c[j].p / sum;
    if (acc >= o->top_p) {
      keep = j + 1;
      break;
    }
  }
  double kept = 0;
  for (int64_t j = 0; j < keep; j++)
    kept += c[j].p;
  double x = u * kept;
  int32_t id = c[keep - 1].id;
  for (int64_t j = 0; j < keep; j++) {
    x -= c[j].p;
    if (x < 0) {
      id = c[j].id;
      break;
    }
  }
  free(c);
  return id;
}

gp_status gp_generate(gp_trainer *t, const gp_generate_opts *o, const int32_t *const *prompt,
                      const int64_t *len, int64_t n, int32_t **out, int64_t *out_len) {
  const gp_model *m = t->m;
  unsigned char step_in[GP_MAX_MODEL_INPUTS] = {0};
  const int which[5] = {o->ids, o->seg, o->pos, o->mask, o->label};
  for (int k = 0; k < 5; k++)
    if (which[k] >= 0) step_in[which[k]] = 1;
  gp_kvdec *d;
  GP_TRY(gp_kvdec_create(t, step_in, 1, &d));
  const int64_t cap = gp_kvdec_capacity(d);
  for (int64_t i = 0; i < n; i++)
    if (len[i] < 1 || len[i] + o->n - 1 > cap) {
      gp_kvdec_free(d);
      return GP_ERR(GP_ERR_USAGE,
                    len[i] < 1 ? "--prompts: prompt %lld is empty (one token id at least)"
                               : "--generate %lld: prompt %lld of %lld ids and %lld more pass the "
                                 "model's %lld positions",
                    len[i] < 1 ? (long long)(i + 1) : (long long)o->n, (long long)(i + 1),
                    (long long)len[i], (long long)o->n, (long long)cap);
    }
  gp_rng rng;
  gp_rng_seed(&rng, o->seed);
  gp_status st = GP_OK;
  int32_t vals[5];
  float fvals[5];
  for (int64_t i = 0; i < n && st == GP_OK; i++) {
    out[i] = malloc((size_t)(o->n ? o->n : 1) * sizeof **out);
    out_len[i] = 0;
    if (!out[i]) {
      st = GP_ERR(GP_ERR_NOMEM, "out of memory generating");
      break;
    }
    gp_batch b = {.n = 1};
    st = gp_kvdec_begin(d, &b);
    int32_t next = prompt[i][0];
    for (int64_t p = 0; st == GP_OK && p < len[i] + o->n - 1; p++) {
      const void *in[GP_MAX_MODEL_INPUTS] = {0};
      const int32_t v[5] = {next, 1, (int32_t)p, 1, -100};
      for (int k = 0; k < 5; k++) {
        if (which[k] < 0) continue;
        vals[k] = v[k];
        fvals[k] = (float)v[k];
        in[which[k]] =
            m->inputs[which[k]].dtype == GP_F32 ? (const void *)&fvals[k] : (const void *)&vals[k];
      }
      const float *z;
      int64_t V;
      st = gp_kvdec_step(d, in, &z, &V);
      if (st != GP_OK) break;
      if (p + 1 < len[i]) { /* still reading the prompt */
        next = prompt[i][p + 1];
        continue;
      }
      next = gp_generate_pick(z, V, o, (double)gp_rng_uniform(&rng));
      out[i][out_len[i]++] = next;
      if (next == o->eos || out_len[i] == o->n) break;
    }
  }
  gp_kvdec_free(d);
  return st;
}
