/* Flag parsing shared by the gpipe programs. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/decimal.h"
#include "core/env.h"
#include "core/io/target.h"
#include "core/spec/cfg.h"
#include "core/spec/spec.h"

void gp_args_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    /* the lower fds are open, so open() returns fd itself */
    int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got == fd) continue;
    fprintf(stderr, "cannot open /dev/null for closed fd %d: %s\n", fd, strerror(errno));
    exit(1);
  }
}

gp_flag *gp_args_get(gp_flag *flags, const char *name) {
  for (gp_flag *f = flags; f->name; f++)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}

/* Flags other trainers have for what a gpipe model file sets: "--lr" is answered with the
 * --set that does it, not with the nearest flag's name ("--log"). */
static const char *const setting_flags[][2] = {
    {"lr", "train.optimizer.lr"},
    {"learning-rate", "train.optimizer.lr"},
    {"weight-decay", "train.optimizer.weight_decay"},
    {"wd", "train.optimizer.weight_decay"},
    {"momentum", "train.optimizer.momentum"},
    {"optimizer", "train.optimizer"}, /* the whole section: sgd's momentum would not fit adamw */
    {"optim", "train.optimizer"},
    {"warmup", "train.schedule.warmup_steps"},
    {"warmup-steps", "train.schedule.warmup_steps"},
    {"lr-schedule", "train.schedule.type"},
    {"lr-scheduler", "train.schedule.type"},
    {"scheduler", "train.schedule.type"},
    {"log-every", "train.log_every"},
    {"log-interval", "train.log_every"},
    {"clip-grad-norm", "train.clip_grad_norm"},
    {"max-grad-norm", "train.clip_grad_norm"},
    {"grad-clip", "train.clip_grad_norm"},
    {"label-smoothing", "loss.label_smoothing"},
    {"data-dir", "data.path"},
    {"data-path", "data.path"},
    {"dataset", "data.dataset"},
};

/* Other trainers' flags for what a gpipe flag does: "--bf16" is answered with "--precision
 * bf16", not with the nearest name ("--pin"); {their flag, our flag, how to use ours}. */
static const char *const flag_twins[][3] = {
    {"bf16", "--precision",
     "--precision bf16-mixed (bf16 activations; --precision bf16: bf16 GEMMs and convolutions "
     "only)"},
    {"amp", "--precision", "--precision bf16-mixed (autocast-style: bf16 activations and GEMMs)"},
    {"fp16", "--precision", "--precision bf16-mixed (gpipe's half precision is bfloat16)"},
    {"half", "--precision", "--precision bf16-mixed (gpipe's half precision is bfloat16)"},
    {"mixed-precision", "--precision", "--precision bf16-mixed"},
    {"grad-accum", "--micro-batches", "--micro-batches M (gradients are summed over them)"},
    {"gradient-accumulation-steps", "--micro-batches",
     "--micro-batches M (gradients are summed over them)"},
    {"accumulate-grad-batches", "--micro-batches",
     "--micro-batches M (gradients are summed over them)"},
};

/* A flag's name without its dashes, lower case, '_' read as '-': "--Grad_Accum" -> "grad-accum". */
static void flag_key(const char *name, char *key, size_t cap) {
  size_t n = 0;
  while (*name == '-')
    name++;
  for (; *name && n + 1 < cap; name++)
    key[n++] = *name == '_' ? '-' : (char)tolower((unsigned char)*name);
  key[n] = 0;
}

/* The model-file key behind a flag such as "--learning_rate", or NULL. */
static const char *setting_of(const char *name) {
  char key[64];
  flag_key(name, key, sizeof key);
  for (size_t i = 0; i < sizeof setting_flags / sizeof setting_flags[0]; i++)
    if (strcmp(key, setting_flags[i][0]) == 0) return setting_flags[i][1];
  return NULL;
}

