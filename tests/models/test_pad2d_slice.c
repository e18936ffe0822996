/* The two layers AmoebaNet-D added, pad2d and slice, on the tests/layers bench: outputs and
 * input gradients against a direct loop over indices (bit for bit: they only move floats),
 * central finite differences, the gradient conventions (din written, not added; a NULL din
 * skipped), guard bytes after every buffer, their cost, and bad settings refused with a
 * located message. (Their end-to-end check against PyTorch is test_amoebanet_torch: the
 * FactorizedReduce shift and the packed cell inputs.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/check.h"
#include "tests/layers/harness.h"

static int failures, passes;

#define FD_H 1e-2f
#define SENTINEL 777.0f
#define BATCH 2

typedef struct move_case {
  const char *name, *yaml;
  gp_shape in;
  /* pad2d: top, bottom, left, right; slice: axis (resolved), start, end (resolved) */
  int is_slice;
  int64_t a, b, c, d;
} move_case;

/* clang-format off */
static const move_case cases[] = {
    {"pad2d shift (FactorizedReduce)", "{type: pad2d, top: -1, left: -1, bottom: 1, right: 1}",
     {3, {2, 5, 6}}, 0, -1, 1, -1, 1},
    {"pad2d pad", "{type: pad2d, top: 1, bottom: 2, right: 3}", {3, {2, 3, 4}}, 0, 1, 2, 0, 3},
    {"pad2d crop", "{type: pad2d, top: -1, bottom: -2, left: -1}", {3, {1, 5, 4}}, 0, -1, -2, -1, 0},
    {"pad2d crop rows, pad columns", "{type: pad2d, top: -2, left: 2, right: -1}",
     {3, {2, 4, 3}}, 0, -2, 0, 2, -1},
    {"pad2d all padding", "{type: pad2d, top: -3, bottom: 3}", {3, {1, 3, 2}}, 0, -3, 3, 0, 0},
    {"pad2d none", "{type: pad2d}", {3, {2, 2, 3}}, 0, 0, 0, 0, 0},
    {"slice channels", "{type: slice, start: 1, end: 3}", {3, {4, 2, 3}}, 1, 0, 1, 3, 0},
    {"slice to the end", "{type: slice, start: 2}", {3, {5, 2, 2}}, 1, 0, 2, 5, 0},
    {"slice negative", "{type: slice, start: -3, end: -1}", {3, {4, 3, 2}}, 1, 0, 1, 3, 0},
    {"slice width", "{type: slice, axis: 2, start: 1, end: 4}", {3, {2, 3, 5}}, 1, 2, 1, 4, 0},
    {"slice last axis", "{type: slice, axis: -1, end: 2}", {2, {3, 4}}, 1, 1, 0, 2, 0},
    {"slice everything", "{type: slice}", {1, {6}}, 1, 0, 0, 6, 0},
};
/* clang-format on */

/* The output the layer must produce, element by element, with zeros where it pads. */
static void reference(const move_case *c, const gp_shape *ys, const float *x, double *y) {
  const gp_shape *xs = &c->in;
  int64_t per_y = gp_shape_numel(ys), per_x = gp_shape_numel(xs);
  for (int64_t n = 0; n < BATCH; n++)
    for (int64_t i = 0; i < per_y; i++) {
      int64_t idx[GP_MAX_DIMS], rem = i;
      for (int j = ys->ndim - 1; j >= 0; j--) {
        idx[j] = rem % ys->d[j];
        rem /= ys->d[j];
      }
      if (c->is_slice)
        idx[c->a] += c->b;
      else
        idx[1] -= c->a, idx[2] -= c->c; /* output (r, col) reads input (r - top, col - left) */
      int inside = 1;
      int64_t off = 0;
      for (int j = 0; j < xs->ndim; j++) {
        inside &= idx[j] >= 0 && idx[j] < xs->d[j];
        off = off * xs->d[j] + idx[j];
      }
      y[n * per_y + i] = inside ? x[n * per_x + off] : 0.0;
    }
}

/* The adjoint of reference(): each input cell gets the gradient of the output cell that
 * copied it, or 0. */
