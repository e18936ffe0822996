/* Sequence rows: the model's input layout by name, and packing pairs into fixed rows. */
#include "data/seqfeed.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

#define SEQFEED_STREAM 0x5e9f33dULL
#define PACK_WINDOW 4096 /* pairs packed together: first-fit decreasing within a window */

static const char *const role_names[2][GP_SEQ_ROLES] = {
    /* translation */
    {"src", "src_mask", "src_seg", "src_pos", "tgt_in", "tgt_mask", "tgt_seg", "tgt_pos", "label"},
    /* language model: target side only */
    {NULL, NULL, NULL, NULL, "tokens", "mask", "seg", "pos", "label"},
};

static int is_source_role(int r) {
  return r <= GP_SEQ_SRC_POS;
}

int gp_seq_is_sequence_model(const gp_model *m) {
  for (int i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->inputs[i].name, "tgt_in") || !strcmp(m->inputs[i].name, "tokens")) return 1;
  return 0;
}

gp_status gp_seq_layout_of(const gp_model *m, gp_seq_layout *L) {
  memset(L, 0, sizeof *L);
  for (int r = 0; r < GP_SEQ_ROLES; r++)
    L->input[r] = -1;
  int lm = 0;
  for (int i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->inputs[i].name, "tokens")) lm = 1;
  L->n_inputs = m->n_inputs;
  for (int i = 0; i < m->n_inputs; i++) {
    const gp_model_input *in = &m->inputs[i];
    int role = -1;
    for (int r = 0; r < GP_SEQ_ROLES; r++)
      if (role_names[lm][r] && !strcmp(role_names[lm][r], in->name)) role = r;
    if (role < 0)
      return GP_ERR(GP_ERR_SPEC,
                    "%s: input '%s' has no meaning for %s data; the inputs are named %s", m->file,
                    in->name, lm ? "language-model" : "translation",
                    lm ? "tokens, label and optionally seg + pos or mask"
                       : "src, src_mask or src_seg + src_pos, tgt_in, tgt_mask or tgt_seg + "
                         "tgt_pos, label");
    if (in->dtype != GP_I32 || in->shape.ndim != 1)
      return GP_ERR(GP_ERR_SPEC, "%s: input '%s' must be i32 of shape [length]", m->file, in->name);
    int64_t *len = is_source_role(role) ? &L->S : &L->T;
    if (*len && *len != in->shape.d[0])
      return GP_ERR(GP_ERR_SPEC, "%s: input '%s' has length %lld but the other %s inputs %lld",
                    m->file, in->name, (long long)in->shape.d[0],
                    is_source_role(role) ? "source" : "target", (long long)*len);
    *len = in->shape.d[0];
    L->input[role] = i;
  }
  const char *const *nm = role_names[lm];
  int need[] = {GP_SEQ_TGT_IN, GP_SEQ_LABEL, GP_SEQ_SRC};
  for (int k = 0; k < (lm ? 2 : 3); k++)
    if (L->input[need[k]] < 0)
      return GP_ERR(GP_ERR_SPEC, "%s: a %s model needs an input named '%s'", m->file,
                    lm ? "language" : "translation", nm[need[k]]);
  for (int side = 0; side < 2; side++) {
    int mask = side ? GP_SEQ_TGT_MASK : GP_SEQ_SRC_MASK, seg = mask + 1, pos = mask + 2;
    if (lm && !side) continue;
    if (L->input[seg] >= 0 && L->input[pos] < 0)
      return GP_ERR(GP_ERR_SPEC, "%s: input '%s' (segments) needs '%s' (positions)", m->file,
                    nm[seg], nm[pos]);
    if (L->input[pos] >= 0 && L->input[seg] < 0)
      return GP_ERR(GP_ERR_SPEC, "%s: input '%s' (positions) needs '%s' (segments)", m->file,
                    nm[pos], nm[seg]);
    if (L->input[seg] >= 0 && L->input[mask] >= 0)
      return GP_ERR(GP_ERR_SPEC, "%s: inputs '%s' and '%s' both mark padding; use one", m->file,
                    nm[mask], nm[seg]);
  }
  L->packed = L->input[GP_SEQ_TGT_SEG] >= 0;
  if (!lm && (L->input[GP_SEQ_SRC_SEG] >= 0) != L->packed)
    return GP_ERR(GP_ERR_SPEC,
                  "%s: packed rows need segment inputs on both sides (src_seg and tgt_seg)",
                  m->file);
  return GP_OK;
}

struct gp_seqfeed {
  const gp_token_corpus *c;
  gp_seq_layout L;
  gp_seqfeed_opts o;
  int64_t n_keep, *keep;               /* pairs that fit a row, in corpus order */
  int64_t n_rows, *row_off, *row_pair; /* the epoch's rows: pairs row_pair[row_off[r]..) */
  int64_t *order, *key, *tmp;
  int64_t *used_s, *used_t; /* per open row while packing */
  int64_t epoch, index, planned_epoch, batches;
  int64_t first_row; /* of the last batch */
  gp_seqfeed_stats st;
};

