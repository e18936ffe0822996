/* SentencePiece piece lines decoded as spm_decode --input_format=piece decodes them
 * (tests/fixtures/bleu/spm_decode.json, written by scripts/make_bleu_fixtures.py with a model
 * trained there), and the buffer contract. */
#include <stdlib.h>
#include <string.h>

#include "core/eval/spm_detok.h"
#include "tests/support/check.h"
#include "tests/eval/fixture.h"

static int failures, passes;

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/fixtures/bleu";
  char out[4096];
  CHECK(gp_spm_decode_pieces("\xe2\x96\x81In \xe2\x96\x81the \xe2\x96\x81"
                             "begin ning\n",
                             out, sizeof out) == GP_OK &&
            !strcmp(out, "In the beginning"),
        "the example: '%s'", out);
  gp_json *j = fx_load(dir, "spm_decode.json");
  const gp_json *pairs = j ? fx_array(j, "pairs", "spm_decode.json") : NULL;
  CHECK(pairs && pairs->n >= 60, "fixture");
  for (int64_t i = 0; pairs && i < pairs->n; i++) {
    const gp_json *p = &pairs->items[i];
    if (p->n != 2) continue;
    gp_status s = gp_spm_decode_pieces(p->items[0].str, out, sizeof out);
    CHECK(s == GP_OK && !strcmp(out, p->items[1].str), "line %lld '%s': '%s', spm_decode '%s'",
          (long long)i, p->items[0].str, out, p->items[1].str);
    /* strlen + 1 always suffices; one byte less than the text needs is refused */
    size_t len = strlen(p->items[0].str), need = strlen(p->items[1].str) + 1;
    char *exact = malloc(len + 1);
    CHECK(gp_spm_decode_pieces(p->items[0].str, exact, len + 1) == GP_OK, "strlen + 1");
    if (need > 1)
      CHECK(gp_spm_decode_pieces(p->items[0].str, exact, need - 1) == GP_ERR_USAGE &&
                strlen(exact) == need - 2,
            "line %lld: a short buffer is refused and truncated", (long long)i);
    free(exact);
  }
  gp_json_free(j);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
