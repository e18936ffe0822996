/* A byte stream over a file that may be gzip-compressed (one or several members) or plain,
 * read through zlib without unpacking to disk. Errors name the file. */
#ifndef GP_GZSTREAM_H
#define GP_GZSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct gp_gzstream gp_gzstream;

/* A file that cannot be opened is GP_ERR_DATA "FILE: cannot open: reason" (a missing data
 * file is a data error). */
gp_status gp_gzstream_open(const char *path, gp_gzstream **out);
void gp_gzstream_close(gp_gzstream *s);
/* Reads up to n bytes; *got < n only at the end of the data. Corrupt or truncated gzip data
 * is GP_ERR_DATA, a failing read GP_ERR_IO. */
gp_status gp_gzstream_read(gp_gzstream *s, void *buf, size_t n, size_t *got);
const char *gp_gzstream_path(const gp_gzstream *s);
uint64_t gp_gzstream_offset(const gp_gzstream *s); /* uncompressed bytes read so far */

#endif
