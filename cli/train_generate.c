/* gpipe-train --generate N --prompts FILE: a language model continues each prompt (token ids,
 * one prompt a line) through its stages with the decoding cache (core/eval/generate.h); the
 * generated ids are printed, one line a prompt. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train.h"
#include "core/eval/generate.h"
#include "data/seqfeed.h"

/* A flag's real value in [lo, hi] (lo excluded when open_lo), or a usage error. */
static gp_status real_flag(int f, double dflt, double lo, int open_lo, double hi, double *out) {
  *out = dflt;
  if (!tr_flags[f].given) return GP_OK;
  char *end;
  double v = strtod(tr_flags[f].s, &end);
  if (end == tr_flags[f].s || *end || !isfinite(v) || v > hi || (open_lo ? v <= lo : v < lo))
    return GP_ERR(GP_ERR_USAGE, "%s %s: want a number in %s%g, %g]", tr_flags[f].name,
                  tr_flags[f].s, open_lo ? "(" : "[", lo, hi);
  *out = v;
  return GP_OK;
}

typedef struct prompts {
  int32_t **ids;
  int64_t *len, n;
} prompts;

static void prompts_free(prompts *p) {
  for (int64_t i = 0; i < p->n; i++)
    free(p->ids[i]);
  free(p->ids);
  free(p->len);
}

/* Token-id lines: ids in [0, vocab), separated by spaces. */
static gp_status read_prompts(const char *path, int64_t vocab, prompts *p) {
  memset(p, 0, sizeof *p);
  FILE *f = fopen(path, "r");
  if (!f) return GP_ERR(GP_ERR_IO, "--prompts %s: %s", path, strerror(errno));
  char line[65536];
  gp_status st = GP_OK;
  for (int64_t ln = 1; st == GP_OK && fgets(line, sizeof line, f); ln++) {
    int32_t **ids = realloc(p->ids, (size_t)(p->n + 1) * sizeof *ids);
    int64_t *len = ids ? realloc(p->len, (size_t)(p->n + 1) * sizeof *len) : NULL;
    if (ids) p->ids = ids;
    if (len) p->len = len;
    int32_t *row = len ? malloc(strlen(line) / 2 * sizeof *row + sizeof *row) : NULL;
    if (!row) {
      st = GP_ERR(GP_ERR_NOMEM, "--prompts: out of memory");
      break;
    }
    p->ids[p->n] = row;
    p->len[p->n] = 0;
    p->n++;
    for (char *s = line, *e;; s = e) {
      while (*s == ' ' || *s == '\t')
        s++;
      if (!*s || *s == '\n') break;
      long long v = strtoll(s, &e, 10);
      if (e == s || v < 0 || v >= vocab || (*e && *e != ' ' && *e != '\t' && *e != '\n')) {
        st = GP_ERR(GP_ERR_DATA, "%s:%" PRId64 ": not a token id below %" PRId64 ": '%.20s'", path,
                    ln, vocab, s);
        break;
      }
      row[p->len[p->n - 1]++] = (int32_t)v;
    }
  }
  fclose(f);
  if (st != GP_OK) prompts_free(p);
  return st;
}

gp_status tr_generate(run *r) {
  gp_model *m = r->m;
  gp_seq_layout L;
  if (m->data.dataset != GP_DATA_TEXT || gp_seq_layout_of(m, &L) != GP_OK || L.S != 0)
    return GP_ERR(GP_ERR_USAGE, "--generate: %s is not a language model (data: text)", m->file);
  if (!tr_flags[F_PROMPTS].given) return GP_ERR(GP_ERR_USAGE, "--generate needs --prompts FILE");
  gp_generate_opts o = {.n = tr_flags[F_GENERATE].i,
                        .top_k = tr_flags[F_TOP_K].given ? tr_flags[F_TOP_K].i : 0,
                        .seed = m->train.seed,
                        .eos = (int32_t)m->data.eos_id,
                        .ids = L.input[GP_SEQ_TGT_IN],
                        .seg = L.input[GP_SEQ_TGT_SEG],
                        .pos = L.input[GP_SEQ_TGT_POS],
                        .mask = L.input[GP_SEQ_TGT_MASK],
                        .label = L.input[GP_SEQ_LABEL]};
  GP_TRY(real_flag(F_TEMPERATURE, 0.0, 0.0, 0, 1e6, &o.temperature));
  GP_TRY(real_flag(F_TOP_P, 1.0, 0.0, 1, 1.0, &o.top_p));
  int64_t vocab =
      m->nodes[m->output_node].layer.out_shape.d[m->nodes[m->output_node].layer.out_shape.ndim - 1];
  prompts p;
  GP_TRY(read_prompts(tr_flags[F_PROMPTS].s, vocab, &p));
  gp_plan plan;
  int threads;
  gp_status st = tr_make_trainer(r, &plan, &threads);
  int32_t **out = calloc((size_t)(p.n ? p.n : 1), sizeof *out);
  int64_t *olen = calloc((size_t)(p.n ? p.n : 1), sizeof *olen);
  if (st == GP_OK && (!out || !olen)) st = GP_ERR(GP_ERR_NOMEM, "--generate: out of memory");
  if (st == GP_OK)
    st = gp_generate(&r->t, &o, (const int32_t *const *)p.ids, p.len, p.n, out, olen);
  for (int64_t i = 0; st == GP_OK && i < p.n; i++) {
    for (int64_t j = 0; j < olen[i]; j++)
      printf("%s%d", j ? " " : "", (int)out[i][j]);
    printf("\n");
  }
  for (int64_t i = 0; out && i < p.n; i++)
    free(out[i]);
  free(out);
  free(olen);
  prompts_free(&p);
  return st;
}
