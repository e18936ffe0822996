/* Where a file that is written to a temporary name and renamed (weights, checkpoints, plans,
 * traces) may go. Renaming over something that is not a regular file replaces it: run as
 * root, `--trace /dev/full` turned the device into a plain file. */
#ifndef GP_IO_TARGET_H
#define GP_IO_TARGET_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* The path to write for `path` into out (n bytes): path itself when nothing is there or a
 * regular file is; the file a symbolic link leads to when that is a regular file (the link
 * stays a link); else GP_ERR_IO naming path ("not a regular file"). */
gp_status gp_io_write_target(const char *path, char *out, size_t n);

/* The temporary name a file bound for dst is written to before the rename: dst.tmp.PID, so
 * two processes writing the same file (two runs sharing a checkpoint folder) never write into
 * one temporary file, whose bytes the first rename would publish. */
gp_status gp_io_temp_name(const char *dst, char *out, size_t n);

/* The folder of path into dir (n bytes): "." without a slash, "/" for a file at the root;
 * returns the file's name within it (after the last slash). */
const char *gp_io_split_dir(const char *path, char *dir, size_t n);

/* Unlinks the temporary files (dst.tmp.PID, as gp_io_temp_name names them) that runs killed
 * while writing dst left beside it; returns how many. `any_pid`: every such file (the caller
 * holds a lock that keeps other writers out); else only those whose PID no process on this
 * machine has (kill(pid, 0) fails with ESRCH; EPERM, another user's, keeps its file). */
int gp_io_temp_remove_stale(const char *dst, int any_pid);

/* Writes a file to path as every output of gpipe is written, so that a reader (or a crash)
 * sees the old file or the whole new one: `write` puts the bytes on a stream to the
 * temporary name beside the target (gp_io_write_target, gp_io_temp_name; claimed, so a
 * signal removes it), which is flushed, synced, renamed over the target, and the folder
 * synced so the rename lasts. write's own errors are returned as they are; the others start
 * with path. */
typedef gp_status (*gp_io_writer)(FILE *f, void *ctx);
gp_status gp_io_write_file(const char *path, gp_io_writer write, void *ctx);

/* The whole of a small text file, NUL-terminated in *text (the caller frees it; len may be
 * NULL): one line starting with path for a file that is missing or unreadable, larger than
 * max_bytes or not text (a NUL byte), naming `what` it should have been ("a plan file"). */
gp_status gp_io_read_text(const char *path, size_t max_bytes, const char *what, char **text,
                          size_t *len);

/* The temporary files being written, so that a program stopped by a signal removes them.
 * gp_io_temp_claim records a name just before the file is created, gp_io_temp_release forgets
 * it once it was renamed or removed; both are thread-safe. gp_io_temp_remove_all unlinks the
 * recorded ones and is async-signal-safe (a signal handler may call it). At most
 * GP_IO_TEMP_SLOTS files are recorded at once; more are written unrecorded. */
#define GP_IO_TEMP_SLOTS 8
void gp_io_temp_claim(const char *tmp);
void gp_io_temp_release(const char *tmp);
void gp_io_temp_remove_all(void);

#endif