static void reference_back(const move_case *c, const gp_shape *ys, const float *dy, double *dx) {
  const gp_shape *xs = &c->in;
  int64_t per_y = gp_shape_numel(ys), per_x = gp_shape_numel(xs);
  for (int64_t i = 0; i < BATCH * per_x; i++)
    dx[i] = 0.0;
  for (int64_t n = 0; n < BATCH; n++)
    for (int64_t i = 0; i < per_y; i++) {
      int64_t idx[GP_MAX_DIMS], rem = i;
      for (int j = ys->ndim - 1; j >= 0; j--) {
        idx[j] = rem % ys->d[j];
        rem /= ys->d[j];
      }
      if (c->is_slice)
        idx[c->a] += c->b;
      else
        idx[1] -= c->a, idx[2] -= c->c;
      int inside = 1;
      int64_t off = 0;
      for (int j = 0; j < xs->ndim; j++) {
        inside &= idx[j] >= 0 && idx[j] < xs->d[j];
        off = off * xs->d[j] + idx[j];
      }
      if (inside) dx[n * per_x + off] = dy[n * per_y + i];
    }
}

static gp_shape expected_shape(const move_case *c) {
  gp_shape y = c->in;
  if (c->is_slice) {
    y.d[c->a] = c->c - c->b;
  } else {
    y.d[1] += c->a + c->b;
    y.d[2] += c->c + c->d;
  }
  return y;
}

static double objective(const lt_layer *t) {
  const float *y = GP_F32P(&t->out), *r = GP_F32P(&t->dout);
  double s = 0;
  for (int64_t i = 0; i < gp_shape_numel(&t->out.shape); i++)
    s += (double)y[i] * (double)r[i];
  return s;
}

static void run_case(gp_backend *be, const move_case *c, uint64_t seed) {
  lt_layer t;
  char what[160];
  gp_status s = lt_layer_build(&t, be, c->yaml, 1, &c->in, NULL, BATCH);
  CHECK(s == GP_OK, "%s: build", c->name);
  if (s != GP_OK) {
    lt_layer_free(&t);
    return;
  }
  gp_shape want_shape = expected_shape(c);
  char b1[160], b2[160];
  CHECK(gp_shape_equal(&t.l.out_shape, &want_shape), "%s: output shape %s, want %s", c->name,
        gp_shape_str(&t.l.out_shape, b1, sizeof b1), gp_shape_str(&want_shape, b2, sizeof b2));
  gp_cost cost;
  memset(&cost, 0, sizeof cost);
  t.l.type->cost(&t.l, &cost);
  CHECK(cost.params == 0 && t.l.n_params == 0 && cost.saved_bytes == 0 &&
            cost.out_bytes == gp_shape_numel(&want_shape) * 4,
        "%s: cost %lld params, %lld saved, %lld output bytes", c->name, (long long)cost.params,
        (long long)cost.saved_bytes, (long long)cost.out_bytes);

  int64_t nx = gp_shape_numel(&t.in[0].shape), ny = gp_shape_numel(&t.out.shape);
  float *x = GP_F32P(&t.in[0]), *dx = GP_F32P(&t.din[0]);
  lt_fill_uniform(seed, x, nx, -1.5f, 1.5f);
  lt_fill_uniform(seed + 1, GP_F32P(&t.dout), ny, -1.0f, 1.0f);
  for (int64_t i = 0; i < ny; i++) /* a forward must write every output cell, padding too */
    GP_F32P(&t.out)[i] = SENTINEL;
  double *want = malloc(sizeof(double) * (size_t)(ny + nx));
  double *want_dx = want + ny;

  s = lt_forward(&t);
  CHECK(s == GP_OK, "%s: forward", c->name);
  reference(c, &want_shape, x, want);
  snprintf(what, sizeof what, "%s: output", c->name);
  CHECK(lt_compare(what, GP_F32P(&t.out), want, ny, LT_TOL_EXACT, NULL), "%s", what);

  for (int64_t i = 0; i < nx; i++) /* din is written (=): the sentinel must go */
    dx[i] = SENTINEL;
  s = lt_backward(&t);
  CHECK(s == GP_OK, "%s: backward", c->name);
  reference_back(c, &want_shape, GP_F32P(&t.dout), want_dx);
  snprintf(what, sizeof what, "%s: input gradient", c->name);
  CHECK(lt_compare(what, dx, want_dx, nx, LT_TOL_EXACT, NULL), "%s", what);

  /* central differences of sum(y * dout) */
  double *fd = malloc(sizeof(double) * (size_t)nx);
  for (int64_t i = 0; i < nx && s == GP_OK; i++) {
    float x0 = x[i];
    x[i] = x0 + FD_H;
    double xp = x[i];
    s = lt_forward(&t);
    double lp = objective(&t);
    x[i] = x0 - FD_H;
    double xm = x[i];
    if (s == GP_OK) s = lt_forward(&t);
    double lm = objective(&t);
    x[i] = x0;
    fd[i] = (lp - lm) / (xp - xm);
  }
  snprintf(what, sizeof what, "%s: input gradient vs finite differences", c->name);
  CHECK(s == GP_OK && lt_compare(what, dx, fd, nx, LT_TOL_FD_LINEAR, NULL), "%s", what);
  free(fd);

  /* a NULL din: nothing is written */
  for (int64_t i = 0; i < nx; i++)
    dx[i] = SENTINEL;
  t.din[0].data = NULL;
  s = lt_backward(&t);
  t.din[0].data = dx;
  int untouched = 1;
  for (int64_t i = 0; i < nx; i++)
    untouched &= dx[i] == SENTINEL;
  CHECK(s == GP_OK && untouched, "%s: backward with a NULL din wrote it or failed", c->name);
  free(want);
  lt_layer_free(&t);
}

