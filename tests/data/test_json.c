/* The strict JSON reader: what RFC 8259 allows is read exactly, everything else is refused
 * with GP_ERR_DATA naming the input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/json.h"
#include "tests/support/check.h"

static int failures, passes;

static gp_json *parse(const char *text) {
  gp_json *j = NULL;
  gp_error_clear();
  gp_status st = gp_json_parse(text, strlen(text), "in.json", &j);
  CHECK(st == GP_OK, "parse %s", text);
  return j;
}

static void refuse(const char *text, const char *want) {
  gp_json *j = (gp_json *)1;
  gp_error_clear();
  gp_status st = gp_json_parse(text, strlen(text), "in.json", &j);
  CHECK(st == GP_ERR_DATA, "accepted '%s'", text);
  CHECK(j == NULL, "output set for '%s'", text);
  CHECK(strstr(gp_error_message(), "in.json: JSON at byte") != NULL, "message for '%s'", text);
  if (want) CHECK(strstr(gp_error_message(), want) != NULL, "'%s': want '%s'", text, want);
  if (st == GP_OK) gp_json_free(j);
}

int main(void) {
  gp_json *j = parse(" {\"a\": [1, -2, 3.5e2, true, false, null, \"x\"], \"b\": {}} \n");
  if (j) {
    CHECK(j->type == GP_JSON_OBJECT && j->n == 2, "object");
    const gp_json *a = gp_json_get(j, "a");
    CHECK(a && a->type == GP_JSON_ARRAY && a->n == 7, "array");
    if (a && a->n == 7) {
      CHECK(a->items[0].is_uint && a->items[0].u == 1 && a->items[0].is_int, "1");
      CHECK(a->items[1].is_int && a->items[1].i == -2 && !a->items[1].is_uint, "-2");
      CHECK(!a->items[2].is_int && a->items[2].number == 350.0, "3.5e2");
      CHECK(a->items[3].type == GP_JSON_BOOL && a->items[3].boolean == 1, "true");
      CHECK(a->items[4].type == GP_JSON_BOOL && a->items[4].boolean == 0, "false");
      CHECK(a->items[5].type == GP_JSON_NULL, "null");
      CHECK(a->items[6].type == GP_JSON_STRING && strcmp(a->items[6].str, "x") == 0, "x");
    }
    const gp_json *b = gp_json_get(j, "b");
    CHECK(b && b->type == GP_JSON_OBJECT && b->n == 0, "empty object");
    CHECK(gp_json_get(j, "c") == NULL, "absent key");
    CHECK(strcmp(j->keys[0], "a") == 0 && strcmp(j->keys[1], "b") == 0, "key order");
    gp_json_free(j);
  }
  j = parse("\"q\\\" s\\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\u20AC \\ud83d\\ude00 \xe2\x82\xac\"");
  if (j) {
    const char *want = "q\" s\\ / \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x82\xac";
    CHECK(strcmp(j->str, want) == 0 && j->str_len == strlen(want), "escapes: %s", j->str);
    gp_json_free(j);
  }
  j = parse("[18446744073709551615, 9223372036854775807, -9223372036854775808, "
            "18446744073709551616, 0, -0, 1E+2, 0.5]");
  if (j && j->n == 8) {
    CHECK(j->items[0].is_uint && j->items[0].u == UINT64_MAX && !j->items[0].is_int, "u64 max");
    CHECK(j->items[1].is_int && j->items[1].i == INT64_MAX, "i64 max");
    CHECK(j->items[2].is_int && j->items[2].i == INT64_MIN, "i64 min");
    CHECK(!j->items[3].is_uint && !j->items[3].is_int && j->items[3].number > 1.8e19, "2^64");
    CHECK(j->items[4].is_uint && j->items[4].u == 0, "0");
    CHECK(j->items[5].is_int && j->items[5].i == 0 && !j->items[5].is_uint, "-0");
    CHECK(!j->items[6].is_int && j->items[6].number == 100.0, "1E+2");
    CHECK(j->items[7].number == 0.5, "0.5");
  }
  gp_json_free(j);
  j = parse("[]");
  CHECK(j && j->type == GP_JSON_ARRAY && j->n == 0, "empty array");
  gp_json_free(j);
  j = parse("[[[[1]]]]");
  CHECK(j && j->items[0].items[0].items[0].items[0].u == 1, "nested");
  gp_json_free(j);
  /* Long arrays grow past the first allocation. */
  char big[4000];
  size_t k = 0;
  big[k++] = '[';
  for (int i = 0; i < 500; i++)
    k += (size_t)snprintf(big + k, sizeof big - k, i ? ",%d" : "%d", i);
  big[k++] = ']';
  big[k] = 0;
  j = parse(big);
  CHECK(j && j->n == 500 && j->items[499].u == 499, "500 items");
  gp_json_free(j);

  refuse("", "end of text");
  refuse("   ", "end of text");
  refuse("[1,]", NULL);
  refuse("{\"a\":1,}", "string key");
  refuse("{\"a\" 1}", "':'");
  refuse("{a:1}", "string key");
  refuse("[1 2]", "',' or ']'");
  refuse("{\"a\":1 \"b\":2}", "',' or '}'");
  refuse("{\"a\":1,\"a\":2}", "duplicate key 'a'");
  /* large objects (a sharded checkpoint's weight_map) check by a table: every key of 5000
   * distinct is taken, a repeat of any one is found */
  static char wide[5000 * 16 + 64];
  for (int dup = -1; dup < 5000; dup += 1667) {
    size_t n = 0;
    wide[n++] = '{';
    for (int k = 0; k < 5000; k++)
      n += (size_t)sprintf(wide + n, "%s\"k%d\":%d", k ? "," : "", k, k);
    if (dup >= 0) n += (size_t)sprintf(wide + n, ",\"k%d\":0", dup);
    wide[n++] = '}';
    wide[n] = 0;
    char want[32];
    snprintf(want, sizeof want, "duplicate key 'k%d'", dup);
    if (dup >= 0) {
      refuse(wide, want);
    } else {
      gp_json *o = parse(wide);
      CHECK(o && o->n == 5000 && gp_json_get(o, "k4999")->i == 4999, "5000 keys");
      gp_json_free(o);
    }
  }
  refuse("01", "leading zero");
  refuse("-", "invalid number");
  refuse("1.", "invalid number");
  refuse(".5", "unexpected character");
  refuse("1e", "invalid number");
  refuse("+1", "unexpected character");
  refuse("NaN", "unexpected character");
  refuse("tru", "unexpected character");
  refuse("nul", "unexpected character");
  refuse("[1] [2]", "after the value");
  refuse("// c\n1", "unexpected character");
  refuse("\"abc", "unterminated");
  refuse("\"a\\\"", "unterminated");
  refuse("\"\\x\"", "invalid escape");
  refuse("\"\\u12\"", "\\u escape");
  refuse("\"\\u12g4\"", "\\u escape");
  refuse("\"\\ud83d\"", "surrogate");
  refuse("\"\\ude00\"", "surrogate");
  refuse("\"\\ud83d\\u0041\"", "surrogate");
  refuse("\"\\u0000\"", "\\u0000");
  refuse("\"a\tb\"", "control character");
  refuse("\"\xc3\"", "UTF-8");
  refuse("\"\xc0\xaf\"", "UTF-8");         /* overlong */
  refuse("\"\xed\xa0\x80\"", "UTF-8");     /* encoded surrogate */
  refuse("\"\xf4\x90\x80\x80\"", "UTF-8"); /* above U+10FFFF */
  refuse("\"\xe2\x82\"", "UTF-8");         /* cut short */
  char deep[600];
  memset(deep, '[', 300);
  memset(deep + 300, ']', 300);
  deep[600 - 1] = 0;
  refuse(deep, "nested too deeply");
  /* Text with an embedded NUL is refused where it is, not cut short. */
  gp_json *z = (gp_json *)1;
  CHECK(gp_json_parse("[1]\0", 4, "in.json", &z) == GP_ERR_DATA && z == NULL, "embedded NUL");

  /* The writer: what it writes is JSON the strict reader takes back, whatever the bytes (a
   * file name that is not UTF-8 was written as is, and no JSON reader took it). */
  static const struct {
    const char *in, *back;
  } wr[] = {
      {"plain", "plain"},
      {"q\" b\\ \t\n\x01\x1f \x7f", "q\" b\\ \t\n\x01\x1f \x7f"},
      {"\xc3\xa9 \xe2\x80\xa8 \xef\xbf\xbe \xf0\x9f\x98\x80",
       "\xc3\xa9 \xe2\x80\xa8 \xef\xbf\xbe \xf0\x9f\x98\x80"},
      {"bad\xff.yaml", "bad\xef\xbf\xbd.yaml"},                 /* Latin-1 */
      {"\xc3", "\xef\xbf\xbd"},                                 /* cut short at the end */
      {"\xe2\x82x", "\xef\xbf\xbd\xef\xbf\xbdx"},               /* cut short */
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong */
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
      {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
  };
  for (size_t i = 0; i < sizeof wr / sizeof wr[0]; i++) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL, "open_memstream");
    if (!f) break;
    gp_json_write_str(f, wr[i].in);
    fclose(f);
    gp_json *w = NULL;
    gp_error_clear();
    CHECK(gp_json_parse(text, len, "written", &w) == GP_OK, "written %zu: %s", i, text);
    if (w)
      CHECK(w->type == GP_JSON_STRING && strcmp(w->str, wr[i].back) == 0, "written %zu: %s", i,
            text);
    gp_json_free(w);
    free(text);
  }

  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
