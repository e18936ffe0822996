#include "cli/interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/io/target.h"

static volatile sig_atomic_t received;
static volatile sig_atomic_t graceful_mode;
static char at_once[2][160]; /* "PROG: SIGINT|SIGTERM received: stopped at once\n" */
static size_t at_once_len[2];

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
  const int i = sig == SIGTERM;
  if (write(STDERR_FILENO, at_once[i], at_once_len[i]) < 0) {
    /* nothing left to tell */
  }
  _exit(128 + sig);
}

void gp_interrupt_install(const char *prog, int graceful) {
  for (int i = 0; i < 2; i++) {
    int n = snprintf(at_once[i], sizeof at_once[i], "%.100s: %s received: stopped at once\n", prog,
                     i ? "SIGTERM" : "SIGINT");
    at_once_len[i] = (size_t)n;
  }
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
