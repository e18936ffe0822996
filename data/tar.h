/* A streaming tar reader over a gzip-or-plain file: members are visited in order and read
 * from the stream, nothing is unpacked to disk. Errors name the file, member and offset. */
#ifndef GP_TAR_H
#define GP_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct gp_tar gp_tar;

gp_status gp_tar_open(const char *path, gp_tar **out);
void gp_tar_close(gp_tar *t);
/* Advances to the next regular file (directories and other entries are skipped, as is what
 * is left of the current member). *name stays valid until the next call; *name is NULL at
 * the end of the archive. */
gp_status gp_tar_next(gp_tar *t, const char **name, uint64_t *size);
/* Reads up to n bytes of the current member; *got < n only at its end. A member cut short
 * by the end of the file is GP_ERR_DATA naming the member. */
gp_status gp_tar_read(gp_tar *t, void *buf, size_t n, size_t *got);
const char *gp_tar_path(const gp_tar *t);

#endif