static int64_t full_src_len(const gp_seqfeed *f, int64_t p) {
  return f->L.S ? f->c->src_off[p + 1] - f->c->src_off[p] : 0;
}
static int64_t full_tgt_len(const gp_seqfeed *f, int64_t p) {
  return f->c->tgt_off[p + 1] - f->c->tgt_off[p];
}
/* The lengths in a row (cut to the row when truncating). */
static int64_t src_len(const gp_seqfeed *f, int64_t p) {
  int64_t n = full_src_len(f, p);
  return n < f->L.S ? n : f->L.S;
}
static int64_t tgt_len(const gp_seqfeed *f, int64_t p) {
  int64_t n = full_tgt_len(f, p);
  return n < f->L.T ? n : f->L.T;
}

/* Stable merge sort of idx[0..n) by key[] descending. */
static void sort_desc(int64_t *idx, int64_t *tmp, int64_t n, const int64_t *key) {
  for (int64_t w = 1; w < n; w *= 2)
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi)
        tmp[k++] = key[idx[b]] > key[idx[a]] ? idx[b++] : idx[a++];
      while (a < mid)
        tmp[k++] = idx[a++];
      while (b < hi)
        tmp[k++] = idx[b++];
      memcpy(idx + lo, tmp + lo, (size_t)(hi - lo) * sizeof *idx);
    }
}

/* The rows of an epoch: the pairs in a (seed, epoch) order (train) or corpus order (eval),
 * first-fit decreasing within windows when packing, then (train) the rows shuffled. */
static void plan_epoch(gp_seqfeed *f, int64_t epoch) {
  int64_t n = f->n_keep;
  memcpy(f->order, f->keep, (size_t)n * sizeof *f->order);
  gp_rng r;
  gp_rng_seed(&r, gp_hash_combine(gp_hash_combine(f->o.seed, SEQFEED_STREAM), (uint64_t)epoch));
  if (f->o.train)
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1), x = f->order[i];
      f->order[i] = f->order[j];
      f->order[j] = x;
    }
  int packed = f->L.packed && !f->o.one_per_row;
  int64_t rows = 0, np = 0;
  if (!packed && !f->o.train && f->o.by_source_length) sort_desc(f->order, f->tmp, n, f->key);
  if (!packed) {
    for (int64_t i = 0; i < n; i++) {
      f->row_off[rows++] = np;
      f->row_pair[np++] = f->order[i];
    }
  } else {
    int64_t S = f->L.S, T = f->L.T;
    for (int64_t w0 = 0; w0 < n; w0 += PACK_WINDOW) {
      int64_t wn = n - w0 < PACK_WINDOW ? n - w0 : PACK_WINDOW, *win = f->order + w0;
      sort_desc(win, f->tmp, wn, f->key);
      /* pairs of window rows: count first, then place in row order */
      int64_t first = rows;
      int64_t *row_of = f->tmp; /* per window position: its row */
      for (int64_t i = 0; i < wn; i++) {
        int64_t p = win[i], ls = src_len(f, p), lt = tgt_len(f, p), r = first;
        while (r < rows && (f->used_s[r] + ls > S || f->used_t[r] + lt > T))
          r++;
        if (r == rows) {
          f->used_s[rows] = f->used_t[rows] = 0;
          rows++;
        }
        f->used_s[r] += ls;
        f->used_t[r] += lt;
        row_of[i] = r;
      }
      /* counting sort of the window's pairs by row, keeping the decreasing order in a row */
      for (int64_t q = first; q < rows; q++)
        f->used_s[q] = 0; /* now: pairs in row q */
      for (int64_t i = 0; i < wn; i++)
        f->used_s[row_of[i]]++;
      for (int64_t q = first; q < rows; q++) {
        f->row_off[q] = np;
        np += f->used_s[q];
        f->used_t[q] = f->row_off[q]; /* next free slot */
      }
      for (int64_t i = 0; i < wn; i++)
        f->row_pair[f->used_t[row_of[i]]++] = win[i];
    }
  }
  f->row_off[rows] = np;
  if (f->o.train && packed && rows > 1) {
    /* shuffle whole rows: a permutation of row ids, then the pairs copied out in its order */
    int64_t *perm = f->used_t;
    for (int64_t i = 0; i < rows; i++)
      perm[i] = i;
    for (int64_t i = rows - 1; i > 0; i--) {
      int64_t j = (int64_t)gp_rng_below(&r, (uint64_t)i + 1), x = perm[i];
      perm[i] = perm[j];
      perm[j] = x;
    }
    int64_t k = 0;
    int64_t *off2 = f->key + f->c->pairs; /* spare room: key has pairs + rows + 1 slots */
    for (int64_t i = 0; i < rows; i++) {
      int64_t q = perm[i];
      off2[i] = k;
      for (int64_t a = f->row_off[q]; a < f->row_off[q + 1]; a++)
        f->tmp[k++] = f->row_pair[a];
    }
    off2[rows] = k;
    memcpy(f->row_pair, f->tmp, (size_t)k * sizeof *f->tmp);
    memcpy(f->row_off, off2, (size_t)(rows + 1) * sizeof *off2);
  }
  f->n_rows = rows;
  f->batches = f->o.train ? rows / f->o.rows : (rows + f->o.rows - 1) / f->o.rows;
  f->planned_epoch = epoch;
}

