#include "cli/ckpt_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/shards.h"
#include "core/io/target.h"
#include "core/train/checkpoint.h"

/* The pid the holder wrote, or "" (one line of digits at most). */
static void holder(int fd, char *who, size_t n) {
  ssize_t got = pread(fd, who, n - 1, 0);
  who[got > 0 ? got : 0] = 0;
  who[strspn(who, "0123456789")] = 0;
}

gp_status gp_ckpt_dir_claim(const char *dir, int *stale, int *made) {
  *stale = 0;
  *made = mkdir(dir, 0777) == 0;
  if (!*made && errno != EEXIST)
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: cannot create it: %s", dir, strerror(errno));
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: not a directory", dir);
  /* a lock left by an earlier run opens in a folder that has become read-only: the first
   * checkpoint, after the training it was to keep, would fail */
  if (access(dir, W_OK | X_OK) != 0)
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: cannot write in it: %s", dir, strerror(errno));
  char path[4200];
  snprintf(path, sizeof path, "%s/lock", dir);
  /* a link or anything else there would have the pid written into what it names */
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: %s is not a regular file; remove it", dir, path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0)
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: cannot write in it: %s", dir, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char who[32];
    holder(fd, who, sizeof who);
    close(fd);
    if (err == EWOULDBLOCK)
      return GP_ERR(GP_ERR_IO,
                    "--checkpoint-dir %s: in use by another gpipe-train run%s%s%s; give each run "
                    "its own folder",
                    dir, who[0] ? " (pid " : "", who, who[0] ? ")" : "");
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: cannot lock %s: %s", dir, path, strerror(err));
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
    int err = errno;
    close(fd);
    return GP_ERR(GP_ERR_IO, "--checkpoint-dir %s: cannot write %s: %s", dir, path, strerror(err));
  }
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  *stale = gp_io_temp_remove_stale(path, 1); /* with the lock held no other run writes one */
  snprintf(path, sizeof path, "%s/checkpoint.safetensors.index.json", dir);
  *stale += gp_io_temp_remove_stale(path, 1);
  *stale += gp_ckpt_remove_stale(dir); /* shards of a sharded checkpoint never committed */
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  /* checkpoint.safetensors may be a link: then a killed run's temporary lies beside what it
   * names, where the lock does not reach, so there only those of runs that have exited go */
  struct stat ls;
  char real[4096];
  if (lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode) &&
      gp_io_write_target(path, real, sizeof real) == GP_OK)
    *stale += gp_io_temp_remove_stale(real, 0);
  return GP_OK; /* fd stays open: the lock is held until the process exits */
}

void gp_ckpt_dir_unmake(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/lock", dir);
  unlink(path);
  rmdir(dir); /* fails, and keeps it, if anything else is in it */
}

gp_status gp_ckpt_dir_fresh(const char *dir, int overwrite) {
  char path[4200];
  if (overwrite || !gp_ckpt_find(dir, path, sizeof path)) return GP_OK;
  /* its step, so the user sees what would be lost; an unreadable file is refused as well */
  char held[96] = "";
  gp_shards *f;
  if (gp_shards_open(path, &f) == GP_OK) {
    const char *step = gp_shards_meta(f, "gpipe.step");
    if (step && strlen(step) < 24) snprintf(held, sizeof held, " of step %s", step);
    gp_shards_free(f);
  }
  gp_error_clear();
  return GP_ERR(GP_ERR_USAGE,
                "--checkpoint-dir %s already holds a checkpoint%s; --resume continues it, another "
                "folder keeps it, --overwrite replaces it",
                dir, held);
}