typedef struct err_case {
  const char *name, *yaml;
  gp_shape in;
  gp_dtype dtype;
  const char *needles[3];
} err_case;

/* clang-format off */
static const err_case errors[] = {
    {"pad2d on [C]", "{type: pad2d, top: 1}", {1, {4}}, GP_F32, {"[C, H, W]", "[4]"}},
    {"pad2d crops everything", "{type: pad2d, top: -2, bottom: -1}", {3, {2, 3, 3}}, GP_F32,
     {"top -2, bottom -1", "0x3", "[2, 3, 3]"}},
    {"pad2d key typo", "{type: pad2d, bottm: 1}", {3, {2, 3, 3}}, GP_F32,
     {"test.yaml:1:", "unknown key 'bottm'", "did you mean 'bottom'?"}},
    {"pad2d not a number", "type: pad2d\nleft: one\n", {3, {2, 3, 3}}, GP_F32,
     {"test.yaml:2:7:", "left"}},
    {"pad2d of I32", "{type: pad2d, top: 1}", {3, {2, 3, 3}}, GP_I32, {"f32", "i32"}},
    {"slice past the end", "{type: slice, start: 2, end: 5}", {3, {4, 2, 2}}, GP_F32,
     {"start 2, end 5", "axis 0 (size 4)", "[4, 2, 2]"}},
    {"slice empty", "{type: slice, start: 3, end: 3}", {1, {4}}, GP_F32, {"non-empty", "start 3"}},
    {"slice reversed", "{type: slice, start: -1, end: 1}", {1, {4}}, GP_F32, {"start -1, end 1"}},
    {"slice before the start", "{type: slice, start: -5}", {1, {4}}, GP_F32, {"start -5"}},
    {"slice axis outside", "{type: slice, axis: 3}", {3, {2, 3, 3}}, GP_F32,
     {"axis 3", "[2, 3, 3]"}},
    {"slice key typo", "{type: slice, stop: 2}", {1, {4}}, GP_F32,
     {"test.yaml:1:", "unknown key 'stop'"}},
};
/* clang-format on */

static void run_error(const err_case *c) {
  lt_layer t;
  gp_error_clear();
  gp_status s = lt_layer_configure(&t, c->yaml, 1, &c->in, &c->dtype);
  const char *msg = gp_error_message();
  int ok = s == GP_ERR_SPEC;
  for (int i = 0; i < 3 && ok && c->needles[i]; i++)
    ok = strstr(msg, c->needles[i]) != NULL;
  CHECK(ok, "%s: want a spec error with \"%s\", \"%s\", \"%s\"; got %s: '%s'", c->name,
        c->needles[0], c->needles[1] ? c->needles[1] : "", c->needles[2] ? c->needles[2] : "",
        gp_status_name(s), msg);
  lt_layer_free(&t);
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(be, &cases[i], 100 + 7 * i);
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    run_error(&errors[i]);
  /* self-check: the reference catches a layer that shifts the other way */
  move_case wrong = cases[0];
  wrong.a = 1, wrong.b = -1, wrong.c = 1, wrong.d = -1;
  lt_layer t;
  if (lt_layer_build(&t, be, cases[0].yaml, 1, &cases[0].in, NULL, BATCH) == GP_OK) {
    int64_t ny = gp_shape_numel(&t.out.shape);
    double *want = malloc(sizeof(double) * (size_t)ny);
    lt_fill_uniform(5, GP_F32P(&t.in[0]), gp_shape_numel(&t.in[0].shape), -1.0f, 1.0f);
    CHECK(lt_forward(&t) == GP_OK, "self-check forward");
    reference(&wrong, &t.l.out_shape, GP_F32P(&t.in[0]), want);
    lt_set_quiet(1);
    CHECK(!lt_compare("self-check", GP_F32P(&t.out), want, ny, LT_TOL_EXACT, NULL),
          "a shift the other way was not caught");
    lt_set_quiet(0);
    free(want);
  }
  lt_layer_free(&t);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
