/* gp_args_parse on the edge cases of a command line: a flag given twice, a forgotten value
 * followed by the next flag, "--" ending the flags, "--name=value" against "--name value",
 * numbers that strtoll alone would take. Each mistake is GP_ERR_USAGE naming the flag. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "tests/support/check.h"

static int failures, passes;

enum { F_STEPS, F_LOG, F_SET, F_QUIET, F_O, F_COUNT };

static gp_flag table[F_COUNT + 1];

static void reset(void) {
  gp_args_free(table);
  memset(table, 0, sizeof table);
  table[F_STEPS] = (gp_flag){"--steps", GP_FLAG_INT, "N", "", 1};
  table[F_LOG] = (gp_flag){"--log", GP_FLAG_STR, "FILE", "", 0};
  table[F_SET] = (gp_flag){"--set", GP_FLAG_LIST, "K=V", "", 0};
  table[F_QUIET] = (gp_flag){"--quiet", GP_FLAG_BOOL, NULL, "", 0};
  table[F_O] = (gp_flag){"-o", GP_FLAG_STR, "FILE", "", 0};
}

/* Parses the words after argv[0]; *npos and pos get the positionals (at most 2). */
static gp_status parse(const char *const *words, int n, const char **pos, int *npos) {
  char *argv[16] = {"prog"};
  for (int i = 0; i < n; i++)
    argv[i + 1] = (char *)words[i];
  reset();
  gp_error_clear();
  return gp_args_parse(n + 1, argv, table, pos, 2, npos);
}

#define WORDS(...)                                                                                 \
  (const char *const[]){__VA_ARGS__},                                                              \
      (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))

static void refused(const char *const *words, int n, const char *want) {
  const char *pos[2];
  int npos;
  gp_status s = parse(words, n, pos, &npos);
  CHECK(s == GP_ERR_USAGE, "accepted %s ...", words[0]);
  CHECK(strstr(gp_error_message(), want) != NULL, "%s ...: want '%s', got '%s'", words[0], want,
        gp_error_message());
}

int main(void) {
  const char *pos[2];
  int npos;

  /* both spellings of a value */
  CHECK(parse(WORDS("--steps", "3", "--log=a.jsonl", "m.yaml"), pos, &npos) == GP_OK &&
            table[F_STEPS].i == 3 && strcmp(table[F_LOG].s, "a.jsonl") == 0 && npos == 1 &&
            strcmp(pos[0], "m.yaml") == 0,
        "--steps 3 --log=a.jsonl m.yaml");

  /* a value flag given twice: the first value was never checked ("--data real --data
   * synthetic") and the later silently won */
  refused(WORDS("--steps", "2", "--steps", "3"), "--steps is given twice ('2', then '3')");
  refused(WORDS("--log=a", "--log", "b"), "--log is given twice");
  /* a list flag repeats, and a switch twice is once */
  CHECK(parse(WORDS("--set", "a=1", "--set=b=2", "--quiet", "--quiet"), pos, &npos) == GP_OK &&
            table[F_SET].n_list == 2 && strcmp(table[F_SET].list[1], "b=2") == 0 &&
            table[F_QUIET].given,
        "--set twice, --quiet twice");

  /* a forgotten value: the next flag is not the file name ("--log --quiet" wrote a log named
   * --quiet and was not quiet) */
  refused(WORDS("--log", "--quiet"), "--log needs a value (FILE), got the flag '--quiet'");
  refused(WORDS("--log", "--nonsense"), "got the flag '--nonsense'");
  refused(WORDS("--log", "-o"), "got the flag '-o'");
  refused(WORDS("-o", "--set=a=1"), "got the flag '--set=a=1'");
  /* ... but said with '=' it is the value, and a negative number or "-" is a value */
  CHECK(parse(WORDS("--log=--quiet", "-o", "-"), pos, &npos) == GP_OK &&
            strcmp(table[F_LOG].s, "--quiet") == 0 && !table[F_QUIET].given &&
            strcmp(table[F_O].s, "-") == 0,
        "--log=--quiet -o -");
  refused(WORDS("--steps", "-2"), "--steps: expected an integer >= 1, got '-2'");

  /* "--" ends the flags: a model file named like a flag */
  CHECK(parse(WORDS("--steps", "1", "--", "-m.yaml"), pos, &npos) == GP_OK && npos == 1 &&
            strcmp(pos[0], "-m.yaml") == 0 && table[F_STEPS].i == 1,
        "-- -m.yaml: %d positionals", npos);
  CHECK(parse(WORDS("--", "--quiet", "--"), pos, &npos) == GP_OK && npos == 2 &&
            strcmp(pos[0], "--quiet") == 0 && strcmp(pos[1], "--") == 0 && !table[F_QUIET].given,
        "-- --quiet --");

  /* numbers as a single integer flag takes them: digits, '-' at most */
  refused(WORDS("--steps", "+2"), "expected an integer");
  refused(WORDS("--steps", " 2"), "expected an integer");
  refused(WORDS("--steps", "2 "), "expected an integer");
  refused(WORDS("--steps", "0x10"), "expected an integer");
  refused(WORDS("--steps", "1e3"), "expected an integer");
  refused(WORDS("--steps="), "expected an integer");
  refused(WORDS("--steps", "99999999999999999999"), "--steps: at most 2147483647");
  refused(WORDS("--log", ""), "--log: empty value");
  refused(WORDS("--quiet=1"), "--quiet takes no value");
  refused(WORDS("--steps"), "--steps needs a value (N)");
  refused(WORDS("--stpes", "1"), "unknown flag '--stpes'; did you mean '--steps'?");
  refused(WORDS("a.yaml", "b.yaml", "c.yaml"), "unexpected argument 'c.yaml'");

  /* another trainer's flag for what the model file sets: the --set that does it, with the
   * value when there is one, not the nearest flag's name ("--lr": "--log") */
  refused(WORDS("--lr", "0.1"), "unknown flag '--lr'; the model file sets it: "
                                "--set train.optimizer.lr=0.1");
  refused(WORDS("--learning_rate=3e-4"), "--set train.optimizer.lr=3e-4");
  refused(WORDS("--Weight-Decay"), "--set train.optimizer.weight_decay=VALUE");
  refused(WORDS("--lr", "--steps", "2"), "--set train.optimizer.lr=VALUE");
  refused(WORDS("--data-dir", "a b"), "--set data.path=VALUE");
  /* ... only where --set exists */
  table[F_SET].name = NULL;
  {
    char *argv[] = {"prog", "--lr", "1"};
    gp_error_clear();
    CHECK(gp_args_parse(3, argv, table, pos, 2, &npos) == GP_ERR_USAGE &&
              strstr(gp_error_message(), "did you mean '--log'?"),
          "--lr without --set: %s", gp_error_message());
  }

  gp_args_free(table);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