static gp_status unknown(gp_flag *flags, const char *arg, const char *value) {
  char twin[64];
  flag_key(arg, twin, sizeof twin);
  for (size_t i = 0; i < sizeof flag_twins / sizeof flag_twins[0]; i++)
    if (strcmp(twin, flag_twins[i][0]) == 0 && gp_args_get(flags, flag_twins[i][1]))
      return GP_ERR(GP_ERR_USAGE, "unknown flag '%s'; use %s", arg, flag_twins[i][2]);
  const char *key = gp_args_get(flags, "--set") ? setting_of(arg) : NULL;
  if (key) {
    /* the value the user meant, when it reads as one ("--lr 0.1", "--lr=0.1") */
    int plain = value && *value && strncmp(value, "--", 2) != 0 && strlen(value) < 64;
    for (const char *c = value; plain && *c; c++)
      plain = isgraph((unsigned char)*c);
    return GP_ERR(GP_ERR_USAGE, "unknown flag '%s'; the model file sets it: --set %s=%s", arg, key,
                  plain ? value : "VALUE");
  }
  const char *names[128];
  int n = 0;
  for (gp_flag *f = flags; f->name && n < 128; f++)
    names[n++] = f->name;
  const char *near = gp_nearest(arg, names, n);
  if (near) return GP_ERR(GP_ERR_USAGE, "unknown flag '%s'; did you mean '%s'?", arg, near);
  return GP_ERR(GP_ERR_USAGE, "unknown flag '%s' (see --help)", arg);
}

/* Flags that were renamed, old name first: still read, with a note, so that scripts written
 * for the old name keep working. */
static const char *const renamed_flags[][2] = {
    {"--checkpoint", "--remat"},
};

/* The flag `name` is the old name of, noting the rename on stderr; or NULL. */
static gp_flag *renamed_flag(gp_flag *flags, const char *argv0, const char *name) {
  for (size_t i = 0; i < sizeof renamed_flags / sizeof renamed_flags[0]; i++) {
    gp_flag *f =
        strcmp(name, renamed_flags[i][0]) == 0 ? gp_args_get(flags, renamed_flags[i][1]) : NULL;
    if (!f) continue;
    const char *prog = strrchr(argv0, '/');
    fprintf(stderr, "%s: note: %s is now %s\n", prog ? prog + 1 : argv0, name, f->name);
    return f;
  }
  return NULL;
}

void gp_args_note(const char *prog, const char *text) {
  if (text[0]) fprintf(stderr, "%s: note: %s\n", prog, text);
}

/* A word that is a flag's name, or "--" and more: not a value for the flag before it. */
static int looks_like_flag(gp_flag *flags, const char *word) {
  if (strncmp(word, "--", 2) == 0) return 1;
  const char *eq = strchr(word, '=');
  size_t len = eq ? (size_t)(eq - word) : strlen(word);
  for (gp_flag *f = flags; f->name; f++)
    if (strlen(f->name) == len && strncmp(f->name, word, len) == 0) return 1;
  return 0;
}

