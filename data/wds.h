/* WebDataset shards: expanding a shard specification into paths, reading classes.txt, and
 * walking one shard (a tar, optionally gzipped) sample by sample. */
#ifndef GP_WDS_H
#define GP_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Expansion stops here: a pattern that names more shards is a mistake. */
#define GP_SHARDS_MAX 1000000
/* A sample's image is at most this large; a bigger member is refused as damaged. */
#define GP_WDS_MEMBER_MAX ((size_t)64 << 20)

/* spec is a comma-separated list (commas inside braces belong to the braces) of:
 *   - a path with brace patterns, expanded like braceexpand / bash: {000000..001281} is a
 *     decimal range (zero padding kept to the wider end; descending allowed), {a,b,c} the
 *     alternatives; several braces multiply, the leftmost varying slowest;
 *   - @FILE: FILE lists one shard per line (blank lines and lines starting with '#' are
 *     skipped; relative paths are relative to FILE's folder);
 *   - a directory: its *.tar and *.tar.gz files (not hidden), sorted bytewise (LC_ALL=C).
 * Paths are not checked for existence here (opening a shard reports it). More than
 * GP_SHARDS_MAX paths, an unbalanced or nested brace, an empty item, an unreadable list file
 * or a directory without shards: GP_ERR_DATA naming the item. *paths (malloc'ed strings in a
 * malloc'ed array) is released with gp_strings_free. */
gp_status gp_shards_expand(const char *spec, char ***paths, int *n);
void gp_strings_free(char **s, int n);

/* classes.txt: one class name per line, label = line number from 0; surrounding whitespace
 * (and a CR) is trimmed. A blank line or a repeated name is GP_ERR_DATA "FILE:LINE: ...". */
gp_status gp_classes_read(const char *path, char ***names, int *n);

typedef struct gp_wds gp_wds;

/* One sample, valid until the next gp_wds_next or gp_wds_close. */
typedef struct gp_wds_sample {
  const char *key;    /* member path up to the first '.' of its basename; NULL at the end */
  const uint8_t *jpg; /* bytes of KEY.jpg or KEY.jpeg (extension case ignored) */
  size_t jpg_n;
  int64_t label;           /* from KEY.cls: ASCII decimal, surrounding whitespace ignored */
  int64_t index;           /* sample number in the shard, from 0 */
  const char *where;       /* "SHARD: member KEY.jpg (file N)", for decode errors */
  const char *label_where; /* "SHARD: member KEY.cls (file N)" */
} gp_wds_sample;

gp_status gp_wds_open(const char *path, gp_wds **out);
void gp_wds_close(gp_wds *w);
/* The next sample: consecutive members sharing a key, WebDataset's rule (extension = what
 * follows the first '.' of the basename, lowercased; members without one, or whose basename
 * starts with '.', are skipped, as are extensions other than jpg, jpeg and cls). A sample
 * without its image or label, an image and a label twice, a label that is not a non-negative
 * decimal integer, or a member over GP_WDS_MEMBER_MAX is GP_ERR_DATA naming the shard, the
 * member and its number; tar-level damage is reported by gp_tar with the header offset. */
gp_status gp_wds_next(gp_wds *w, gp_wds_sample *s);
/* GP_ERR_DATA "SHARD: member KEY.cls (file N): label L outside 0..C-1" unless
 * 0 <= label < C. (N counts the shard's regular files from 0.) */
gp_status gp_wds_check_label(const gp_wds_sample *s, int64_t classes);

#endif
