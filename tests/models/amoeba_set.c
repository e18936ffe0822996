/* See amoeba_set.h. */
#include "tests/models/amoeba_set.h"

#include <stdio.h>

void amoeba_set_make(amoeba_set *s, int L, int D, int classes, int image) {
  static const char *const paths[AMOEBA_N_SET] = {
      "blocks.cell.params.D", "blocks.cell.params.classes", "layers.4.repeat",
      "layers.7.repeat",      "layers.10.repeat",           "inputs.image.1",
      "inputs.image.2",
  };
  /* the first normal cell of each group is its own entry: the repeats are N - 1 */
  int v[AMOEBA_N_SET] = {D, classes, L / 3 - 1, L / 3 - 1, L / 3 - 1, image, image};
  for (int i = 0; i < AMOEBA_N_SET; i++) {
    snprintf(s->val[i], sizeof s->val[i], "%d", v[i]);
    s->ov[i] = (gp_override){paths[i], s->val[i]};
  }
}

gp_model *amoeba_load(const char *file, int L, int D, int classes, int image) {
  amoeba_set s;
  amoeba_set_make(&s, L, D, classes, image);
  gp_model *m = NULL;
  if (gp_model_load(file, s.ov, AMOEBA_N_SET, &m) != GP_OK) {
    printf("FAIL: loading %s as (L %d, D %d, %d classes, %dx%d): %s\n", file, L, D, classes, image,
           image, gp_error_message());
    return NULL;
  }
  return m;
}