gp_status gp_args_parse(int argc, char **argv, gp_flag *flags, const char **positional,
                        int max_positional, int *n_positional) {
  *n_positional = 0;
  GP_TRY(gp_env_check()); /* the GP_* settings are the programs' input too */
  int flags_end = 0;      /* past "--": every word is a positional, "-x.yaml" included */
  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    if (!flags_end && strcmp(arg, "--") == 0) {
      flags_end = 1;
      continue;
    }
    if (flags_end || arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (*n_positional >= max_positional)
        return GP_ERR(GP_ERR_USAGE, "unexpected argument '%s'", arg);
      positional[(*n_positional)++] = arg;
      continue;
    }
    char name[64];
    const char *eq = strchr(arg, '='), *val = NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) return unknown(flags, arg, NULL);
    memcpy(name, arg, len);
    name[len] = 0;
    gp_flag *f = gp_args_get(flags, name);
    if (!f) f = renamed_flag(flags, argv[0], name);
    if (f) memcpy(name, f->name, strlen(f->name) + 1); /* messages name the flag as it is now */
    if (!f) return unknown(flags, name, eq ? eq + 1 : a + 1 < argc ? argv[a + 1] : NULL);
    if (f->kind == GP_FLAG_BOOL) {
      if (eq) return GP_ERR(GP_ERR_USAGE, "%s takes no value", name);
      f->given = 1; /* twice is once */
      continue;
    }
    if (eq) {
      val = eq + 1;
    } else if (a + 1 < argc) {
      val = argv[++a];
      /* "--csv --json": the next flag taken as the file name would silently drop that flag */
      if (looks_like_flag(flags, val))
        return GP_ERR(GP_ERR_USAGE,
                      "%s needs a value (%s), got the flag '%s' (a value spelt like a flag is "
                      "given as %s=VALUE)",
                      name, f->metavar, val, name);
    } else {
      return GP_ERR(GP_ERR_USAGE, "%s needs a value (%s)", name, f->metavar);
    }
    /* the later of two values would win unseen, the first unchecked ("--data real --data
     * synthetic"): a flag that takes one value takes it once */
    if (f->given && f->kind != GP_FLAG_LIST)
      return GP_ERR(GP_ERR_USAGE, "%s is given twice ('%s', then '%s'); give it once", name, f->s,
                    val);
    f->given = 1;
    if (f->kind == GP_FLAG_INT) {
      char *end;
      errno = 0;
      long long v = strtoll(val, &end, 10);
      const long long max = f->max ? f->max : INT_MAX;
      const int digits = isdigit((unsigned char)val[0]) ||
                         (val[0] == '-' && isdigit((unsigned char)val[1])); /* no " 2", "+2" */
      if (!digits || end == val || *end || (!errno && v < f->min) || (errno == ERANGE && v < 0))
        return GP_ERR(GP_ERR_USAGE, "%s: expected an integer >= %lld, got '%s'", name,
                      (long long)f->min, val);
      if (errno || v > max)
        return GP_ERR(GP_ERR_USAGE, "%s: at most %lld, got '%s'", name, max, val);
      f->i = v;
      f->s = val;
    } else if (f->kind == GP_FLAG_STR) {
      if (!*val) return GP_ERR(GP_ERR_USAGE, "%s: empty value", name);
      f->s = val;
    } else {
      const char **l = realloc(f->list, (size_t)(f->n_list + 1) * sizeof *l);
      if (!l) return GP_ERR(GP_ERR_NOMEM, "out of memory parsing flags");
      f->list = l;
      f->list[f->n_list++] = val;
    }
  }
  return GP_OK;
}

void gp_args_free(gp_flag *flags) {
  for (gp_flag *f = flags; f->name; f++) {
    free(f->list);
    f->list = NULL;
    f->n_list = 0;
  }
}

void gp_args_usage(const char *prog, const char *synopsis, const gp_flag *flags) {
  printf("usage: %s %s\n\n", prog, synopsis);
  for (const gp_flag *f = flags; f->name; f++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", f->name, f->metavar ? " " : "",
             f->metavar ? f->metavar : "");
    printf("  %-26s %s\n", left, f->help);
  }
}

gp_status gp_args_overrides(const gp_flag *set, gp_override *ov, int max, int *n) {
  *n = 0;
  for (int i = 0; i < set->n_list; i++) {
    const char *kv = set->list[i], *eq = strchr(kv, '=');
    if (!eq || eq == kv) return GP_ERR(GP_ERR_USAGE, "--set %s: expected KEY.PATH=VALUE", kv);
    if (*n >= max) return GP_ERR(GP_ERR_USAGE, "--set: at most %d overrides", max);
    char *key = strndup(kv, (size_t)(eq - kv));
    if (!key) return GP_ERR(GP_ERR_NOMEM, "out of memory");
    ov[(*n)++] = (gp_override){key, eq + 1};
  }
  return GP_OK;
}

gp_status gp_args_setting(const gp_flag *f, const char *path, const char *value, gp_override *ov,
                          int max, int *n) {
  if (!f->given) return GP_OK;
  if (*n >= max) return GP_ERR(GP_ERR_USAGE, "%s: too many settings with --set", f->name);
  char num[24];
  if (!value && f->kind == GP_FLAG_INT) snprintf(num, sizeof num, "%lld", (long long)f->i);
  if (!value) value = f->kind == GP_FLAG_INT ? num : f->s;
  /* one block, "--batch-size 0256\0" "256": freed with the message text */
  size_t nb = strlen(f->name) + 1 + strlen(f->s) + 1;
  char *key = strdup(path), *by = malloc(nb + strlen(value) + 1);
  if (!key || !by) {
    free(key);
    free(by);
    return GP_ERR(GP_ERR_NOMEM, "out of memory");
  }
  snprintf(by, nb, "%s %s", f->name, f->s);
  strcpy(by + nb, value);
  ov[(*n)++] = (gp_override){key, by + nb, by};
  return GP_OK;
}

