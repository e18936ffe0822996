/* Block parameters: a scalar that is exactly `$p` becomes the parameter's value (any node);
 * `${expr}` becomes the value of integer/float arithmetic over parameters and numbers
 * (+ - * / // % and parentheses, with Python's meanings: / is true division, // and % floor).
 * Only whole scalars are replaced, so other text with a '$' in it stays as written. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/decimal.h"
#include "core/spec/internal.h"

gp_status gp_sp_count_read(gp_sp_ctx *c, const gp_ynode *at) {
  if (++c->reads <= GP_SP_MAX_EXPAND_READS) return GP_OK;
  return gp_sp_err(c, at->line, at->col,
                   "expanding the blocks reads more than %lld YAML nodes; refusing the file",
                   (long long)GP_SP_MAX_EXPAND_READS);
}

typedef struct num {
  int is_float;
  int64_t i;
  double f;
} num;

typedef struct eval {
  gp_sp_ctx *c;
  const gp_ynode *at;
  const gp_sp_env *env;
  const char *text, *p;
  int depth;
} eval;

static gp_status fail(eval *e, const char *fmt, ...) GP_PRINTF(2, 3);
static gp_status fail(eval *e, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* a long expression is cut so the message stays one readable line */
  int len = (int)strlen(e->text);
  if (len <= 60) return gp_sp_err(e->c, e->at->line, e->at->col, "in '%s': %s", e->text, msg);
  return gp_sp_err(e->c, e->at->line, e->at->col, "in '%.40s...': %s", e->text, msg);
}

static double as_f(num a) {
  return a.is_float ? a.f : (double)a.i;
}

static void skip_ws(eval *e) {
  while (*e->p == ' ' || *e->p == '\t')
    e->p++;
}

/* A number's text ("32", "0.5", "1e-3"): int if it reads fully as one, else float. */
static int parse_num(const char *s, num *out) {
  char *end;
  if (*s == '+' || isspace((unsigned char)*s)) return 0; /* as the settings read numbers */
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!errno && end != s && !*end) {
    out->is_float = 0;
    out->i = v;
    return 1;
  }
  double f = gp_decimal(s, &end);
  if (end == s || *end || !isfinite(f)) return 0;
  out->is_float = 1;
  out->f = f;
  return 1;
}

static const gp_ynode *env_find(const gp_sp_env *env, const char *name, size_t len) {
  for (int i = 0; env && i < env->n; i++)
    if (strlen(env->names[i]) == len && !strncmp(env->names[i], name, len)) return env->vals[i];
  return NULL;
}

static gp_status unknown_param(gp_sp_ctx *c, const gp_ynode *at, const gp_sp_env *env,
                               const char *name) {
  if (!env || !env->block)
    return gp_sp_err(c, at->line, at->col,
                     "'$%s': parameters can only be used inside a block's layers", name);
  /* while the defaults are bound, only the parameters before the one at hand are in env */
  const gp_ypair *later = gp_sp_get(env->params, name);
  if (later && later == &env->params->pairs[env->n])
    return gp_sp_err(c, at->line, at->col,
                     "the default of parameter '%s' of block '%s' uses itself", name, env->block);
  if (later)
    return gp_sp_err(c, at->line, at->col,
                     "parameter '%s' of block '%s' comes later (line %d); a default can only use "
                     "the parameters before it",
                     name, env->block, later->line);
  const char *near = gp_nearest(name, env->names, env->n);
  if (near)
    return gp_sp_err(c, at->line, at->col, "block '%s' has no parameter '%s'; did you mean '%s'?",
                     env->block, name, near);
  return gp_sp_err(c, at->line, at->col, "block '%s' has no parameter '%s'", env->block, name);
}

static gp_status expr(eval *e, num *out);

