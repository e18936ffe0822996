/* SIGINT and SIGTERM. A program that can stop cleanly (gpipe-train after a step, gpipe-bench
 * after a run) installs the graceful handler: the first signal is recorded and the program
 * asks gp_interrupted() at its safe points; a second signal, or the first one when not
 * graceful, removes the temporary files being written (core/io/target.h) and ends the process
 * at once with exit code 128 + the signal. */
#ifndef GP_CLI_INTERRUPT_H
#define GP_CLI_INTERRUPT_H

/* prog names the program in the line printed when a signal ends it at once. A signal that is
 * ignored when the program starts (nohup) stays ignored. */
void gp_interrupt_install(const char *prog, int graceful);
/* The signal received (SIGINT or SIGTERM), 0 if none. */
int gp_interrupted(void);
/* "SIGINT" or "SIGTERM". */
const char *gp_interrupt_name(int sig);
/* The exit code of a run stopped by the recorded signal: 128 + the signal. */
int gp_interrupt_exit_code(void);

#endif
