#include "cli/interrupt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "core/io/target.h"

static volatile sig_atomic_t received;
static volatile sig_atomic_t graceful_mode;
static char at_once[160]; /* "PROG: SIGxxx: stopped at once\n", the SIGxxx patched in */

const char *gp_interrupt_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : "SIGINT";
}

/* Only async-signal-safe calls: write, unlink (in gp_io_temp_remove_all), _exit. */
static void on_signal(int sig) {
  if (graceful_mode && !received) {
    received = sig;
    return;
  }
  gp_io_temp_remove_all();
  const char *name = gp_interrupt_name(sig);
  char line[sizeof at_once + 8];
  size_t n = 0;
  for (const char *p = at_once; *p && n + 8 < sizeof line; p++) {
    if (*p != '%') {
      line[n++] = *p;
      continue;
    }
    for (const char *q = name; *q; q++)
      line[n++] = *q;
  }
  if (write(STDERR_FILENO, line, n) < 0) {
    /* nothing left to tell */
  }
  _exit(128 + sig);
}

void gp_interrupt_install(const char *prog, int graceful) {
  size_t len = strlen(prog);
  if (len > sizeof at_once - 48) len = sizeof at_once - 48;
  memcpy(at_once, prog, len);
  strcpy(at_once + len, ": % received: stopped at once\n");
  graceful_mode = graceful;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  const int sigs[] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    struct sigaction old;
    /* a signal the caller ignores (nohup, a background job of a script) stays ignored */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sigs[i], &sa, NULL);
  }
}

int gp_interrupted(void) {
  return received;
}

int gp_interrupt_exit_code(void) {
  return 128 + (received ? received : SIGINT);
}
