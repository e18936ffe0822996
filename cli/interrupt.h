/* SIGINT, SIGTERM and SIGUSR1 (what mpirun forwards to every rank, and srun --signal sends
 * ahead of a job's end). A program that can stop cleanly (gpipe-train after a step) installs the
 * graceful handler: the first signal is recorded, a line says what will happen, and the
 * program asks gp_interrupted() at its safe points; a second signal, or the first one when not
 * graceful, removes the temporary files being written (core/io/target.h) and ends the process
 * at once with exit code 128 + the signal. */
#ifndef GP_CLI_INTERRUPT_H
#define GP_CLI_INTERRUPT_H

#include "core/status.h"

/* prog names the program in the lines printed on a signal. graceful: what the first signal
 * does ("stopping after this step"), NULL for stopping at once. A signal that is ignored when
 * the program starts (nohup) stays ignored. */
void gp_interrupt_install(const char *prog, const char *graceful);
/* The signal received (SIGINT, SIGTERM or SIGUSR1), 0 if none. */
int gp_interrupted(void);
/* GP_OK, or GP_ERR_INTERRUPTED ("SIGINT received") once a signal was recorded: for loops
 * whose work may be dropped (an evaluation) to stop within one batch. */
gp_status gp_interrupt_check(void);
/* "SIGINT", "SIGTERM" or "SIGUSR1". */
const char *gp_interrupt_name(int sig);
/* No more lines on a signal: another process reported why the run ends (the launcher's
 * SIGTERM follows). */
void gp_interrupt_quiet(void);
/* The exit code of a run stopped by the recorded signal: 128 + the signal. */
int gp_interrupt_exit_code(void);

#endif
