#include "core/io/target.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gp_status gp_io_temp_name(const char *dst, char *out, size_t n) {
  int len = snprintf(out, n, "%s.tmp.%ld", dst, (long)getpid());
  if (len < 0 || (size_t)len >= n) return GP_ERR(GP_ERR_IO, "%s: path too long", dst);
  return GP_OK;
}

const char *gp_io_split_dir(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, n, ".");
  else
    snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  return slash ? slash + 1 : path;
}

int gp_io_temp_remove_stale(const char *dst, int any_pid) {
  char dir[4096];
  const char *base = gp_io_split_dir(dst, dir, sizeof dir);
  size_t nb = strlen(base);
  DIR *d = nb ? opendir(dir) : NULL;
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, base, nb) != 0 || strncmp(e->d_name + nb, ".tmp.", 5) != 0) continue;
    const char *pid = e->d_name + nb + 5;
    if (!*pid || pid[strspn(pid, "0123456789")] || strlen(pid) > 9) continue;
    long p = strtol(pid, NULL, 10);
    if (p == (long)getpid()) continue;
    if (!any_pid && (p <= 0 || kill((pid_t)p, 0) == 0 || errno != ESRCH)) continue;
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    n += unlink(path) == 0;
  }
  closedir(d);
  return n;
}

/* A slot is free (0), being filled or emptied (1), or holds a name (2). */
static atomic_int temp_state[GP_IO_TEMP_SLOTS];
static char temp_path[GP_IO_TEMP_SLOTS][PATH_MAX + 64];

void gp_io_temp_claim(const char *tmp) {
  if (strlen(tmp) >= sizeof temp_path[0]) return;
  for (int i = 0; i < GP_IO_TEMP_SLOTS; i++) {
    int free_slot = 0;
    if (!atomic_compare_exchange_strong(&temp_state[i], &free_slot, 1)) continue;
    strcpy(temp_path[i], tmp);
    atomic_store(&temp_state[i], 2);
    return;
  }
}

void gp_io_temp_release(const char *tmp) {
  for (int i = 0; i < GP_IO_TEMP_SLOTS; i++) {
    int held = 2;
    if (atomic_load(&temp_state[i]) != 2 || strcmp(temp_path[i], tmp) != 0 ||
        !atomic_compare_exchange_strong(&temp_state[i], &held, 1))
      continue;
    temp_path[i][0] = 0;
    atomic_store(&temp_state[i], 0);
    return;
  }
}

void gp_io_temp_remove_all(void) {
  for (int i = 0; i < GP_IO_TEMP_SLOTS; i++)
    if (atomic_load(&temp_state[i]) == 2) unlink(temp_path[i]);
}

gp_status gp_io_write_target(const char *path, char *out, size_t n) {
  struct stat st;
  if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) {
    if (strlen(path) >= n) return GP_ERR(GP_ERR_IO, "%s: path too long", path);
    snprintf(out, n, "%s", path); /* nothing there (or unreadable: opening will say), or a file */
    return GP_OK;
  }
  if (S_ISLNK(st.st_mode) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
    char *real = realpath(path, NULL);
    if (!real) return GP_ERR(GP_ERR_IO, "%s: cannot resolve the link: %s", path, strerror(errno));
    gp_status s = strlen(real) < n ? GP_OK : GP_ERR(GP_ERR_IO, "%s: path too long", real);
    if (s == GP_OK) snprintf(out, n, "%s", real);
    free(real);
    return s;
  }
  if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
    int err = errno;
    char to[1024];
    ssize_t len = readlink(path, to, sizeof to - 1);
    to[len > 0 ? len : 0] = 0;
    return GP_ERR(GP_ERR_IO, "%s: a symbolic link to '%s', which %s", path, to,
                  err == ENOENT ? "does not exist" : strerror(err));
  }
  return GP_ERR(GP_ERR_IO, "%s: not a regular file; give the path of a file to write", path);
}

/* fsync of the folder makes a rename in it last. A file system that cannot sync folders
 * (EINVAL) has nothing more to offer. */
static gp_status sync_dir(const char *path, const char *dst) {
  char dir[PATH_MAX];
  gp_io_split_dir(dst, dir, sizeof dir);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  gp_status s = GP_OK;
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
    s = GP_ERR(GP_ERR_IO, "%s: cannot sync the folder %s: %s", path, dir, strerror(errno));
  if (fd >= 0) close(fd);
  return s;
}

gp_status gp_io_write_file(const char *path, gp_io_writer write, void *ctx) {
  char dst[PATH_MAX], tmp[PATH_MAX + 32];
  GP_TRY(gp_io_write_target(path, dst, sizeof dst));
  GP_TRY(gp_io_temp_name(dst, tmp, sizeof tmp));
  gp_io_temp_claim(tmp);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    gp_status s = GP_ERR(GP_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    gp_io_temp_release(tmp);
    return s;
  }
  errno = 0;
  gp_status s = write(f, ctx);
  if (s == GP_OK && (ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0))
    s = GP_ERR(GP_ERR_IO, "%s: cannot write: %s", path, strerror(errno ? errno : EIO));
  if (fclose(f) != 0 && s == GP_OK)
    s = GP_ERR(GP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  if (s == GP_OK && rename(tmp, dst) != 0)
    s = GP_ERR(GP_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
  if (s != GP_OK) remove(tmp);
  gp_io_temp_release(tmp);
  return s == GP_OK ? sync_dir(path, dst) : s;
}

gp_status gp_io_read_text(const char *path, size_t max_bytes, const char *what, char **text,
                          size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return GP_ERR(GP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = malloc(max_bytes + 1);
  if (!buf) {
    fclose(fp);
    return GP_ERR(GP_ERR_NOMEM, "%s: out of memory", path);
  }
  size_t n = fread(buf, 1, max_bytes + 1, fp);
  int err = ferror(fp);
  fclose(fp);
  gp_status st = GP_OK;
  if (err)
    st = GP_ERR(GP_ERR_IO, "%s: cannot read", path);
  else if (n > max_bytes)
    st = GP_ERR(GP_ERR_SPEC, "%s:1:1: more than %zu bytes; not %s", path, max_bytes, what);
  else if (memchr(buf, 0, n))
    st = GP_ERR(GP_ERR_SPEC, "%s:1:1: a NUL byte in the file (is it a text file?)", path);
  if (st != GP_OK) {
    free(buf);
    return st;
  }
  buf[n] = 0;
  *text = buf;
  if (len) *len = n;
  return GP_OK;
}