gp_status gp_seqfeed_open(const gp_token_corpus *c, const gp_seq_layout *L,
                          const gp_seqfeed_opts *o, gp_seqfeed **out) {
  *out = NULL;
  if (o->rows < 1) return GP_ERR(GP_ERR_USAGE, "sequence feed: rows must be at least 1");
  gp_seqfeed *f = calloc(1, sizeof *f);
  if (!f) return GP_ERR(GP_ERR_NOMEM, "out of memory for the sequence feed");
  f->c = c;
  f->L = *L;
  f->o = *o;
  if ((o->truncate || o->by_source_length) && !o->one_per_row) {
    free(f);
    return GP_ERR(GP_ERR_USAGE, "sequence feed: truncate and by_source_length need one_per_row");
  }
  int64_t n = o->limit > 0 && o->limit < c->pairs ? o->limit : c->pairs;
  size_t cap = (size_t)n + 1;
  f->keep = malloc(cap * sizeof(int64_t));
  f->order = malloc(cap * sizeof(int64_t));
  f->tmp = malloc(cap * sizeof(int64_t));
  f->key = calloc((size_t)c->pairs + cap + 1, sizeof(int64_t));
  f->row_off = malloc((cap + 1) * sizeof(int64_t));
  f->row_pair = malloc(cap * sizeof(int64_t));
  f->used_s = malloc(cap * sizeof(int64_t));
  f->used_t = malloc(cap * sizeof(int64_t));
  if (!f->keep || !f->order || !f->tmp || !f->key || !f->row_off || !f->row_pair || !f->used_s ||
      !f->used_t) {
    gp_seqfeed_free(f);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the sequence feed");
  }
  for (int64_t p = 0; p < n; p++) {
    int64_t ls = full_src_len(f, p), lt = full_tgt_len(f, p);
    if (ls > L->S || lt > L->T) {
      f->st.too_long++;
      if (!o->truncate) continue;
      ls = src_len(f, p);
      lt = tgt_len(f, p);
    }
    /* packing order: the fuller side first (as a fraction of its row), cross-multiplied */
    int64_t a = L->S ? ls * L->T : 0, b = lt * (L->S ? L->S : 1);
    f->key[p] = o->by_source_length ? ls : a > b ? a : b;
    f->keep[f->n_keep++] = p;
  }
  if (f->n_keep == 0) {
    gp_seqfeed_free(f);
    return GP_ERR(GP_ERR_DATA,
                  "no sentence pair fits the model's rows (source %lld, target %lld tokens): "
                  "all %lld are longer",
                  (long long)L->S, (long long)L->T, (long long)n);
  }
  plan_epoch(f, 0);
  if (f->batches < 1) {
    int64_t rows = f->n_rows;
    gp_seqfeed_free(f);
    return GP_ERR(GP_ERR_DATA, "the training data fills %lld rows, fewer than one batch of %lld",
                  (long long)rows, (long long)o->rows);
  }
  *out = f;
  return GP_OK;
}

void gp_seqfeed_free(gp_seqfeed *f) {
  if (!f) return;
  free(f->keep);
  free(f->order);
  free(f->tmp);
  free(f->key);
  free(f->row_off);
  free(f->row_pair);
  free(f->used_s);
  free(f->used_t);
  free(f);
}

