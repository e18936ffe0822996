/* ImageNet sources: WebDataset shards (streamed) and ImageFolder trees (random access). */
#include "data/source.h"

gp_status gp_source_open_imagenet(const gp_data_spec *spec, gp_split split, uint64_t seed,
                                  gp_source **out) {
  (void)spec;
  (void)split;
  (void)seed;
  *out = NULL;
  return GP_ERR(GP_ERR_UNSUPPORTED, "dataset imagenet is not supported yet");
}
