/* The --set overrides that scale models/amoebanet-d.yaml to AmoebaNet-D(L, D) with a class
 * count and an image size, as docs/amoebanet-d.md tells users to write them. */
#ifndef GP_TESTS_AMOEBA_SET_H
#define GP_TESTS_AMOEBA_SET_H

#include "core/spec/spec.h"

#define AMOEBA_N_SET 7

typedef struct amoeba_set {
  char val[AMOEBA_N_SET][32];
  gp_override ov[AMOEBA_N_SET];
} amoeba_set;

/* Fills s->ov for L (a multiple of 3, at least 6), D, classes and image x image inputs. */
void amoeba_set_make(amoeba_set *s, int L, int D, int classes, int image);

/* Loads the model file with those overrides; NULL (after printing why) on failure. */
gp_model *amoeba_load(const char *file, int L, int D, int classes, int image);

#endif
