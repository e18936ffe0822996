/* The GP_* environment settings, read and checked by one table. */
#include "core/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/spec/cfg.h"

extern char **environ;

typedef struct env_setting {
  const char *name;
  int lo, hi;                 /* a number from lo to hi; a switch is 0 to 1 */
  const char *const *choices; /* or one of these words, NULL-terminated */
  const char *what;
} env_setting;

static const char *const direct_levels[] = {"0", "avx2", "avx512", NULL};

static const env_setting settings[GP_ENV_COUNT] = {
    [GP_ENV_CPU_PIECES] = {"GP_CPU_PIECES", 1, 64, NULL,
                           "pieces each CPU thread's share of an op is cut into; 1: whole shares"},
    [GP_ENV_CPU_TAKEOVER] = {"GP_CPU_TAKEOVER", 0, 1, NULL,
                             "0: a CPU thread that has finished waits instead of taking over "
                             "pieces others have not started"},
    [GP_ENV_CPU_DIRECT] = {"GP_CPU_DIRECT", 0, 0, direct_levels,
                           "the CPU's direct convolution: 0 for im2col and GEMM, avx2 or avx512 "
                           "for the widest tiles to use"},
    [GP_ENV_PIPELINE_SPIN] = {"GP_PIPELINE_SPIN", 0, 1, NULL,
                              "0: a waiting stage sleeps at once instead of spinning first"},
    [GP_ENV_STEP_OVERLAP] = {"GP_STEP_OVERLAP", 0, 1, NULL,
                             "0: every training step starts with every stage idle, none of "
                             "the next step's forwards run early"},
    [GP_ENV_DEVICE_TIMING] = {"GP_DEVICE_TIMING", 0, 1, NULL,
                              "0: GPU stages are timed by the host's launches, not on their "
                              "streams"},
    [GP_ENV_CUDNN_GRAPH] = {"GP_CUDNN_GRAPH", 0, 1, NULL,
                            "0: cuDNN's legacy convolution API alone, without its graph API"},
    [GP_ENV_CUDNN_LOG] = {"GP_CUDNN_LOG", 0, 1, NULL,
                          "1: every cuDNN algorithm search's candidates on stderr"},
    [GP_ENV_NCCL] = {"GP_NCCL", 0, 1, NULL,
                     "0: GPU stages in different processes hand tensors and sum gradients "
                     "through MPI (staged in page-locked host memory) instead of NCCL"},
    [GP_ENV_REMAT_SELECTIVE] = {"GP_REMAT_SELECTIVE", 0, 1, NULL,
                                "0: remat auto drops whole micro-batches alone, never the cheap "
                                "layers' activations first"},
    [GP_ENV_SDPA] = {"GP_SDPA", 0, 1, NULL,
                     "0: bf16 attention on a GPU runs the plain path (score matrices in memory) "
                     "instead of cuDNN's fused attention"},
    [GP_ENV_SPLIT_GFLOPS] = {"GP_SPLIT_GFLOPS", 1, 10000000, NULL,
                             "the device's GFLOP/s that schedule auto across processes weighs "
                             "hand-offs against under --by flops, instead of an sgemm measured "
                             "at the start (a plan that does not depend on the machine's load)"},
    [GP_ENV_CUDA_GRAPHS] = {"GP_CUDA_GRAPHS", 0, 1, NULL,
                            "0: GPU stages launch every op of an action one by one instead of "
                            "replaying CUDA graphs of its layers"},
    [GP_ENV_BF16_STORE] = {"GP_BF16_STORE", 0, 1, NULL,
                           "0: --precision bf16-mixed keeps the activations a backward reads in "
                           "f32 storage instead of 16 bits (the same values, twice the memory)"},
    [GP_ENV_FUSE] = {"GP_FUSE", 0, 1, NULL,
                     "0: no layer fusion (linear + activation, add + norm run as separate "
                     "layers; on the CPU the same numbers)"},
};

/* variables gpipe's scripts and tests set, which the programs do not read */
static const char *const others[] = {"GP_BLAS_REPLACED",    "GP_TEST_VERBOSE",  "GP_T_VERBOSE",
                                     "GP_SCALING",          "GP_SCALING_REPS",  "GP_SCALING_STEPS",
                                     "GP_SCALING_SCHEDULE", "GP_CAPACITY_ARGS", NULL};

/* 1 and the value in *out when v is accepted; else 0 */
static int parse(const env_setting *e, const char *v, int *out) {
  if (e->choices) {
    for (int i = 0; e->choices[i]; i++)
      if (strcmp(v, e->choices[i]) == 0) return *out = i, 1;
    return 0;
  }
  int64_t n;
  if (gp_cfg_parse_int(v, &n) != 1 || n < e->lo || n > e->hi) return 0;
  *out = (int)n;
  return 1;
}

int gp_env_get(gp_env_key key, int dflt) {
  if ((unsigned)key >= GP_ENV_COUNT) return dflt;
  const char *v = getenv(settings[key].name);
  int out;
  return v && parse(&settings[key], v, &out) ? out : dflt;
}

static gp_status refuse(const env_setting *e, const char *v) {
  char shown[96];
  gp_text_one_line(shown, sizeof shown, v);
  if (e->choices) {
    char words[96] = "";
    for (int i = 0; e->choices[i]; i++) {
      size_t n = strlen(words);
      snprintf(words + n, sizeof words - n, "%s%s",
               i == 0              ? ""
               : e->choices[i + 1] ? ", "
                                   : " or ",
               e->choices[i]);
    }
    return GP_ERR(GP_ERR_USAGE, "%s=%s: expected %s (%s)", e->name, shown, words, e->what);
  }
  if (e->lo == 0 && e->hi == 1)
    return GP_ERR(GP_ERR_USAGE, "%s=%s: expected 0 or 1 (%s)", e->name, shown, e->what);
  return GP_ERR(GP_ERR_USAGE, "%s=%s: expected a whole number from %d to %d (%s)", e->name, shown,
                e->lo, e->hi, e->what);
}

gp_status gp_env_check(void) {
  const char *names[GP_ENV_COUNT];
  for (int k = 0; k < GP_ENV_COUNT; k++)
    names[k] = settings[k].name;
  for (char **p = environ; p && *p; p++) {
    const char *eq = strchr(*p, '=');
    if (strncmp(*p, "GP_", 3) != 0 || !eq) continue;
    char name[64];
    size_t len = (size_t)(eq - *p);
    if (len >= sizeof name) continue; /* no setting's name is that long, nor near one */
    memcpy(name, *p, len);
    name[len] = 0;
    int known = 0, value;
    for (int k = 0; k < GP_ENV_COUNT && !known; k++)
      if (strcmp(name, names[k]) == 0) {
        known = 1;
        if (!parse(&settings[k], eq + 1, &value)) return refuse(&settings[k], eq + 1);
      }
    for (int i = 0; others[i] && !known; i++)
      known = strcmp(name, others[i]) == 0;
    const char *near = known ? NULL : gp_nearest(name, names, GP_ENV_COUNT);
    if (near)
      return GP_ERR(GP_ERR_USAGE, "%s is not a gpipe setting; did you mean %s? (unset %s)", name,
                    near, name);
  }
  return GP_OK;
}
