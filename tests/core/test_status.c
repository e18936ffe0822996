/* The error record: a message quoting text from a user's file stays one printable line
 * (gp_text_one_line), whatever bytes that text holds, and is cut only between characters. */
#include <stdio.h>
#include <string.h>

#include "tests/support/check.h"

static int failures, passes;

static void shown(const char *in, size_t cap, const char *want) {
  char out[256];
  gp_text_one_line(out, cap, in);
  CHECK(strcmp(out, want) == 0, "'%s' shown as '%s', want '%s'", in, out, want);
  char again[256];
  gp_text_one_line(again, sizeof again, out);
  CHECK(strcmp(again, out) == 0, "escaping '%s' again gave '%s'", out, again);
}

static void test_escapes(void) {
  const size_t big = 256;
  shown("F32", big, "F32");
  shown("F32\n", big, "F32\\n");
  shown("a\tb\rc", big, "a\\tb\\rc");
  shown("\x1b[31mred", big, "\\x1b[31mred");
  shown("del\x7f", big, "del\\x7f");
  shown("\x01", big, "\\x01");
  /* C1 controls as characters (U+0085 is YAML's next line, U+009B a terminal's CSI) */
  shown("a\xc2\x85"
        "b",
        big, "a\\u0085b");
  shown("\xc2\x9b"
        "2J",
        big, "\\u009b2J");
  shown("\xc2\x80\xc2\x9f", big, "\\u0080\\u009f");
  /* the line and paragraph separators */
  shown("x\xe2\x80\xa8y\xe2\x80\xa9z", big, "x\\u2028y\\u2029z");
  /* bidirectional controls (a right-to-left override shows "abc" as "cba") */
  shown("a\xe2\x80\xaex\xe2\x81\xa6y\xe2\x80\x8fz\xd8\x9c.", big,
        "a\\u202ex\\u2066y\\u200fz\\u061c.");
  /* bytes that are not UTF-8: a lone CSI byte, a cut sequence, an overlong '/', a surrogate */
  shown("\x9b"
        "2J",
        big, "\\x9b2J");
  shown("\xe2\x80", big, "\\xe2\\x80");
  shown("\xc0\xaf", big, "\\xc0\\xaf");
  shown("\xed\xa0\x80", big, "\\xed\\xa0\\x80");
  shown("\xff", big, "\\xff");
  /* printable text is kept, UTF-8 included (a no-break space and U+00A9 are no controls) */
  shown("caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac \xc2\xa0\xc2\xa9 \xf0\x9f\x98\x80", big,
        "caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac \xc2\xa0\xc2\xa9 \xf0\x9f\x98\x80");
  shown("a\\nb 'q'", big, "a\\nb 'q'");
  shown("", big, "");
  /* cut before what does not fit: never half an escape or half a character */
  shown("ab\ncd", 6, "ab\\nc");
  shown("ab\ncd", 4, "ab");
  shown("ab\ncd", 5, "ab\\n");
  shown("a\xc3\xa9", 3, "a");
  shown("a\xc3\xa9", 4, "a\xc3\xa9");
  shown("\x1b", 4, "");
  shown("abc", 1, "");
  char out[4] = "xyz";
  gp_text_one_line(out, 0, "abc");
  CHECK(strcmp(out, "xyz") == 0, "cap 0 wrote '%s'", out);
}

/* No byte that breaks a line or moves a terminal: C0, DEL, C1, U+2028/9, non-UTF-8. */
static int printable_line(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) return 0;
    if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return 0;
    if (*p == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) return 0;
    if (*p >= 0x80 && *p < 0xc2) return 0; /* the only lead bytes these tests make are valid */
    if (*p >= 0xc2) p += *p >= 0xf0 ? 3 : *p >= 0xe0 ? 2 : 1;
  }
  return 1;
}

static void test_record(void) {
  /* the record escapes what a message quotes */
  gp_status s = GP_ERR(GP_ERR_DATA, "w.safetensors: tensor '%s': unknown dtype '%s'",
                       "a\xe2\x80\xa8", "F32\n");
  CHECK(s == GP_ERR_DATA, "code");
  CHECK(strcmp(gp_error_message(), "w.safetensors: tensor 'a\\u2028': unknown dtype 'F32\\n'") == 0,
        "message '%s'", gp_error_message());
  CHECK(strstr(gp_error_origin(), "test_status.c:") != NULL, "origin %s", gp_error_origin());
  /* a prefix too */
  gp_error_prefix(GP_ERR_DATA, "stage '%s': ", "s\x1b[2J");
  CHECK(strcmp(gp_error_message(),
               "stage 's\\x1b[2J': w.safetensors: tensor 'a\\u2028': unknown dtype 'F32\\n'") == 0,
        "prefixed '%s'", gp_error_message());
  /* a message longer than the record is cut between characters, and still one line */
  char many[3000];
  size_t k = 0;
  while (k + 2 < sizeof many) {
    memcpy(many + k, "\xc3\xa9", 2);
    k += 2;
  }
  many[k] = 0;
  GP_ERR(GP_ERR_SPEC, "%s", many); /* 1023 bytes of a record: the cut splits an e-acute */
  const char *m = gp_error_message();
  CHECK(strlen(m) > 900 && printable_line(m) && !strstr(m, "\\x"), "long message cut badly: %.40s",
        m + strlen(m) - 10);
  GP_ERR(GP_ERR_SPEC, "%s", "line\n");
  gp_error_prefix(GP_ERR_SPEC, "%s", many);
  m = gp_error_message();
  CHECK(strlen(m) > 900 && printable_line(m) && !strstr(m, "\\x"), "long prefix cut badly");
  /* many escapes: the record fills with whole escapes */
  char ctl[1500];
  memset(ctl, '\x1b', sizeof ctl - 1);
  ctl[sizeof ctl - 1] = 0;
  GP_ERR(GP_ERR_SPEC, "%s", ctl);
  m = gp_error_message();
  CHECK(strlen(m) > 1000 && strlen(m) % 4 == 0 && printable_line(m), "escapes cut: %zu bytes",
        strlen(m));
}

int main(void) {
  test_escapes();
  test_record();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
