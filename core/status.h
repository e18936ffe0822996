/* Status codes and the thread-local error record. Library code returns a gp_status and
 * leaves a message here; only cli/ prints it and exits. */
#ifndef GP_STATUS_H
#define GP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gp_status {
  GP_OK = 0,
  GP_ERR_USAGE,       /* a bad flag or argument (exit 2) */
  GP_ERR_SPEC,        /* a bad model file: syntax, key, value, shape (exit 2) */
  GP_ERR_DATA,        /* a missing, truncated, corrupt or mismatched data file (exit 1) */
  GP_ERR_IO,          /* reading or writing a file failed (exit 1) */
  GP_ERR_NOMEM,       /* an allocation failed (exit 1) */
  GP_ERR_RUNTIME,     /* a failure while running: NaN loss, runtime shape error (exit 1) */
  GP_ERR_DEVICE,      /* a device library failed (exit 1) */
  GP_ERR_UNSUPPORTED, /* asked for something this build cannot do (exit 1) */
  GP_ERR_INTERRUPTED, /* stopped by SIGINT or SIGTERM (exit 128 + the signal, 130 if unknown) */
  GP_ERR_FULL,        /* a device's memory, or the memory limit set for it, cannot hold an
                         allocation: the run does not fit (exit 1); host malloc failing is NOMEM */
  GP_STATUS_COUNT
} gp_status;

#if defined(__GNUC__)
#define GP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GP_PRINTF(a, b)
#endif

/* Records the message (printf-style) for this thread and returns code. */
gp_status gp_error_set(gp_status code, const char *src_file, int src_line, const char *fmt, ...)
    GP_PRINTF(4, 5);
/* Prepends context ("stage 1, micro-batch 3: ") to the current message; returns code. */
gp_status gp_error_prefix(gp_status code, const char *fmt, ...) GP_PRINTF(2, 3);
const char *gp_error_message(void); /* the user-facing message, "" if none */
const char *gp_error_origin(void);  /* "core/arena.c:42": where it was raised, for debugging */
void gp_error_clear(void);
const char *gp_status_name(gp_status s);
/* Process exit code for a status: 0 ok, 2 usage/spec, 130 interrupted, 1 everything else. */
int gp_status_exit_code(gp_status s);

#define GP_ERR(code, ...) gp_error_set((code), __FILE__, __LINE__, __VA_ARGS__)
#define GP_TRY(expr)                                                                               \
  do {                                                                                             \
    gp_status gp_try_s_ = (expr);                                                                  \
    if (gp_try_s_ != GP_OK) return gp_try_s_;                                                      \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