static void fill_row(gp_seqfeed *f, void *const *in, int64_t slot, int64_t row) {
  const gp_seq_layout *L = &f->L;
  int32_t *p[GP_SEQ_ROLES] = {0};
  for (int r = 0; r < GP_SEQ_ROLES; r++)
    if (L->input[r] >= 0 && in[L->input[r]]) /* NULL: not read (never tgt_in, labels) */
      p[r] = (int32_t *)in[L->input[r]] + slot * (is_source_role(r) ? L->S : L->T);
  for (int r = 0; r < GP_SEQ_ROLES; r++) {
    if (!p[r]) continue;
    int32_t fillv = r == GP_SEQ_SRC || r == GP_SEQ_TGT_IN ? f->o.pad_id
                    : r == GP_SEQ_LABEL                   ? GP_SEQ_IGNORE
                                                          : 0;
    int64_t len = is_source_role(r) ? L->S : L->T;
    for (int64_t j = 0; j < len; j++)
      p[r][j] = fillv;
  }
  int64_t us = 0, ut = 0;
  for (int64_t a = f->row_off[row], k = 1; a < f->row_off[row + 1]; a++, k++) {
    int64_t q = f->row_pair[a];
    int64_t ls = src_len(f, q), lt = tgt_len(f, q);
    const int32_t *s = f->c->src + f->c->src_off[q], *t = f->c->tgt + f->c->tgt_off[q];
    int cut = ls < full_src_len(f, q);
    for (int64_t j = 0; j < ls; j++) {
      if (p[GP_SEQ_SRC])
        p[GP_SEQ_SRC][us + j] = cut && j == ls - 1 ? s[full_src_len(f, q) - 1] : s[j];
      if (p[GP_SEQ_SRC_MASK]) p[GP_SEQ_SRC_MASK][us + j] = 1;
      if (p[GP_SEQ_SRC_SEG]) p[GP_SEQ_SRC_SEG][us + j] = (int32_t)k;
      if (p[GP_SEQ_SRC_POS]) p[GP_SEQ_SRC_POS][us + j] = (int32_t)j;
    }
    for (int64_t j = 0; j < lt; j++) {
      p[GP_SEQ_TGT_IN][ut + j] = j == 0 ? f->o.bos_id : t[j - 1];
      p[GP_SEQ_LABEL][ut + j] = t[j];
      if (p[GP_SEQ_TGT_MASK]) p[GP_SEQ_TGT_MASK][ut + j] = 1;
      if (p[GP_SEQ_TGT_SEG]) p[GP_SEQ_TGT_SEG][ut + j] = (int32_t)k;
      if (p[GP_SEQ_TGT_POS]) p[GP_SEQ_TGT_POS][ut + j] = (int32_t)j;
    }
    us += ls;
    ut += lt;
  }
}

gp_status gp_seqfeed_next(gp_seqfeed *f, void *const *in, int64_t *rows) {
  *rows = 0;
  if (f->planned_epoch != f->epoch) plan_epoch(f, f->epoch);
  if (f->index >= f->batches) {
    if (!f->o.train) return GP_OK;
    f->epoch++;
    f->index = 0;
    plan_epoch(f, f->epoch);
  }
  int64_t r0 = f->index * f->o.rows, n = f->n_rows - r0 < f->o.rows ? f->n_rows - r0 : f->o.rows;
  for (int64_t i = 0; i < n; i++)
    fill_row(f, in, i, r0 + i);
  f->first_row = r0;
  f->index++;
  *rows = n;
  return GP_OK;
}

void gp_seqfeed_row_pairs(const gp_seqfeed *f, int64_t r, const int64_t **pairs, int64_t *n) {
  int64_t row = f->first_row + r;
  *pairs = f->row_pair + f->row_off[row];
  *n = f->row_off[row + 1] - f->row_off[row];
}

int64_t gp_seqfeed_batches(const gp_seqfeed *f) {
  return f->batches;
}
int64_t gp_seqfeed_pairs(const gp_seqfeed *f) {
  return f->n_keep;
}

void gp_seqfeed_tell(const gp_seqfeed *f, int64_t *epoch, int64_t *index) {
  *epoch = f->epoch;
  *index = f->index;
}

gp_status gp_seqfeed_seek(gp_seqfeed *f, int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0)
    return GP_ERR(GP_ERR_USAGE, "sequence feed: bad position (%lld, %lld)", (long long)epoch,
                  (long long)index);
  if (f->planned_epoch != epoch) plan_epoch(f, epoch);
  if (index > f->batches)
    return GP_ERR(GP_ERR_USAGE, "sequence feed: batch %lld is past the %lld of epoch %lld",
                  (long long)index, (long long)f->batches, (long long)epoch);
  f->epoch = epoch;
  f->index = index;
  return GP_OK;
}

void gp_seqfeed_stats_get(const gp_seqfeed *f, gp_seqfeed_stats *out) {
  *out = f->st;
}

void gp_seqfeed_fill(const gp_seqfeed *f, int64_t *rows, double *src_fill, double *tgt_fill) {
  int64_t s = 0, t = 0;
  for (int64_t a = 0; a < f->row_off[f->n_rows]; a++) {
    s += src_len(f, f->row_pair[a]);
    t += tgt_len(f, f->row_pair[a]);
  }
  *rows = f->n_rows;
  *src_fill = f->L.S && f->n_rows ? (double)s / (double)(f->n_rows * f->L.S) : 0;
  *tgt_fill = f->n_rows ? (double)t / (double)(f->n_rows * f->L.T) : 0;
}
