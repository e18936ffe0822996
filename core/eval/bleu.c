/* sacreBLEU-compatible corpus BLEU: the 13a tokenizer, clipped n-gram statistics and the
 * score. Every rule mirrors sacrebleu/tokenizers/tokenizer_13a.py, tokenizer_re.py and
 * metrics/bleu.py (2.x); the comments name the Python each part reproduces. */
#include "core/eval/bleu.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the 13a tokenizer ---- */

typedef struct tbuf {
  char *p;
  size_t n, cap;
} tbuf;

static int tb_reserve(tbuf *b, size_t cap) {
  if (cap <= b->cap) return 1;
  size_t c = b->cap ? b->cap : 256;
  while (c < cap)
    c *= 2;
  char *p = realloc(b->p, c);
  if (!p) return 0;
  b->p = p;
  b->cap = c;
  return 1;
}

/* Bytes of the whitespace character at s (Python's str.isspace(), which str.split() and
 * str.rstrip() use), or 0. Every such character starts with a byte that never continues a
 * UTF-8 sequence, so a byte-wise scan cannot match inside another character. */
static size_t py_space(const unsigned char *s, size_t left) {
  unsigned c = s[0];
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  if (left >= 2 && c == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2; /* U+0085, U+00A0 */
  if (left < 3) return 0;
  if (c == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
  if (c == 0xe2 && s[1] == 0x80 &&
      ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
    return 3; /* U+2000..U+200A, U+2028, U+2029, U+202F */
  if (c == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
  if (c == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

/* Length of s[0..n) without trailing whitespace: Python's str.rstrip(). */
static size_t py_rstrip(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t end = 0;
  for (size_t i = 0; i < n;) {
    size_t w = py_space(u + i, n - i);
    if (w) {
      i += w;
    } else {
      i++;
      end = i;
    }
  }
  return end;
}

/* str.replace(pat, rep): left to right, non-overlapping; rep is never longer than pat. */
static int replace_all(const char *s, size_t n, const char *pat, const char *rep, tbuf *out) {
  size_t pl = strlen(pat), rl = strlen(rep);
  if (!tb_reserve(out, n + 1)) return 0;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    if (i + pl <= n && !memcmp(s + i, pat, pl)) {
      memcpy(out->p + o, rep, rl);
      o += rl;
      i += pl;
    } else {
      out->p[o++] = s[i++];
    }
  }
  out->n = o;
  return 1;
}

static int is_digit(char c) {
  return c >= '0' && c <= '9';
}
static int is_pc(char c) {
  return c == '.' || c == ',';
}

/* r'([\{-\~\[-\` -\&\(-\+\:-\@\/])': ASCII punctuation and space except ' , - . */
static int punct13a(unsigned char c) {
  return (c >= 0x7b && c <= 0x7e) || (c >= 0x5b && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2b) || (c >= 0x3a && c <= 0x40) || c == '/';
}

/* Tokenizes s[0..n) into out (NUL-terminated). The regexes work on code points in Python; here
 * on bytes, which gives the same text: every pattern byte is ASCII, and where a pattern's
 * [^0-9] swallows only the first byte of a multi-byte character, the scan resumes on
 * continuation bytes, which match nothing. */
static int tokenize(const char *s, size_t n, tbuf *a, tbuf *b, tbuf *out) {
  /* tokenizer_13a.py: the language-independent part */
  if (!replace_all(s, n, "<skipped>", "", a)) return 0;
  if (!replace_all(a->p, a->n, "-\n", "", b)) return 0;
  if (!replace_all(b->p, b->n, "\n", " ", a)) return 0;
  if (memchr(a->p, '&', a->n)) {
    if (!replace_all(a->p, a->n, "&quot;", "\"", b)) return 0;
    if (!replace_all(b->p, b->n, "&amp;", "&", a)) return 0;
    if (!replace_all(a->p, a->n, "&lt;", "<", b)) return 0;
    if (!replace_all(b->p, b->n, "&gt;", ">", a)) return 0;
  }
  /* tokenizer_re.py on f' {line} ': rule 1, every punctuation byte -> " c " */
  if (!tb_reserve(b, 3 * (a->n + 2) + 1)) return 0;
  size_t o = 0;
  for (size_t i = 0; i < a->n + 2; i++) {
    char c = i == 0 || i == a->n + 1 ? ' ' : a->p[i - 1];
    if (punct13a((unsigned char)c)) {
      b->p[o++] = ' ';
      b->p[o++] = c;
      b->p[o++] = ' ';
    } else {
      b->p[o++] = c;
    }
  }
  b->n = o;
  /* rule 2: r'([^0-9])([\.,])' -> r'\1 \2 ' */
  if (!tb_reserve(a, 2 * b->n + 1)) return 0;
  o = 0;
  for (size_t i = 0; i < b->n;) {
    if (i + 1 < b->n && !is_digit(b->p[i]) && is_pc(b->p[i + 1])) {
      a->p[o++] = b->p[i];
      a->p[o++] = ' ';
      a->p[o++] = b->p[i + 1];
      a->p[o++] = ' ';
      i += 2;
    } else {
      a->p[o++] = b->p[i++];
    }
  }
  a->n = o;
  /* rule 3: r'([\.,])([^0-9])' -> r' \1 \2' */
  if (!tb_reserve(b, 2 * a->n + 1)) return 0;
  o = 0;
  for (size_t i = 0; i < a->n;) {
    if (i + 1 < a->n && is_pc(a->p[i]) && !is_digit(a->p[i + 1])) {
      b->p[o++] = ' ';
      b->p[o++] = a->p[i];
      b->p[o++] = ' ';
      b->p[o++] = a->p[i + 1];
      i += 2;
    } else {
      b->p[o++] = a->p[i++];
    }
  }
  b->n = o;
  /* rule 4: r'([0-9])(-)' -> r'\1 \2 ' */
  if (!tb_reserve(a, 2 * b->n + 1)) return 0;
  o = 0;
  for (size_t i = 0; i < b->n;) {
    if (i + 1 < b->n && is_digit(b->p[i]) && b->p[i + 1] == '-') {
      a->p[o++] = b->p[i];
      a->p[o++] = ' ';
      a->p[o++] = '-';
      a->p[o++] = ' ';
      i += 2;
    } else {
      a->p[o++] = b->p[i++];
    }
  }
  a->n = o;
  /* ' '.join(line.split()) */
  if (!tb_reserve(out, out->n + a->n + 1)) return 0;
  const unsigned char *u = (const unsigned char *)a->p;
  int need_sep = 0;
  for (size_t i = 0; i < a->n;) {
    size_t w = py_space(u + i, a->n - i);
    if (w) {
      i += w;
      continue;
    }
    if (need_sep) out->p[out->n++] = ' ';
    while (i < a->n && !py_space(u + i, a->n - i))
      out->p[out->n++] = a->p[i++];
    need_sep = 1;
  }
  out->p[out->n] = 0;
  return 1;
}

gp_status gp_bleu_tokenize_13a(const char *line, char **out) {
  tbuf a = {0}, b = {0}, o = {0};
  *out = NULL;
  if (!line) return GP_ERR(GP_ERR_USAGE, "gp_bleu_tokenize_13a: NULL line");
  int ok = tokenize(line, strlen(line), &a, &b, &o);
  free(a.p);
  free(b.p);
  if (!ok) {
    free(o.p);
    return GP_ERR(GP_ERR_NOMEM, "BLEU tokenizer: out of memory");
  }
  *out = o.p;
  return GP_OK;
}

/* ---- n-gram statistics of one sentence (metrics/bleu.py) ---- */

/* An n-gram of a tokenized line is the substring from its first token's start to its last
 * token's end: tokens hold no whitespace and are joined by single spaces, so equal substrings
 * are equal token tuples. */
typedef struct ngram {
  const char *s;
  size_t len;
  uint64_t hash;
  int order;       /* 1..4; 0 = empty slot */
  int ref_id;      /* the reference that ref_cur counts */
  int64_t ref_cur; /* count in reference ref_id */
  int64_t ref_max; /* largest count in any one reference */
  int64_t hyp;     /* count in the hypothesis */
} ngram;

typedef struct seq {
  size_t off, len;     /* tokenized text in the sentence buffer */
  int64_t ntok;        /* tokens */
  size_t *start, *end; /* token byte ranges (into the text) */
} seq;

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static ngram *lookup(ngram *tab, size_t mask, const char *s, size_t len, int order) {
  uint64_t h = fnv1a(s, len);
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    ngram *e = &tab[i];
    if (!e->order) {
      *e = (ngram){s, len, h, order, -1, 0, 0, 0};
      return e;
    }
    if (e->hash == h && e->len == len && !memcmp(e->s, s, len)) return e;
  }
}

static int64_t ngrams_of(int64_t ntok) {
  int64_t c = 0;
  for (int n = 1; n <= GP_BLEU_ORDER; n++)
    c += ntok >= n ? ntok - n + 1 : 0;
  return c;
}

static gp_status sentence(gp_bleu_stats *st, const char *hyp, const char *const *refs, int nr) {
  gp_status s = GP_OK;
  tbuf a = {0}, b = {0}, text = {0};
  seq *q = calloc((size_t)nr + 1, sizeof *q); /* q[0]: hypothesis, then present references */
  ngram *tab = NULL;
  int nq = 0;
  if (!q) goto nomem;
  /* tokenize: _preprocess_segment = tokenizer(sent.rstrip()) */
  for (int r = -1; r < nr; r++) {
    const char *line = r < 0 ? hyp : refs[r];
    if (!line) continue;
    q[nq].off = text.n;
    if (!tokenize(line, py_rstrip(line, strlen(line)), &a, &b, &text)) goto nomem;
    q[nq].len = text.n - q[nq].off;
    text.n++; /* keep the NUL between lines */
    nq++;
  }
  if (nq < 2) {
    s = GP_ERR(GP_ERR_USAGE, "BLEU: a sentence without any reference");
    goto done;
  }
  /* token ranges: tokens are separated by exactly one space */
  int64_t cap = 0;
  for (int k = 0; k < nq; k++) {
    const char *t = text.p + q[k].off;
    int64_t nt = 0;
    for (size_t i = 0; i < q[k].len; i++)
      nt += t[i] == ' ';
    nt = q[k].len ? nt + 1 : 0;
    q[k].ntok = nt;
    q[k].start = malloc(sizeof(size_t) * 2 * (size_t)(nt ? nt : 1));
    if (!q[k].start) goto nomem;
    q[k].end = q[k].start + nt;
    size_t from = 0;
    int64_t j = 0;
    for (size_t i = 0; i <= q[k].len; i++) {
      if (i == q[k].len || t[i] == ' ') {
        if (nt) q[k].start[j] = from, q[k].end[j] = i, j++;
        from = i + 1;
      }
    }
    cap += ngrams_of(nt);
  }
  size_t size = 16;
  while ((int64_t)size < 2 * cap + 2)
    size *= 2;
  tab = calloc(size, sizeof *tab);
  if (!tab) goto nomem;
  size_t mask = size - 1;
  /* _extract_reference_info: counts merged by max over references */
  for (int k = 1; k < nq; k++) {
    const char *t = text.p + q[k].off;
    for (int n = 1; n <= GP_BLEU_ORDER; n++) {
      for (int64_t i = 0; i + n <= q[k].ntok; i++) {
        size_t from = q[k].start[i], to = q[k].end[i + n - 1];
        ngram *e = lookup(tab, mask, t + from, to - from, n);
        if (e->ref_id != k) e->ref_id = k, e->ref_cur = 0;
        if (++e->ref_cur > e->ref_max) e->ref_max = e->ref_cur;
      }
    }
  }
  /* _compute_segment_statistics */
  gp_bleu_stats add = {0};
  const char *t = text.p + q[0].off;
  for (int n = 1; n <= GP_BLEU_ORDER; n++) {
    for (int64_t i = 0; i + n <= q[0].ntok; i++) {
      size_t from = q[0].start[i], to = q[0].end[i + n - 1];
      lookup(tab, mask, t + from, to - from, n)->hyp++;
      add.total[n - 1]++;
    }
  }
  for (size_t i = 0; i < size; i++)
    if (tab[i].order && tab[i].hyp)
      add.correct[tab[i].order - 1] += tab[i].hyp < tab[i].ref_max ? tab[i].hyp : tab[i].ref_max;
  /* _get_closest_ref_len: the closest, the shorter on a tie */
  int64_t hl = q[0].ntok, best = -1, diff = -1;
  for (int k = 1; k < nq; k++) {
    int64_t d = llabs(hl - q[k].ntok);
    if (diff < 0 || d < diff || (d == diff && q[k].ntok < best)) diff = d, best = q[k].ntok;
  }
  add.sys_len = hl;
  add.ref_len = best;
  gp_bleu_stats_merge(st, &add);
  goto done;
nomem:
  s = GP_ERR(GP_ERR_NOMEM, "BLEU: out of memory");
done:
  if (q)
    for (int k = 0; k < nq; k++)
      free(q[k].start);
  free(q);
  free(tab);
  free(a.p);
  free(b.p);
  free(text.p);
  return s;
}

gp_status gp_bleu_add_sentence(gp_bleu_stats *st, const char *hyp, const char *const *refs,
                               int n_refs) {
  if (!st || !hyp) return GP_ERR(GP_ERR_USAGE, "BLEU: NULL hypothesis");
  if (n_refs < 1 || !refs) return GP_ERR(GP_ERR_USAGE, "BLEU: a sentence without any reference");
  return sentence(st, hyp, refs, n_refs);
}

void gp_bleu_stats_merge(gp_bleu_stats *into, const gp_bleu_stats *from) {
  into->sys_len += from->sys_len;
  into->ref_len += from->ref_len;
  for (int n = 0; n < GP_BLEU_ORDER; n++) {
    into->correct[n] += from->correct[n];
    into->total[n] += from->total[n];
  }
}

/* BLEU.compute_bleu with smooth_method 'exp', effective_order False; the same operations in
 * the same order, so the score agrees to the last bit. */
void gp_bleu_compute(const gp_bleu_stats *st, gp_bleu *out) {
  memset(out, 0, sizeof *out);
  out->sys_len = st->sys_len;
  out->ref_len = st->ref_len;
  out->ratio = st->ref_len ? (double)st->sys_len / (double)st->ref_len : 0.0;
  int any = 0;
  for (int n = 0; n < GP_BLEU_ORDER; n++) {
    out->correct[n] = st->correct[n];
    out->total[n] = st->total[n];
    any |= st->correct[n] != 0;
  }
  out->bp = 1.0;
  if (st->sys_len < st->ref_len)
    out->bp = st->sys_len > 0 ? exp(1.0 - (double)st->ref_len / (double)st->sys_len) : 0.0;
  if (!any) return; /* "early stop if there are no matches": score 0, precisions 0 */
  double smooth = 1.0;
  for (int n = 0; n < GP_BLEU_ORDER; n++) {
    if (st->total[n] == 0) break;
    if (st->correct[n] == 0) {
      smooth *= 2;
      out->precision[n] = 100.0 / (smooth * (double)st->total[n]);
    } else {
      out->precision[n] = 100.0 * (double)st->correct[n] / (double)st->total[n];
    }
  }
  double sum = 0.0; /* my_log: log, with log(0) floored to -9999999999 */
  for (int n = 0; n < GP_BLEU_ORDER; n++)
    sum += out->precision[n] == 0.0 ? -9999999999.0 : log(out->precision[n]);
  out->score = out->bp * exp(sum / GP_BLEU_ORDER);
}

gp_status gp_bleu_corpus_multi(const char *const *hyps, const char *const *const *refs, int n_refs,
                               int n, gp_bleu *out) {
  if (n < 0 || n_refs < 1 || (n > 0 && (!hyps || !refs)))
    return GP_ERR(GP_ERR_USAGE, "BLEU: bad corpus (%d sentences, %d reference streams)", n, n_refs);
  const char **line = malloc(sizeof(char *) * (size_t)n_refs);
  if (!line) return GP_ERR(GP_ERR_NOMEM, "BLEU: out of memory");
  gp_bleu_stats st = {0};
  gp_status s = GP_OK;
  for (int i = 0; i < n && s == GP_OK; i++) {
    if (!hyps[i]) {
      s = GP_ERR(GP_ERR_USAGE, "BLEU: hypothesis %d is NULL", i);
      break;
    }
    for (int r = 0; r < n_refs; r++)
      line[r] = refs[r] ? refs[r][i] : NULL;
    s = sentence(&st, hyps[i], line, n_refs);
    if (s != GP_OK) gp_error_prefix(s, "sentence %d: ", i);
  }
  free(line);
  if (s == GP_OK) gp_bleu_compute(&st, out);
  return s;
}

gp_status gp_bleu_corpus(const char *const *hyps, const char *const *refs, int n, gp_bleu *out) {
  return gp_bleu_corpus_multi(hyps, &refs, 1, n, out);
}

int gp_bleu_format(const gp_bleu *b, char *buf, size_t n) {
  return snprintf(buf, n,
                  "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %" PRId64
                  " ref_len = %" PRId64 ")",
                  b->score, b->precision[0], b->precision[1], b->precision[2], b->precision[3],
                  b->bp, b->ratio, b->sys_len, b->ref_len);
}
