/* IDX files (MNIST, Fashion-MNIST): big-endian magic 0x0000TTDD (TT type, DD dimension
 * count), DD big-endian u32 sizes, then the data in C order; usually gzipped. */
#ifndef GP_IDX_H
#define GP_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define GP_IDX_U8 0x08
#define GP_IDX_I8 0x09
#define GP_IDX_I16 0x0B
#define GP_IDX_I32 0x0C
#define GP_IDX_F32 0x0D
#define GP_IDX_F64 0x0E
#define GP_IDX_MAX_DIMS 8

typedef struct gp_idx {
  int type; /* GP_IDX_U8 ... */
  int ndim;
  int64_t dims[GP_IDX_MAX_DIMS]; /* as the header says */
  int64_t items;                 /* items read: dims[0], or fewer when limited */
  size_t elem_size;
  size_t item_bytes; /* bytes of one item: product of dims[1..] * elem_size */
  void *data;        /* items * item_bytes bytes, converted to host byte order */
} gp_idx;

/* Reads an IDX file (gzipped or plain). want_type / want_ndim (0 = any) are checked against
 * the magic. max_items > 0 reads only the first max_items items. what ("image", "label")
 * names the data in messages. Errors are GP_ERR_DATA naming the file: bad magic, absurd
 * sizes, "expected N bytes of image data, the file ended after M", data past the end. */
gp_status gp_idx_read(const char *path, int want_type, int want_ndim, int64_t max_items,
                      const char *what, gp_idx *out);
void gp_idx_free(gp_idx *x); /* frees the data; x itself is the caller's */

#endif
