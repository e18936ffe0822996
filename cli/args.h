/* Command-line flags: a table of known flags, parsed with one clear error per mistake. */
#ifndef GP_CLI_ARGS_H
#define GP_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/backend.h"
#include "core/status.h"

typedef enum gp_flag_kind { GP_FLAG_BOOL, GP_FLAG_INT, GP_FLAG_STR, GP_FLAG_LIST } gp_flag_kind;

typedef struct gp_flag {
  const char *name; /* "--steps" */
  gp_flag_kind kind;
  const char *metavar; /* "N" */
  const char *help;
  int64_t min; /* INT: smallest accepted value */
  int64_t max; /* INT: largest accepted value; 0 means INT_MAX (callers store most in an int) */
  /* results */
  int given;
  int64_t i;
  const char *s;     /* STR: the value; INT: its text */
  const char **list; /* LIST: every value, in order (repeatable flag) */
  int n_list;
} gp_flag;

/* Opens /dev/null on any of fds 0-2 that is closed, so that a file the program opens later
 * (a --log) cannot become stdout or stderr and receive the console's lines. Call it first in
 * main; exits 1 when /dev/null cannot be opened. */
void gp_args_std_fds(void);

/* Parses argv against flags (terminated by a NULL name); non-flag words go to positional.
 * "--name=value" and "--name value" both work; in the second form a value that is a flag's
 * name or starts with "--" is refused (the flag after a forgotten value, not a value). A flag
 * with a value is given once (a second is refused); a LIST flag repeats; a BOOL flag twice is
 * once. Every word after "--" is positional. Errors are GP_ERR_USAGE. The GP_* environment
 * settings are checked first (gp_env_check). */
gp_status gp_args_parse(int argc, char **argv, gp_flag *flags, const char **positional,
                        int max_positional, int *n_positional);
gp_flag *gp_args_get(gp_flag *flags, const char *name);
void gp_args_free(gp_flag *flags);
void gp_args_usage(const char *prog, const char *synopsis, const gp_flag *flags);

/* A note for the user on stderr, "PROG: note: TEXT" (an old name read under its new one);
 * nothing when text is empty. */
void gp_args_note(const char *prog, const char *text);

/* Checks an output file's flag before the work that ends in writing it, so that a typo does
 * not cost the run; leaves no file behind. "-" is refused (it would be a file of that name, not
 * standard output). `renamed`: the file is written to a temporary name
 * and renamed into place, so it must not be a device or a FIFO (gp_io_write_target); then the
 * temporary files that runs killed while writing it left beside it (TARGET.tmp.PID, PID not
 * running on this machine) are removed, and *stale (when not NULL) grows by their number. */
gp_status gp_args_output_ok(const gp_flag *f, int renamed, int *stale);

/* A file a run reads or writes, named by its flag (NULL: the model file). An input's
 * `may_replace` names the one output that may be the same file (gpipe-train --load and
 * --save: training on from weights and keeping the result in their place). */
typedef struct gp_file_use {
  const char *flag, *path;
  const char *may_replace;
} gp_file_use;

/* Checks, before any work, that no output is an input (writing it would destroy the model
 * file, or a plan or weights the run reads) or another output (the later would replace the
 * earlier); compared as files: a link and its target, or two spellings of one path, are one.
 * Only regular files and paths with nothing there count (a device may take several writers).
 * GP_ERR_USAGE naming both flags. */
gp_status gp_args_files_distinct(const gp_file_use *in, int n_in, const gp_file_use *out,
                                 int n_out);
/* The given ones among flags[which[0..n)], as outputs; returns how many. */
int gp_args_file_uses(const gp_flag *flags, const int *which, int n, gp_file_use *uses);

/* Writes an output flag's file through a temporary one beside it (the target of
 * gp_io_write_target plus ".tmp.PID"), flushed, synced and renamed into place, so a failed
 * write (a full disk) leaves the old file or none, never a cut one. `write` gets the flag's
 * path for its messages; errors name the flag and the file, with strerror. */
typedef gp_status (*gp_args_writer)(FILE *fp, const char *path, const void *arg);
gp_status gp_args_write_output(const gp_flag *f, gp_args_writer write, const void *arg);

/* A size in bytes: "512MiB", "2GiB", "1.5GB", "64K", "1000000". K, M, G, T with or without
 * "iB" are binary; KB, MB, GB, TB decimal (case does not matter). At least 1 byte; anything
 * else is GP_ERR_USAGE naming the flag. */
gp_status gp_args_size(const char *flag, const char *text, size_t *out);
/* bytes in the unit that reads best, the same steps as the flags take: "512 B", "12.5 KiB",
 * "300.0 MiB", "1.5 GiB" (decimals digits after the point, none for bytes). */
const char *gp_args_bytes_str(double bytes, int decimals, char *buf, size_t n);
/* The same reading as a double (gpipe-partition's per-stage lists); 0 when it is not one. */
int gp_args_bytes(const char *s, double *out);

/* --precision: "fp32", "bf16" (the arithmetic of GEMMs and convolutions) or "bf16-mixed"
 * (that and bf16 activations between layers; core/backend.h gp_precision); anything else is
 * GP_ERR_USAGE naming the flag. */
gp_status gp_args_precision(const char *flag, const char *text, gp_precision *out);
/* The name --precision takes for p ("fp32", "bf16", "bf16-mixed"). */
const char *gp_args_precision_name(gp_precision p);

/* The values of a repeatable --set KEY.PATH=VALUE flag as model-file overrides (at most max);
 * keys are allocated: free them with gp_args_overrides_free. */
struct gp_override;
gp_status gp_args_overrides(const gp_flag *set, struct gp_override *ov, int max, int *n);
/* A flag that stands for a model-file setting (--batch-size: train.batch_size), given, as one
 * more override after the --set ones (so the flag wins), with `value` (NULL: the flag's text):
 * the load then checks the file's other settings against it, and its messages say "(set by
 * --batch-size 256)". Free with gp_args_overrides_free. */
gp_status gp_args_setting(const gp_flag *f, const char *path, const char *value,
                          struct gp_override *ov, int max, int *n);
void gp_args_overrides_free(struct gp_override *ov, int n);

#endif
