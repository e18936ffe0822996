/* A test-only layer type with deliberate bugs, so the layer tests can show that each of
 * their checks fails when it should (a check that cannot fail is a defect). */
#ifndef LT_SELFTEST_LAYER_H
#define LT_SELFTEST_LAYER_H

#include "core/layer.h"

/* "{type: selftest_scale, bug: B}": y = w x with one weight w, where B is one of
 * none, grad, din_accum, param_assign, recompute, overflow, cost (the combined backward's),
 * split_b, split_w (its halves: B adds the weight gradient too; W adds nothing). */
extern const gp_layer_type lt_selftest_scale;
extern const char *const lt_selftest_bugs[];       /* NULL-terminated, "none" first */
extern const char *const lt_selftest_split_bugs[]; /* the same, for the halves */

#endif
