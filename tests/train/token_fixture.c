#include "tests/train/token_fixture.h"

#include <string.h>

#include "core/rng.h"

void token_fixture_batch(const gp_model *mo, int step, int64_t batch, int64_t len, int32_t vocab,
                         gp_batch_buffers *bufs) {
  gp_rng r;
  gp_rng_seed(&r, 500 + (uint64_t)step);
  int64_t real_len[64];
  for (int64_t b = 0; b < batch && b < 64; b++)
    real_len[b] = 1 + (int64_t)gp_rng_below(&r, (uint64_t)len);
  for (int i = 0; i < mo->n_inputs; i++) {
    int32_t *v = bufs->in[i];
    const char *name = mo->inputs[i].name;
    for (int64_t b = 0; b < batch && b < 64; b++) {
      int64_t L = strstr(name, "src") ? len + 1 - real_len[b] : real_len[b], half = (L + 1) / 2;
      for (int64_t j = 0; j < len; j++) {
        int real = j < L;
        int32_t *e = &v[b * len + j];
        if (strstr(name, "mask"))
          *e = real;
        else if (strstr(name, "seg"))
          *e = real ? (j < half ? 1 : 2) : 0;
        else if (strstr(name, "pos"))
          *e = real ? (int32_t)(j < half ? j : j - half) : 0;
        else if (i == mo->label_input)
          *e = real ? (int32_t)gp_rng_below(&r, (uint64_t)vocab) : -100;
        else
          *e = real ? 1 + (int32_t)gp_rng_below(&r, (uint64_t)vocab - 1) : 0;
      }
    }
  }
}
