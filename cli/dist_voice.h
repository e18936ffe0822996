/* What gpipe-train and gpipe-bench share across processes (mpirun, srun): one voice (rank 0
 * prints; the others only their errors, on the stderr kept for them, naming rank and host), a
 * setup's outcome agreed by every process and reported once, and each stage's statistics
 * gathered from the process that holds it. W = 1 passes through all of it untouched. */
#ifndef GP_CLI_DIST_VOICE_H
#define GP_CLI_DIST_VOICE_H

#include "core/dist/dist.h"
#include "core/exec/pipeline.h"
#include "core/exec/stats.h"

/* Starts the processes' runtime (gp_dist_init), sends the output of ranks but 0 to /dev/null
 * (errors keep a stderr of their own: gp_cli_dist_speak) and starts the liveness check with
 * timeout liveness_s, whose lines name prog. */
gp_status gp_cli_dist_start(gp_dist *d, const char *prog, double liveness_s);
/* Gives this process its stderr back (before an error line). */
void gp_cli_dist_speak(void);
/* The outcome of a step every process took (a setup): GP_OK when all succeeded; else this
 * process's error when it is the lowest rank that failed (it reports), or a code-only status
 * with *reported_elsewhere set. W = 1: s. */
gp_status gp_cli_dist_agree(gp_dist *d, gp_status s, int *reported_elsewhere);
/* After a setup that failed (gp_cli_dist_agree): the reporting process says why in one line,
 * then every process waits for the others before it exits. The first to exit makes the
 * launcher send SIGTERM to the rest; none may still be running then without its signal
 * handler made quiet, or that SIGTERM would add a second line. */
void gp_cli_dist_setup_failed(gp_dist *d, const char *prog, int reported_elsewhere);
/* Every stage's statistics of pl, each from the process that holds it (the others have zeros),
 * or the slowest replica's: the maximum over the processes. */
gp_status gp_cli_dist_stats(gp_dist *d, const gp_pipeline *pl, gp_stage_stats *all);
/* An error under several processes: its line (unless another process already said why the run
 * ends), "PROG: rank 1 (host): message[hint]", then every process ended with its exit code.
 * Returns that code (in one process only). */
int gp_cli_dist_fail(gp_dist *d, const char *prog, gp_status s, const char *hint);

#endif
