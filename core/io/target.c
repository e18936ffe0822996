#include "core/io/target.h"

#include <errno.h>
#include <limits.h>
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