void gp_args_overrides_free(gp_override *ov, int n) {
  for (int i = 0; i < n; i++) {
    free((char *)ov[i].path);
    free((char *)ov[i].by);
  }
}

int gp_args_bytes(const char *s, double *out) {
  static const struct {
    const char *unit;
    double mul;
  } units[] = {{"", 1},
               {"b", 1},
               {"k", 1024.0},
               {"kib", 1024.0},
               {"kb", 1e3},
               {"m", 1048576.0},
               {"mib", 1048576.0},
               {"mb", 1e6},
               {"g", 1073741824.0},
               {"gib", 1073741824.0},
               {"gb", 1e9},
               {"t", 1099511627776.0},
               {"tib", 1099511627776.0},
               {"tb", 1e12}};
  char *end;
  if (!isdigit((unsigned char)s[0]) && s[0] != '.') return 0;
  double v = gp_decimal(s, &end);
  if (end == s || !isfinite(v) || v <= 0) return 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(end, units[i].unit) == 0) {
      if (units[i].mul == 1 && v != floor(v)) return 0; /* bytes come whole */
      *out = v * units[i].mul;
      return *out >= 1 && isfinite(*out);
    }
  return 0;
}

const char *gp_args_bytes_str(double bytes, int decimals, char *buf, size_t n) {
  if (bytes < 1024)
    snprintf(buf, n, "%.0f B", bytes);
  else if (bytes < 1048576.0)
    snprintf(buf, n, "%.*f KiB", decimals, bytes / 1024.0);
  else if (bytes < 1073741824.0)
    snprintf(buf, n, "%.*f MiB", decimals, bytes / 1048576.0);
  else
    snprintf(buf, n, "%.*f GiB", decimals, bytes / 1073741824.0);
  return buf;
}

gp_status gp_args_size(const char *flag, const char *text, size_t *out) {
  double b;
  if (gp_args_bytes(text, &b) && b < 0x1p63) {
    *out = (size_t)b;
    return GP_OK;
  }
  return GP_ERR(GP_ERR_USAGE,
                "%s: cannot read '%s' as a size (like 512MiB, 2GiB, 1.5GB or a number of bytes)",
                flag, text);
}

static const char *const prec_names[] = {
    [GP_PREC_FP32] = "fp32", [GP_PREC_BF16] = "bf16", [GP_PREC_BF16_MIXED] = "bf16-mixed"};

const char *gp_args_precision_name(gp_precision p) {
  return (unsigned)p < sizeof prec_names / sizeof prec_names[0] ? prec_names[p] : "?";
}

gp_status gp_args_precision(const char *flag, const char *text, gp_precision *out) {
  const char *const *names = prec_names;
  for (int i = 0; i < (int)(sizeof prec_names / sizeof prec_names[0]); i++)
    if (strcmp(text, names[i]) == 0) {
      *out = (gp_precision)i;
      return GP_OK;
    }
  return GP_ERR(GP_ERR_USAGE, "%s: unknown value '%s' (fp32, bf16 or bf16-mixed)", flag, text);
}

