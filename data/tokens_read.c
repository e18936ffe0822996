/* Reading token-id shards (spm_encode --output_format=id) into one int32 array per side. The
 * parser looks at one byte at a time over a gzip-or-plain stream, so that every error can say
 * the line and column, and it accepts exactly what spm_encode writes: ids separated by single
 * spaces, one sentence a line (in a TSV, source and target separated by one TAB). */
#include "data/tokens.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/gzstream.h"

#define READ_CHUNK (1 << 16)
#define ID_DIGITS_MAX 12 /* longer ids are certainly >= vocab; stop accumulating */

typedef struct side {
  int32_t *ids;
  int64_t n, cap;
  int64_t *off; /* off[k] = start of sentence k; off[sentences] = n */
  int64_t sentences, off_cap;
} side;

typedef struct parser {
  const char *path;
  const gp_tokens_opts *o;
  int tsv;
  side *sides[2];
  int field;         /* which side this part of the line is */
  int64_t line, col; /* of the byte being looked at, from 1 */
  int in_id, digits; /* inside an id, and its digit count */
  int after_space;   /* the last byte was a space: an id must follow */
  uint64_t val;
  int64_t id_col;
} parser;

void gp_tokens_opts_default(gp_tokens_opts *o) {
  memset(o, 0, sizeof *o);
  o->pad_id = 0;
  o->bos_id = 2;
  o->eos_id = 3;
  o->skip_long = 1;
  o->max_tokens = 4096;
  o->pad_multiple = 1;
  o->replicas = 1;
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return 1;
  int64_t c = *cap ? *cap : 4096;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

static gp_status push_id(parser *p, int32_t id) {
  side *s = p->sides[p->field];
  if (!grow((void **)&s->ids, &s->cap, s->n + 1, sizeof *s->ids))
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for the ids", p->path);
  s->ids[s->n++] = id;
  return GP_OK;
}

/* Closes the sentence of the current side: EOS, then the start of the next one. */
static gp_status end_sentence(parser *p) {
  GP_TRY(push_id(p, p->o->eos_id));
  side *s = p->sides[p->field];
  if (!grow((void **)&s->off, &s->off_cap, s->sentences + 2, sizeof *s->off))
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for the sentences", p->path);
  if (s->sentences == 0) s->off[0] = 0;
  s->off[++s->sentences] = s->n;
  return GP_OK;
}

static gp_status bad(const parser *p, int64_t col, const char *fmt, ...) GP_PRINTF(3, 4);
static gp_status bad(const parser *p, int64_t col, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return GP_ERR(GP_ERR_DATA, "%s:%lld:%lld: %s", p->path, (long long)p->line, (long long)col, msg);
}

static gp_status end_id(parser *p) {
  if (!p->in_id) return GP_OK;
  p->in_id = 0;
  if (p->digits > ID_DIGITS_MAX)
    return bad(p, p->id_col, "id of %d digits is >= the vocabulary size %d", p->digits,
               (int)p->o->vocab);
  if (p->val >= (uint64_t)p->o->vocab)
    return bad(p, p->id_col, "id %llu is >= the vocabulary size %d", (unsigned long long)p->val,
               (int)p->o->vocab);
  return push_id(p, (int32_t)p->val);
}

static gp_status byte(parser *p, unsigned char c) {
  p->col++;
  if (c >= '0' && c <= '9') {
    if (!p->in_id) {
      p->in_id = 1;
      p->digits = 0;
      p->val = 0;
      p->id_col = p->col;
    }
    if (++p->digits <= ID_DIGITS_MAX) p->val = p->val * 10 + (uint64_t)(c - '0');
    p->after_space = 0;
    return GP_OK;
  }
  if (c == ' ') {
    if (!p->in_id) return bad(p, p->col, "expected an id, found a space");
    p->after_space = 1;
    return end_id(p);
  }
  if (c == '\t' && p->tsv && p->field == 0) {
    if (p->after_space) return bad(p, p->col, "expected an id, found a TAB");
    GP_TRY(end_id(p));
    GP_TRY(end_sentence(p));
    p->field = 1;
    return GP_OK;
  }
  if (c == '\n') {
    if (p->after_space) return bad(p, p->col, "expected an id, found the end of the line");
    if (p->tsv && p->field == 0)
      return bad(p, p->col, "no TAB: a TSV line is source ids, TAB, target ids");
    GP_TRY(end_id(p));
    GP_TRY(end_sentence(p));
    p->field = 0;
    p->line++;
    p->col = 0;
    return GP_OK;
  }
  if (c == '\t')
    return bad(p, p->col, "%s",
               p->tsv ? "a second TAB" : "unexpected TAB (a TSV file was not asked for)");
  if (c > ' ' && c < 127)
    return bad(p, p->col, "expected a digit, space or newline, found '%c'", c);
  return bad(p, p->col, "expected a digit, space or newline, found byte 0x%02x", c);
}

/* Parses one file into its side(s). */
static gp_status parse_file(const char *path, int tsv, const gp_tokens_opts *o, side *a, side *b) {
  parser p = {.path = path, .o = o, .tsv = tsv, .sides = {a, b}, .line = 1};
  gp_gzstream *s = NULL;
  GP_TRY(gp_gzstream_open(path, &s));
  unsigned char *buf = malloc(READ_CHUNK);
  gp_status st = buf ? GP_OK : GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  uint64_t total = 0;
  while (st == GP_OK) {
    size_t got = 0;
    gp_status rs = gp_gzstream_read(s, buf, READ_CHUNK, &got);
    char msg[512] = "";
    if (rs != GP_OK) { /* the message without the "PATH: " that gzstream puts first */
      const char *m = gp_error_message();
      size_t n = strlen(path);
      if (strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
      snprintf(msg, sizeof msg, "%s", m);
    }
    total += got;
    for (size_t i = 0; i < got && st == GP_OK; i++)
      st = byte(&p, buf[i]);
    /* A stream that broke: where in the text, after what came before it was parsed. */
    if (st == GP_OK && rs != GP_OK)
      st = GP_ERR(rs, "%s:%lld:%lld: %s", path, (long long)p.line, (long long)p.col + 1, msg);
    if (got < READ_CHUNK) break;
  }
  if (st == GP_OK && total == 0) st = bad(&p, 1, "empty file");
  if (st == GP_OK && p.col > 0) st = byte(&p, '\n'); /* a last line without its newline */
  free(buf);
  gp_gzstream_close(s);
  return st;
}

static int64_t padded(int64_t len, int32_t m) {
  return (len + m - 1) / m * m;
}

gp_status gp_tokens_opts_check(const gp_tokens_opts *o) {
  if (o->vocab <= 0) return GP_ERR(GP_ERR_USAGE, "tokens: vocab %d must be > 0", (int)o->vocab);
  int32_t sp[3] = {o->pad_id, o->bos_id, o->eos_id};
  const char *nm[3] = {"pad_id", "bos_id", "eos_id"};
  for (int i = 0; i < 3; i++)
    if (sp[i] < 0 || sp[i] >= o->vocab)
      return GP_ERR(GP_ERR_USAGE, "tokens: %s %d must be in [0, vocab %d)", nm[i], (int)sp[i],
                    (int)o->vocab);
  if (o->max_len < 0) return GP_ERR(GP_ERR_USAGE, "tokens: max_len %d must be >= 0", o->max_len);
  if (o->pad_multiple < 1 || o->pad_multiple > 4096)
    return GP_ERR(GP_ERR_USAGE, "tokens: pad_multiple %d must be in [1, 4096]", o->pad_multiple);
  if (o->max_tokens < o->pad_multiple || o->max_tokens > INT32_MAX)
    return GP_ERR(GP_ERR_USAGE, "tokens: max_tokens %lld must be in [pad_multiple, 2^31)",
                  (long long)o->max_tokens);
  if (o->max_batch < 0)
    return GP_ERR(GP_ERR_USAGE, "tokens: max_batch %lld must be >= 0", (long long)o->max_batch);
  if (o->replicas < 1 || o->replica < 0 || o->replica >= o->replicas)
    return GP_ERR(GP_ERR_USAGE, "tokens: replica %d of %d is not in [0, replicas)", o->replica,
                  o->replicas);
  return GP_OK;
}

/* Drops the pairs that are too long (or refuses them) and moves the rest together. */
static gp_status keep_pairs(const char *src_path, const char *tgt_path, const gp_tokens_opts *o,
                            side *a, side *b, gp_token_corpus *c) {
  int64_t n = a->sentences, kept = 0, sa = 0, sb = 0;
  c->line = malloc((size_t)(n > 0 ? n : 1) * sizeof *c->line);
  if (!c->line) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", src_path);
  for (int64_t i = 0; i < n; i++) {
    int64_t ls = a->off[i + 1] - a->off[i], lt = b->off[i + 1] - b->off[i];
    int64_t lmax = ls > lt ? ls : lt;
    int too_src = o->max_len > 0 && ls > o->max_len, too_tgt = o->max_len > 0 && lt > o->max_len;
    int too_budget = padded(lmax, o->pad_multiple) > o->max_tokens;
    if (too_src || too_tgt || too_budget) {
      if (o->skip_long) {
        c->skipped++;
        continue;
      }
      const char *f = too_src || (!too_tgt && ls >= lt) ? src_path : tgt_path;
      int64_t len = too_src || (!too_tgt && ls >= lt) ? ls : lt;
      if (too_src || too_tgt)
        return GP_ERR(GP_ERR_DATA,
                      "%s:%lld:1: sentence of %lld tokens (EOS included) is longer "
                      "than max_len %d",
                      f, (long long)i + 1, (long long)len, (int)o->max_len);
      return GP_ERR(GP_ERR_DATA,
                    "%s:%lld:1: sentence of %lld tokens (EOS included, padded "
                    "%lld) does not fit max_tokens %lld",
                    f, (long long)i + 1, (long long)len, (long long)padded(len, o->pad_multiple),
                    (long long)o->max_tokens);
    }
    memmove(a->ids + sa, a->ids + a->off[i], (size_t)ls * sizeof *a->ids);
    memmove(b->ids + sb, b->ids + b->off[i], (size_t)lt * sizeof *b->ids);
    a->off[kept] = sa;
    b->off[kept] = sb;
    sa += ls;
    sb += lt;
    c->line[kept++] = i + 1;
    if (ls > c->max_src) c->max_src = (int32_t)ls;
    if (lt > c->max_tgt) c->max_tgt = (int32_t)lt;
  }
  a->off[kept] = sa;
  b->off[kept] = sb;
  c->pairs = kept;
  c->lines = n;
  c->src_tokens = sa;
  c->tgt_tokens = sb;
  return GP_OK;
}

void gp_token_corpus_free(gp_token_corpus *c) {
  if (!c) return;
  free(c->src);
  free(c->tgt);
  free(c->src_off);
  free(c->tgt_off);
  free(c->line);
  memset(c, 0, sizeof *c);
}

gp_status gp_token_corpus_read(const char *src_path, const char *tgt_path, const gp_tokens_opts *o,
                               gp_token_corpus *out) {
  memset(out, 0, sizeof *out);
  GP_TRY(gp_tokens_opts_check(o));
  side a = {0}, b = {0};
  gp_status st;
  const char *tp = tgt_path ? tgt_path : src_path;
  if (!tgt_path) {
    st = parse_file(src_path, 1, o, &a, &b);
  } else {
    st = parse_file(src_path, 0, o, &a, NULL);
    if (st == GP_OK) st = parse_file(tgt_path, 0, o, &b, NULL);
    if (st == GP_OK && a.sentences != b.sentences) {
      int src_longer = a.sentences > b.sentences;
      int64_t k = src_longer ? b.sentences : a.sentences;
      st = GP_ERR(GP_ERR_DATA, "%s:%lld:1: line %lld has no partner: %s has only %lld lines",
                  src_longer ? src_path : tgt_path, (long long)k + 1, (long long)k + 1,
                  src_longer ? tgt_path : src_path, (long long)k);
    }
  }
  if (st == GP_OK) st = keep_pairs(src_path, tp, o, &a, &b, out);
  out->src = a.ids;
  out->tgt = b.ids;
  out->src_off = a.off;
  out->tgt_off = b.off;
  if (st == GP_OK && out->pairs == 0 && !out->src_off) { /* no sentence at all */
    out->src_off = calloc(1, sizeof *out->src_off);
    out->tgt_off = calloc(1, sizeof *out->tgt_off);
    if (!out->src_off || !out->tgt_off) st = GP_ERR(GP_ERR_NOMEM, "%s: out of memory", src_path);
  }
  if (st != GP_OK) gp_token_corpus_free(out);
  return st;
}
