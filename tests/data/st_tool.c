/* Writes a known safetensors file for st_check.py, which reads it back with Python's json and
 * struct the way the reference reader does. Usage: st_tool OUT.safetensors */
#include <stdio.h>

#include "core/io/safetensors.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: st_tool OUT.safetensors\n");
    return 2;
  }
  float w[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 65504.0f};
  float b[2] = {1.5f, -2.5f};
  int64_t step = 1234567890123LL;
  int32_t ids[3] = {-7, 0, 2147483647};
  uint16_t half[2] = {0x3c00, 0xc000};
  uint8_t bytes[4] = {0, 1, 254, 255};
  gp_shape s23 = gp_shape_of(2, (int64_t[]){2, 3}), s2 = gp_shape_of(1, (int64_t[]){2}),
           s0 = gp_shape_of(0, NULL), s3 = gp_shape_of(1, (int64_t[]){3}),
           s22 = gp_shape_of(2, (int64_t[]){2, 2}), e04 = gp_shape_of(2, (int64_t[]){0, 4});
  gp_st_writer *wr = gp_st_writer_new();
  gp_status st = wr ? GP_OK : GP_ERR_NOMEM;
  /* An odd-sized tensor first, so that later ones are not aligned: the reader must cope. */
  if (st == GP_OK) st = gp_st_add(wr, "bytes", GP_U8, &s22, bytes);
  if (st == GP_OK) st = gp_st_add(wr, "conv.weight", GP_F32, &s23, w);
  if (st == GP_OK) st = gp_st_add(wr, "conv.bias", GP_F32, &s2, b);
  if (st == GP_OK) st = gp_st_add(wr, "half", GP_F16, &s2, half);
  if (st == GP_OK) st = gp_st_add(wr, "step", GP_I64, &s0, &step);
  if (st == GP_OK) st = gp_st_add(wr, "ids", GP_I32, &s3, ids);
  if (st == GP_OK) st = gp_st_add(wr, "empty", GP_F32, &e04, NULL);
  if (st == GP_OK) st = gp_st_add(wr, "name \"with\" \\ escapes \xc3\xa9", GP_U8, &s0, bytes);
  if (st == GP_OK) st = gp_st_meta_set(wr, "format", "pt");
  if (st == GP_OK) st = gp_st_meta_set(wr, "note", "quote \" and \xc3\xa9\n");
  if (st == GP_OK) st = gp_st_write(wr, argv[1]);
  gp_st_writer_free(wr);
  if (st != GP_OK) {
    fprintf(stderr, "st_tool: %s\n", gp_error_message());
    return 1;
  }
  return 0;
}
