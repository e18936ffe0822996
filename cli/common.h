/* What gpipe-train, gpipe-partition and gpipe-bench share past the flag table: the model-load
 * prologue (--set and the settings flags), the pipeline flags, comma lists and enum names read
 * with one set of messages, and the error line a program ends on. */
#ifndef GP_CLI_COMMON_H
#define GP_CLI_COMMON_H

#include "cli/args.h"
#include "core/spec/spec.h"

/* The most --set values one run takes (each is one override kept until the load is done). */
#define GP_CLI_MAX_SETS 256

/* The flags the model-load prologue reads; any may be NULL (not a flag of the program). */
typedef struct gp_cli_load {
  const char *prog;        /* "gpipe-train": the prefix of the note a renamed key gets */
  const gp_flag *set;      /* --set KEY.PATH=VALUE, repeatable */
  const gp_flag *batch;    /* --batch-size: train.batch_size */
  const gp_flag *micro;    /* --micro-batches: pipeline.micro_batches */
  const char *micro_value; /* the value --micro-batches stands for (NULL: the flag's own) */
} gp_cli_load;

/* Loads the model file with the --set overrides, then the settings flags (which win, and which
 * the load checks against each other: micro_batches against batch_size), and notes an old key
 * name on stderr. More than GP_CLI_MAX_SETS --set values is GP_ERR_USAGE. */
gp_status gp_cli_model_load(const gp_cli_load *l, const char *file, gp_model **out);

/* `text` as one of `names` (NULL-terminated); *out is its index. GP_ERR_USAGE otherwise:
 * "FLAG: unknown value 'x'; did you mean 'y'? (expected one of a, b, c)". */
gp_status gp_cli_choice(const char *flag, const char *text, const char *const *names, int *out);
/* The schedules flags name: gp_schedule_names' (*n_named of them), then "auto" (index
 * *n_named); NULL-terminated. */
const char *const *gp_cli_schedule_choices(int *n_named);
/* A comma list of names, each as gp_cli_choice reads one, none twice; at most max. */
gp_status gp_cli_choices(const char *flag, const char *text, const char *const *names, int *out,
                         int max, int *n);
/* A comma list of integers in [min, max_value], each read as a single integer flag is (digits,
 * a '-' at most: no " 2", "+2", empty item or trailing comma); at most cap of them; none twice
 * when `distinct`. */
gp_status gp_cli_ints(const char *flag, const char *text, int min, int max_value, int distinct,
                      int *out, int cap, int *n);
/* A comma list of device names ("cpu", "cuda", "cuda:1"), each checked (gp_device_check) and
 * made canonical ("cuda" is "cuda:0"), at most GP_MAX_DEVICES. Whether the devices exist, and
 * whether they mix the CPU with CUDA, is the plan's check. */
gp_status gp_cli_devices(const char *flag, const char *text, char (*out)[16], int *n);

/* The single-valued pipeline flags of gpipe-train and gpipe-partition; any may be NULL. */
typedef struct gp_cli_pipeline {
  const gp_flag *stages, *schedule, *remat, *balance, *devices;
  const gp_flag *virtual_stages; /* --virtual-stages V (interleaved) */
} gp_cli_pipeline;

/* Applies the given ones to ps (model m's pipeline section, or a copy): a new stage count is
 * checked (gp_cli_stages_check) and drops the file's balance. --micro-batches is not here: it
 * goes into the load (gp_cli_load). */
gp_status gp_cli_pipeline_apply(const gp_cli_pipeline *f, const gp_model *m, gp_pipeline_spec *ps);
/* GP_ERR_USAGE unless m can be cut into k stages: "--stages 9: model x has 7 units, so K must
 * be 1..7" (at most GP_MAX_DEVICES). */
gp_status gp_cli_stages_check(const gp_model *m, int k);

/* Prints "PROG: message[hint]" on stderr and returns s's exit code. */
int gp_cli_fail(const char *prog, gp_status s, const char *hint);

#endif
