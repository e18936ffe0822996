/* Reading the JSON fixtures of the eval tests. */
#ifndef GP_TESTS_EVAL_FIXTURE_H
#define GP_TESTS_EVAL_FIXTURE_H

#include "core/io/json.h"

/* dir/name parsed, or NULL after printing why (a missing fixture is a failure). */
gp_json *fx_load(const char *dir, const char *name);
/* The array under key, or NULL after printing why. */
const gp_json *fx_array(const gp_json *j, const char *key, const char *where);

#endif
