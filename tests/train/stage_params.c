#include "tests/train/stage_params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float *stage_params_gather(gp_trainer *t, int buffers, int64_t *n) {
  int k = gp_pipeline_stages(t->pl);
  *n = 0;
  for (int s = 0; s < k; s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    *n += buffers ? p->n_buffers : p->n_train;
  }
  float *out = malloc(sizeof(float) * (size_t)(*n + 1));
  if (!out) {
    printf("FAIL: out of memory gathering parameters\n");
    exit(1);
  }
  int64_t o = 0;
  for (int s = 0; s < k; s++) {
    gp_params *p = gp_pipeline_params(t->pl, s);
    int64_t c = buffers ? p->n_buffers : p->n_train;
    /* the stage's own memory may be a device's: copy through its backend */
    gp_backend *be = gp_pipeline_backend(t->pl, s);
    if (c && be->to_host(be, out + o, buffers ? p->buffers : p->train, sizeof(float) * (size_t)c) !=
                 GP_OK) {
      printf("FAIL: copying stage %d's parameters to the host: %s\n", s, gp_error_message());
      exit(1);
    }
    o += c;
  }
  return out;
}

double stage_params_rel_diff(const float *a, const float *b, int64_t n) {
  double d = 0, ref = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    ref = fmax(ref, fabs((double)b[i]));
  }
  return d / ref;
}
