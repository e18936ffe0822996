/* Helpers shared by the spec loader's tests: checks that count failures, loading a model
 * text that must load, and one that must fail with a given status and message parts. */
#ifndef GP_SPEC_TEST_H
#define GP_SPEC_TEST_H

#include "core/spec/spec.h"
#include "tests/support/check.h"

/* tests/support's CHECK counts into these (shared by a test and these helpers) */
extern int gp_t_failures, gp_t_passes;
#define failures gp_t_failures
#define passes gp_t_passes

void gp_t_fail(const char *file, int line, const char *cond, const char *fmt, ...) GP_PRINTF(4, 5);

/* Loads text as "t.yaml"; on failure reports the message as a test failure and returns NULL. */
gp_model *gp_t_load(const char *what, const char *text, const gp_override *ov, int n_ov);

/* Loading text as "t.yaml" must fail with code and a message containing every non-NULL part
 * (in order). Returns 1 when it did. */
int gp_t_load_fails(const char *what, const char *text, const gp_override *ov, int n_ov,
                    gp_status code, const char *const *parts, int n_parts);

/* Index of the node with this path, or -1 (reported as a failure). */
int gp_t_node(const gp_model *m, const char *path);

/* "[a, b]" of node i's output. */
const char *gp_t_out(const gp_model *m, int node, char *buf, int n);

/* Exit status for main: 1 and a summary when anything failed. */
int gp_t_finish(const char *suite);

#endif
