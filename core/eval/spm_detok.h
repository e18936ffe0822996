/* SentencePiece piece lines back to text, for scoring a model's output with BLEU. */
#ifndef GP_SPM_DETOK_H
#define GP_SPM_DETOK_H

#include <stddef.h>

#include "core/status.h"

/* Decodes one line of space-separated pieces ("▁In ▁the ▁begin ning") as spm_decode
 * --input_format=piece does for a default model (add_dummy_prefix and
 * remove_extra_whitespaces on): the pieces are joined, each U+2581 becomes a space, and
 * while nothing has been written yet each piece loses one leading U+2581, so the text
 * starts without spaces ("In the beginning"). A trailing "\n" or "\r\n" ends the line.
 * Without the vocabulary it cannot tell control pieces (<s>, </s>, dropped by spm) or
 * pieces outside the vocabulary (passed through untouched by spm) from others; spm_encode
 * never writes such pieces. The text is never longer than the input, so n = strlen + 1
 * always suffices. Errors: GP_ERR_USAGE when out (n bytes) is too small (it then holds a
 * truncated prefix). */
gp_status gp_spm_decode_pieces(const char *pieces_line, char *out, size_t n);

#endif
