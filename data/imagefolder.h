/* ImageNet as a folder tree, torchvision's ImageFolder layout: ROOT/<class>/<image>.jpg. */
#ifndef GP_IMAGEFOLDER_H
#define GP_IMAGEFOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* An image file larger than this is refused as damaged (no data set image is). */
#define GP_IMAGE_FILE_MAX ((size_t)64 << 20)

typedef struct gp_imagefolder {
  int n_classes;
  char **classes; /* label -> class name */
  int64_t n;      /* images */
  char **paths;   /* ROOT/<class>/.../<file> */
  int32_t *labels;
} gp_imagefolder;

/* Scans root. Classes are the names of classes_txt when given (not NULL or "": gp_classes_read,
 * label = line number), else the sub-folders of class_root when given (a test split takes the
 * training split's classes), else root's own sub-folders; sub-folders are sorted bytewise
 * (labels 0..C-1). Every class folder of root must be in that list (a listed class may have
 * no folder, and keeps its label). Images
 * are the files ending in .jpg or .jpeg (any case) anywhere under a class folder, ordered as
 * torchvision's make_dataset orders them: by folder path, then by name, bytewise. Names
 * starting with '.' are skipped (torchvision would take .ipynb_checkpoints as a class). A root
 * that cannot be read or has no class folders, a class folder without images, a folder not in
 * classes.txt or class_root, nesting deeper than 16: GP_ERR_DATA naming the folder. */
gp_status gp_imagefolder_scan(const char *root, const char *classes_txt, const char *class_root,
                              gp_imagefolder *out);
void gp_imagefolder_free(gp_imagefolder *f);

/* Reads a whole file into *buf (grown as needed, *cap bytes; reusable across calls); *n gets
 * its size. A missing file is GP_ERR_DATA, a read failure GP_ERR_IO, a file larger than
 * GP_IMAGE_FILE_MAX GP_ERR_DATA; every message names the file. */
gp_status gp_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *n);

#endif
