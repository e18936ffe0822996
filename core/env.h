/* The GP_* environment settings: switches for comparing and diagnosing (the default is what
 * runs). One table says each one's accepted values, so every reader parses it the same way and
 * the programs refuse a bad value or a misspelt name before they start (gp_env_check). */
#ifndef GP_ENV_H
#define GP_ENV_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gp_env_key {
  GP_ENV_CPU_PIECES,    /* 1-64: pieces of each CPU thread's share of an op (1: whole shares) */
  GP_ENV_CPU_TAKEOVER,  /* 0 or 1: a finished CPU thread runs the pieces others have not started */
  GP_ENV_CPU_DIRECT,    /* 0, avx2 or avx512 (as 0, 1, 2): the CPU's direct convolution */
  GP_ENV_PIPELINE_SPIN, /* 0 or 1: a waiting stage spins first when it has a core of its own */
  GP_ENV_STEP_OVERLAP,  /* 0 or 1: stage 0 starts the next step's forwards early */
  GP_ENV_DEVICE_TIMING, /* 0 or 1: GPU stages timed on their streams */
  GP_ENV_CUDNN_GRAPH,   /* 0 or 1: cuDNN's graph API beside its legacy convolutions */
  GP_ENV_CUDNN_LOG,     /* 0 or 1: every cuDNN algorithm search's candidates on stderr */
  GP_ENV_NCCL,          /* 0 or 1: GPU stages of different processes use NCCL where built */
  GP_ENV_REMAT_SELECTIVE, /* 0 or 1: remat auto drops cheap layers' activations first */
  GP_ENV_SDPA,            /* 0 or 1: bf16 attention on a GPU through cuDNN's fused kernels */
  GP_ENV_SPLIT_GFLOPS,    /* GFLOP/s: the device rate auto's hand-off charge assumes (--by flops) */
  GP_ENV_CUDA_GRAPHS,     /* 0 or 1: GPU stages record their actions' layers as CUDA graphs */
  GP_ENV_BF16_STORE,      /* 0 or 1: bf16-mixed keeps activations for backward in 16 bits */
  GP_ENV_FUSE,            /* 0 or 1: the fusion pass over the loaded graph (core/spec/fuse.c) */
  GP_ENV_COUNT
} gp_env_key;

/* The setting's value: a switch is 0 or 1, a number itself, a choice the index of its word; dflt
 * when it is unset or not an accepted value (the programs have refused those already). */
int gp_env_get(gp_env_key key, int dflt);

/* Every GP_* variable in the environment: a setting's value must be accepted, and a name near
 * a setting's ("GP_CPU_PEICES") is taken for a misspelling. GP_ERR_USAGE with one line naming
 * the variable, what it takes and what it is for; GP_OK otherwise. Variables of gpipe's scripts
 * and tests, and names near no setting, pass. */
gp_status gp_env_check(void);

#ifdef __cplusplus
}
#endif

#endif
