/* SentencePiece piece lines to text: the decoding rule of spm_decode for piece input. */
#include "core/eval/spm_detok.h"

#include <string.h>

#define SPACE_SYMBOL "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */

gp_status gp_spm_decode_pieces(const char *pieces_line, char *out, size_t n) {
  if (!pieces_line || !out || !n) return GP_ERR(GP_ERR_USAGE, "spm decode: NULL or empty buffer");
  size_t len = strlen(pieces_line);
  if (len && pieces_line[len - 1] == '\n') len--;
  if (len && pieces_line[len - 1] == '\r') len--;
  size_t o = 0, need = 0;
  int bos = 1; /* nothing written yet: a piece's leading U+2581 is dropped */
  for (size_t i = 0; i < len;) {
    if (pieces_line[i] == ' ') { /* separators; empty pieces decode to nothing */
      i++;
      continue;
    }
    size_t end = i;
    while (end < len && pieces_line[end] != ' ')
      end++;
    if (bos && end - i >= 3 && !memcmp(pieces_line + i, SPACE_SYMBOL, 3)) i += 3;
    while (i < end) {
      char c = pieces_line[i];
      if (end - i >= 3 && !memcmp(pieces_line + i, SPACE_SYMBOL, 3)) {
        c = ' ';
        i += 3;
      } else {
        i++;
      }
      if (o + 1 < n) out[o++] = c;
      need++;
      bos = 0;
    }
  }
  out[o < n ? o : n - 1] = 0;
  if (need >= n)
    return GP_ERR(GP_ERR_USAGE, "spm decode: the text needs %zu bytes, the buffer has %zu",
                  need + 1, n);
  return GP_OK;
}