gp_status gp_args_output_ok(const gp_flag *f, int renamed, int *stale) {
  if (strcmp(f->s, "-") == 0) /* the usual "standard output" would be a file of that name */
    return GP_ERR(GP_ERR_USAGE, "%s -: would write a file named '-', not standard output; %s",
                  f->name, renamed ? "give a file name" : "give a file name or /dev/stdout");
  struct stat st;
  int existed = stat(f->s, &st) == 0;
  if (existed && S_ISDIR(st.st_mode))
    return GP_ERR(GP_ERR_IO, "%s %s: is a directory", f->name, f->s);
  /* "--csv /dev/stdout" with stdout sent to a file: the file written in place of it would
   * replace what the program printed there (and a log would mix with it) */
  struct stat std;
  for (int fd = 1; existed && S_ISREG(st.st_mode) && fd <= 2; fd++)
    if (fstat(fd, &std) == 0 && std.st_dev == st.st_dev && std.st_ino == st.st_ino)
      return GP_ERR(GP_ERR_USAGE, "%s %s: is the file the program's %s goes to; give another file",
                    f->name, f->s, fd == 1 ? "standard output" : "standard error");
  char dst[4096];
  gp_status s = renamed ? gp_io_write_target(f->s, dst, sizeof dst) : GP_OK;
  if (s != GP_OK) return gp_error_prefix(s, "%s ", f->name);
  FILE *fp = fopen(f->s, "a");
  if (!fp) return GP_ERR(GP_ERR_IO, "%s %s: cannot write: %s", f->name, f->s, strerror(errno));
  fclose(fp);
  if (!existed) remove(f->s);
  int n = renamed ? gp_io_temp_remove_stale(dst, 0) : 0;
  if (stale) *stale += n;
  return GP_OK;
}

typedef struct out_ctx {
  const gp_flag *f;
  gp_args_writer write;
  const void *arg;
} out_ctx;

static gp_status write_out(FILE *fp, void *ctx) {
  const out_ctx *o = ctx;
  return o->write(fp, o->f->s, o->arg);
}

gp_status gp_args_write_output(const gp_flag *f, gp_args_writer write, const void *arg) {
  gp_status s = gp_io_write_file(f->s, write_out, &(out_ctx){f, write, arg});
  return s == GP_OK ? GP_OK : gp_error_prefix(s, "%s ", f->name);
}

/* A file's identity: its device and inode when it is a regular file, its resolved folder and
 * name when nothing is there yet (kind 2), nothing to compare otherwise (kind 0). */
typedef struct file_id {
  int kind;
  dev_t dev;
  ino_t ino;
  char path[PATH_MAX + 256];
} file_id;

static void identify(const char *p, file_id *id) {
  struct stat st;
  id->kind = 0;
  if (stat(p, &st) == 0) {
    if (!S_ISREG(st.st_mode)) return;
    id->kind = 1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    return;
  }
  char dir[PATH_MAX];
  const char *base = gp_io_split_dir(p, dir, sizeof dir);
  char real[PATH_MAX];
  if (!realpath(dir, real) || strlen(base) > 255) return; /* opening it will say */
  id->kind = 2;
  snprintf(id->path, sizeof id->path, "%s/%s", real, base);
}

static int same_file(const file_id *a, const file_id *b) {
  if (!a->kind || a->kind != b->kind) return 0;
  return a->kind == 1 ? a->dev == b->dev && a->ino == b->ino : strcmp(a->path, b->path) == 0;
}

int gp_args_file_uses(const gp_flag *flags, const int *which, int n, gp_file_use *uses) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (flags[which[i]].given)
      uses[k++] = (gp_file_use){flags[which[i]].name, flags[which[i]].s, NULL};
  return k;
}

gp_status gp_args_files_distinct(const gp_file_use *in, int n_in, const gp_file_use *out,
                                 int n_out) {
  for (int o = 0; o < n_out; o++) {
    file_id a, b;
    identify(out[o].path, &a);
    for (int i = 0; i < n_in; i++) {
      if (in[i].may_replace && strcmp(in[i].may_replace, out[o].flag) == 0) continue;
      identify(in[i].path, &b);
      if (!same_file(&a, &b)) continue;
      if (!in[i].flag)
        return GP_ERR(GP_ERR_USAGE, "%s %s: that is the model file; give the output another path",
                      out[o].flag, out[o].path);
      return GP_ERR(GP_ERR_USAGE,
                    "%s %s: that is %s's file, which this run reads; give the output another path",
                    out[o].flag, out[o].path, in[i].flag);
    }
    for (int q = 0; q < o; q++) {
      identify(out[q].path, &b);
      if (same_file(&a, &b))
        return GP_ERR(GP_ERR_USAGE, "%s %s: %s writes that file too; give each output its own path",
                      out[o].flag, out[o].path, out[q].flag);
    }
  }
  return GP_OK;
}
