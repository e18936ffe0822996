#include "cli/interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/io/target.h"

static volatile sig_atomic_t received;
static volatile sig_atomic_t graceful_mode;
static volatile sig_atomic_t quiet; /* another process reported the run's end: no line here */
static char at_once[3][160];        /* "PROG: SIGINT|SIGTERM received: stopped at once\n" */
static size_t at_once_len[3];
static char notice[3][320]; /* graceful: "PROG: SIGINT received: stopping after ...\n" */
static size_t notice_len[3];

const char *gp_interrupt_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGINT";
}

void gp_interrupt_quiet(void) {
  quiet = 1;
}

/* Only async-signal-safe calls: write, unlink (in gp_io_temp_remove_all), _exit. */
static void on_signal(int sig) {
  const int i = sig == SIGTERM ? 1 : sig == SIGUSR1 ? 2 : 0;
  if (graceful_mode && !received) {
    received = sig;
    if (!quiet && write(STDERR_FILENO, notice[i], notice_len[i]) < 0) {
      /* the stop goes on without the line */
    }
    return;
  }
  gp_io_temp_remove_all();
  if (!quiet && write(STDERR_FILENO, at_once[i], at_once_len[i]) < 0) {
    /* nothing left to tell */
  }
  _exit(128 + sig);
}

void gp_interrupt_install(const char *prog, const char *graceful) {
  /* on a terminal the line replaces the live progress line, which is redrawn below it */
  const char *erase = isatty(STDERR_FILENO) ? "\r\033[K" : "";
  for (int i = 0; i < 3; i++) {
    const char *sig = i == 2 ? "SIGUSR1" : i ? "SIGTERM" : "SIGINT";
    int n = snprintf(at_once[i], sizeof at_once[i], "%s%.100s: %s received: stopped at once\n",
                     erase, prog, sig);
    at_once_len[i] = (size_t)n;
    n = snprintf(notice[i], sizeof notice[i],
                 "%s%.100s: %s received: %.120s; a second signal stops at once\n", erase, prog, sig,
                 graceful ? graceful : "");
    notice_len[i] = n < (int)sizeof notice[i] ? (size_t)n : sizeof notice[i] - 1;
  }
  graceful_mode = graceful != NULL;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  /* SIGUSR1: what mpirun forwards to every rank and srun --signal sends ahead of a job's end
   * (Open MPI follows its SIGTERM with SIGKILL a second later: too soon to finish a step) */
  const int sigs[] = {SIGINT, SIGTERM, SIGUSR1};
  for (int i = 0; i < 3; i++) {
    struct sigaction old;
    /* a signal the caller ignores (nohup, a background job of a script) stays ignored */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sigs[i], &sa, NULL);
  }
}

gp_status gp_interrupt_check(void) {
  if (!received) return GP_OK;
  return GP_ERR(GP_ERR_INTERRUPTED, "%s received", gp_interrupt_name(received));
}

int gp_interrupted(void) {
  return received;
}

int gp_interrupt_exit_code(void) {
  return 128 + (received ? received : SIGINT);
}
