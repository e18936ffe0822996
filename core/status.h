/* Status codes and the thread-local error record. Library code returns a gp_status and
 * leaves a message here; only cli/ prints it and exits. */
#ifndef GP_STATUS_H
#define GP_STATUS_H

#include <stddef.h>

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

/* Records the message (printf-style) for this thread and returns code. Messages quote text
 * from users' files, so the record keeps them one printable line: see gp_text_one_line. */
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

/* Copies s into out (cap >= 1 bytes, always terminated, cut before a character or escape that
 * does not fit) so that it prints as one line and moves no terminal: control characters (C0,
 * DEL, C1 such as U+0085 and U+009B), the separators U+2028 and U+2029, the bidirectional
 * controls (U+061C, U+200E/F, U+202A-E, U+2066-9: they reorder what follows) and bytes that are
 * not UTF-8 become \n, \t, \r, \xNN (a byte) or \uNNNN (a character); other text, UTF-8
 * included, is kept. Applying it twice changes nothing more. Returns out. */
char *gp_text_one_line(char *out, size_t cap, const char *s);

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