static gp_status atom(eval *e, num *out) {
  skip_ws(e);
  const char *s = e->p;
  if (*s == '(') {
    if (++e->depth > GP_SP_MAX_DEPTH) return fail(e, "parentheses nested too deep");
    e->p++;
    GP_TRY(expr(e, out));
    skip_ws(e);
    if (*e->p != ')')
      return *e->p ? fail(e, "expected ')' at '%s'", e->p) : fail(e, "expected ')' at the end");
    e->p++;
    e->depth--;
    return GP_OK;
  }
  if (*s == '-' || *s == '+') {
    if (++e->depth > GP_SP_MAX_DEPTH) return fail(e, "too many signs");
    e->p++;
    GP_TRY(atom(e, out));
    e->depth--;
    if (*s == '+') return GP_OK;
    if (out->is_float)
      out->f = -out->f;
    else if (out->i == INT64_MIN)
      return fail(e, "integer overflow");
    else
      out->i = -out->i;
    return GP_OK;
  }
  if (isalpha((unsigned char)*s) || *s == '_') {
    const char *q = s;
    while (isalnum((unsigned char)*q) || *q == '_')
      q++;
    e->p = q;
    char name[GP_SPEC_NAME];
    size_t len = (size_t)(q - s);
    if (len >= sizeof name) return fail(e, "'%.*s' is too long for a name", (int)len, s);
    memcpy(name, s, len);
    name[len] = 0;
    const gp_ynode *v = env_find(e->env, s, len);
    if (!v) return unknown_param(e->c, e->at, e->env, name);
    if (v->kind != GP_Y_SCALAR || !parse_num(v->s, out))
      return fail(e, "parameter '%s' is %s%s%s, not a number", name,
                  v->kind == GP_Y_SCALAR ? "'" : gp_sp_kind_name(v),
                  v->kind == GP_Y_SCALAR ? v->s : "", v->kind == GP_Y_SCALAR ? "'" : "");
    return GP_OK;
  }
  if (isdigit((unsigned char)*s) || *s == '.') {
    const char *q = s;
    while (isdigit((unsigned char)*q) || *q == '.')
      q++;
    if ((*q == 'e' || *q == 'E') &&
        (isdigit((unsigned char)q[1]) ||
         ((q[1] == '-' || q[1] == '+') && isdigit((unsigned char)q[2])))) {
      q += 2;
      while (isdigit((unsigned char)*q))
        q++;
    }
    char buf[64];
    size_t len = (size_t)(q - s);
    if (len >= sizeof buf) return fail(e, "number '%.*s' is too long", (int)len, s);
    memcpy(buf, s, len);
    buf[len] = 0;
    e->p = q;
    if (!parse_num(buf, out)) return fail(e, "'%s' is not a number", buf);
    return GP_OK;
  }
  if (!*s) return fail(e, "expected a number, a parameter or '(' at the end");
  return fail(e, "expected a number, a parameter or '(' at '%s'", s);
}

static gp_status apply(eval *e, char op, num a, num b, num *out) {
  int fl = a.is_float || b.is_float || op == '/';
  out->is_float = fl;
  if ((op == '/' || op == 'f' || op == '%') && as_f(b) == 0.0) return fail(e, "division by zero");
  if (fl) {
    double x = as_f(a), y = as_f(b), r = 0;
    switch (op) {
    case '+':
      r = x + y;
      break;
    case '-':
      r = x - y;
      break;
    case '*':
      r = x * y;
      break;
    case '/':
      r = x / y;
      break;
    case 'f':
      r = floor(x / y);
      break;
    default:
      r = x - y * floor(x / y);
      break;
    }
    if (!isfinite(r)) return fail(e, "the result is not a finite number");
    out->f = r;
    return GP_OK;
  }
  int64_t x = a.i, y = b.i, r = 0;
  int ovf = 0;
  switch (op) {
  case '+':
    ovf = __builtin_add_overflow(x, y, &r);
    break;
  case '-':
    ovf = __builtin_sub_overflow(x, y, &r);
    break;
  case '*':
    ovf = __builtin_mul_overflow(x, y, &r);
    break;
  default:
    if (x == INT64_MIN && y == -1) { /* the quotient overflows; the remainder is 0 */
      ovf = op == 'f';
      r = 0;
      break;
    }
    r = op == 'f' ? x / y : x % y;
    /* floor toward -inf, as Python does */
    if (op == 'f' && (x % y != 0) && ((x < 0) != (y < 0))) r--;
    if (op == '%' && r != 0 && ((r < 0) != (y < 0))) r += y;
    break;
  }
  if (ovf) return fail(e, "integer overflow");
  out->i = r;
  return GP_OK;
}

static gp_status term(eval *e, num *out) {
  GP_TRY(atom(e, out));
  for (;;) {
    skip_ws(e);
    char op = *e->p;
    if (op != '*' && op != '/' && op != '%') return GP_OK;
    e->p++;
    if (op == '/' && *e->p == '/') {
      op = 'f';
      e->p++;
    }
    num b;
    GP_TRY(atom(e, &b));
    GP_TRY(apply(e, op, *out, b, out));
  }
}

