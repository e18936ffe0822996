/* --checkpoint-dir, made and claimed before training: a folder that cannot be made or written
 * is found before the run (it was found at the first checkpoint, after training), and a second
 * run given the same folder is refused while the first holds it. */
#ifndef GP_CLI_CKPT_DIR_H
#define GP_CLI_CKPT_DIR_H

#include "core/status.h"

/* Makes dir if needed and holds an exclusive lock on dir/lock (flock, with this process's pid
 * written in it) until the process exits. Then removes the temporary checkpoints
 * (checkpoint.safetensors.tmp.PID) that runs killed while writing one left there (with the
 * lock held no other run writes one; where dir/checkpoint.safetensors is a link, also those
 * beside its target whose process has exited), and the shards of a sharded checkpoint that was
 * never committed (gp_ckpt_remove_stale). *stale: how many. *made: 1 when this call made dir. */
gp_status gp_ckpt_dir_claim(const char *dir, int *stale, int *made);
/* Undoes a claim that made dir, when the run stops before it starts (a later bad flag): the
 * lock file and the folder go, so the refused command leaves nothing behind. */
void gp_ckpt_dir_unmake(const char *dir);
/* A run that does not --resume would replace dir/checkpoint.safetensors at its first
 * checkpoint: a preempted run restarted without --resume lost everything. Refused
 * (GP_ERR_USAGE, naming the step it holds) unless overwrite (--overwrite) says so. */
gp_status gp_ckpt_dir_fresh(const char *dir, int overwrite);

#endif
