/* The GP_* settings: values read by the table's rules, defaults where unset or not accepted, and
 * gp_env_check refusing a bad value or a near-miss name with one line. */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "tests/support/check.h"

static int failures, passes;

static void clear(void) {
  const char *names[] = {"GP_CPU_PIECES",    "GP_CPU_TAKEOVER",  "GP_CPU_DIRECT",
                         "GP_PIPELINE_SPIN", "GP_DEVICE_TIMING", "GP_CUDNN_GRAPH",
                         "GP_CUDNN_LOG",     "GP_CPU_PEICES",    "GP_UNRELATED",
                         "GP_SCALING_STEPS", "GP_NCCL"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    unsetenv(names[i]);
}

/* gp_env_check with one variable set: GP_OK, or a usage error whose message holds `want` */
static void check_one(const char *name, const char *value, const char *want) {
  clear();
  setenv(name, value, 1);
  gp_error_clear();
  gp_status s = gp_env_check();
  if (!want)
    CHECK(s == GP_OK, "%s=%s accepted", name, value);
  else
    CHECK(s == GP_ERR_USAGE && strstr(gp_error_message(), want) &&
              !strchr(gp_error_message(), '\n'),
          "%s=%s refused with '%s'", name, value, want);
}

int main(void) {
  clear();
  CHECK(gp_env_get(GP_ENV_CPU_PIECES, 4) == 4, "unset: the default");
  setenv("GP_CPU_PIECES", "16", 1);
  CHECK(gp_env_get(GP_ENV_CPU_PIECES, 4) == 16, "16");
  const char *bad[] = {"0", "65", "-1", "4x", " 4", "", "+4", "0x10"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("GP_CPU_PIECES", bad[i], 1);
    CHECK(gp_env_get(GP_ENV_CPU_PIECES, 4) == 4, "'%s': the default", bad[i]);
  }
  setenv("GP_CPU_PIECES", "064", 1); /* decimal, as the flags and model files read numbers */
  CHECK(gp_env_get(GP_ENV_CPU_PIECES, 4) == 64, "064 is 64");
  const char *words[] = {"0", "avx2", "avx512"};
  for (int i = 0; i < 3; i++) {
    setenv("GP_CPU_DIRECT", words[i], 1);
    CHECK(gp_env_get(GP_ENV_CPU_DIRECT, 2) == i, "GP_CPU_DIRECT=%s is %d", words[i], i);
  }
  setenv("GP_CPU_DIRECT", "AVX2", 1);
  CHECK(gp_env_get(GP_ENV_CPU_DIRECT, 2) == 2, "AVX2 is no word of its: the default");
  setenv("GP_CUDNN_LOG", "1", 1);
  CHECK(gp_env_get(GP_ENV_CUDNN_LOG, 0) == 1, "a switch on");
  setenv("GP_CUDNN_LOG", "yes", 1);
  CHECK(gp_env_get(GP_ENV_CUDNN_LOG, 0) == 0, "a switch's bad value: the default");
  setenv("GP_NCCL", "0", 1);
  CHECK(gp_env_get(GP_ENV_NCCL, 1) == 0, "GP_NCCL=0 turns NCCL off");
  CHECK(gp_env_get(GP_ENV_COUNT, 7) == 7, "no such setting: the default");

  check_one("GP_CPU_PIECES", "1", NULL);
  check_one("GP_CPU_PIECES", "0", "GP_CPU_PIECES=0: expected a whole number from 1 to 64 (");
  check_one("GP_CPU_TAKEOVER", "0", NULL);
  check_one("GP_CPU_TAKEOVER", "no", "GP_CPU_TAKEOVER=no: expected 0 or 1 (");
  check_one("GP_CPU_DIRECT", "avx512", NULL);
  check_one("GP_CPU_DIRECT", "sse", "GP_CPU_DIRECT=sse: expected 0, avx2 or avx512 (");
  check_one("GP_PIPELINE_SPIN", "1\n2", "GP_PIPELINE_SPIN=1\\n2: expected 0 or 1");
  check_one("GP_CPU_PEICES", "1",
            "GP_CPU_PEICES is not a gpipe setting; did you mean GP_CPU_PIECES?");
  check_one("GP_NCCL", "0", NULL);
  check_one("GP_NCCL", "off", "GP_NCCL=off: expected 0 or 1 (");
  check_one("GP_UNRELATED", "1", NULL);     /* near no setting */
  check_one("GP_SCALING_STEPS", "3", NULL); /* a script's */
  clear();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