static gp_status expr(eval *e, num *out) {
  GP_TRY(term(e, out));
  for (;;) {
    skip_ws(e);
    char op = *e->p;
    if (op != '+' && op != '-') return GP_OK;
    e->p++;
    num b;
    GP_TRY(term(e, &b));
    GP_TRY(apply(e, op, *out, b, out));
  }
}

/* Shortest text that reads back as the same double; integral values print as integers so
 * that "${c / 2}" can feed an integer setting. */
static void format_num(num v, char *buf, size_t n) {
  if (!v.is_float) {
    snprintf(buf, n, "%lld", (long long)v.i);
    return;
  }
  gp_decimal_shortest(v.f, buf, n);
}

static gp_status eval_scalar(gp_sp_ctx *c, const gp_ynode *n, const gp_sp_env *env,
                             gp_ynode **out) {
  size_t len = strlen(n->s);
  char *body = gp_sp_alloc(&c->tmp, len);
  if (!body) return gp_sp_nomem();
  memcpy(body, n->s + 2, len - 3); /* between "${" and "}" */
  eval e = {c, n, env, n->s, body, 0};
  num v;
  skip_ws(&e);
  if (!*e.p) return fail(&e, "an empty expression");
  GP_TRY(expr(&e, &v));
  skip_ws(&e);
  if (*e.p) return fail(&e, "unexpected '%s'", e.p);
  char buf[64];
  format_num(v, buf, sizeof buf);
  gp_ynode *r = gp_sp_alloc(&c->tmp, sizeof *r);
  if (!r || !(r->s = gp_sp_strdup(&c->tmp, buf))) return gp_sp_nomem();
  r->kind = GP_Y_SCALAR;
  r->plain = 1;
  r->line = n->line;
  r->col = n->col;
  r->size = 1;
  *out = r;
  return GP_OK;
}

static int is_param_ref(const char *s) {
  if (s[0] != '$' || !(isalpha((unsigned char)s[1]) || s[1] == '_')) return 0;
  for (s++; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return 0;
  return 1;
}

gp_status gp_sp_subst(gp_sp_ctx *c, const gp_ynode *n, const gp_sp_env *env, const gp_ynode **out) {
  GP_TRY(gp_sp_count_read(c, n));
  *out = n;
  if (n->kind == GP_Y_SCALAR) {
    size_t len = strlen(n->s);
    if (is_param_ref(n->s)) {
      const gp_ynode *v = env_find(env, n->s + 1, len - 1);
      if (!v) return unknown_param(c, n, env, n->s + 1);
      *out = v;
      return GP_OK;
    }
    if (len >= 3 && n->s[0] == '$' && n->s[1] == '{' && n->s[len - 1] == '}') {
      gp_ynode *r = NULL;
      GP_TRY(eval_scalar(c, n, env, &r));
      *out = r;
    }
    return GP_OK;
  }
  /* copy a collection only when something inside it changed */
  int changed = 0;
  const gp_ynode **sub = gp_sp_alloc(&c->tmp, (size_t)(n->n ? n->n : 1) * sizeof *sub);
  if (!sub) return gp_sp_nomem();
  for (int i = 0; i < n->n; i++) {
    const gp_ynode *ch = n->kind == GP_Y_SEQ ? n->items[i] : n->pairs[i].val;
    GP_TRY(gp_sp_subst(c, ch, env, &sub[i]));
    changed |= sub[i] != ch;
  }
  if (!changed) return GP_OK;
  gp_ynode *r = gp_sp_alloc(&c->tmp, sizeof *r);
  if (!r) return gp_sp_nomem();
  *r = *n;
  if (n->kind == GP_Y_SEQ) {
    r->items = gp_sp_alloc(&c->tmp, (size_t)n->n * sizeof *r->items);
    if (!r->items) return gp_sp_nomem();
    for (int i = 0; i < n->n; i++)
      r->items[i] = (gp_ynode *)sub[i];
  } else {
    r->pairs = gp_sp_alloc(&c->tmp, (size_t)n->n * sizeof *r->pairs);
    if (!r->pairs) return gp_sp_nomem();
    for (int i = 0; i < n->n; i++) {
      r->pairs[i] = n->pairs[i];
      r->pairs[i].val = (gp_ynode *)sub[i];
    }
  }
  *out = r;
  return GP_OK;
}
