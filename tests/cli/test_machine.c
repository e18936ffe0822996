/* gp_cpu_ticks, the steal gpipe-bench reports, on /proc/stat texts: the CPUs of the set alone,
 * the all-CPU total line skipped even where its first number could be a CPU's, lines of other
 * counters and CPUs without a steal field ignored; and the live /proc/stat, where it exists. */
#include <stdio.h>
#include <string.h>

#include "cli/machine.h"
#include "tests/support/check.h"

static int failures, passes;

static int ticks_of(const char *text, const int *ids, int n, unsigned long long *busy,
                    unsigned long long *steal) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; i++)
    CPU_SET(ids[i], &set);
  FILE *f = fmemopen((void *)text, strlen(text), "r");
  CHECK(f != NULL, "fmemopen");
  if (!f) return 0;
  int ok = gp_cpu_ticks(f, &set, busy, steal);
  fclose(f);
  return ok;
}

int main(void) {
  /* user nice system idle iowait irq softirq steal guest guest_nice */
  const char *stat = "cpu  1 2 3 4 5 6 7 8 0 0\n"
                     "cpu0 100 1 10 500 5 2 3 7 0 0\n"
                     "cpu1 200 0 20 400 0 1 1 30 0 0\n"
                     "cpu2 300 0 30 300 0 0 0 0 0 0\n"
                     "cpu3 50 5 5 900 9 0 0 1000 0 0\n"
                     "intr 1 2 3 4\n"
                     "ctxt 12345\n"
                     "cpu4 7 7 7 7 7 7 7\n"; /* no steal field: not read */
  unsigned long long busy, steal;
  CHECK(ticks_of(stat, (int[]){1, 3}, 2, &busy, &steal) == 1 && busy == 222 + 60 && steal == 1030,
        "cpus 1, 3: busy %llu steal %llu", busy, steal);
  CHECK(ticks_of(stat, (int[]){0}, 1, &busy, &steal) == 1 && busy == 116 && steal == 7,
        "cpu 0 (and not the total line, whose first number is 1): busy %llu steal %llu", busy,
        steal);
  CHECK(ticks_of(stat, (int[]){4, 9}, 2, &busy, &steal) == 0 && busy == 0 && steal == 0,
        "no readable CPU of the set");
  CHECK(ticks_of("", (int[]){0}, 1, &busy, &steal) == 0, "empty file");
  FILE *live = fopen("/proc/stat", "r");
  if (live) {
    fclose(live);
    CHECK(gp_cpu_ticks_now(&busy, &steal) == 1 && busy > 0, "/proc/stat: busy %llu", busy);
  }
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
