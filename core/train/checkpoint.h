/* Checkpoints of any size, written by the processes that hold the stages: each process of
 * replica 0 writes its stages' weights and optimizer state as shards of its own (a part), and
 * once every part is written (the caller's barrier) position 0 commits them with one rename of
 * DIR/checkpoint.safetensors.index.json. One process whose checkpoint fits the shard size
 * writes DIR/checkpoint.safetensors as before. Tensors are named by layer path
 * ("<layer>.<param>", "optim.<slot>.<layer>.<param>"), so a checkpoint written at one layout
 * loads at any other. gp_trainer_save_checkpoint and gp_trainer_load_checkpoint
 * (core/train/trainer.h) are the one-process entry points. */
#ifndef GP_CHECKPOINT_H
#define GP_CHECKPOINT_H

#include "core/dist/layout.h"
#include "core/train/trainer.h"

/* Replica 0's process at lay->pos writes stages [lay->first[pos], lay->first[pos + 1]) (all of
 * them held by this process) into DIR/checkpoint-sSTEP-pPOS-0000k-of-0000N.safetensors and
 * their list into DIR/checkpoint-sSTEP-pPOS.index.json, every file fsynced, each shard at most
 * shard_bytes (0: t->shard_bytes, whose 0 is 4 GiB); nothing is committed. Other replicas write
 * nothing. */
gp_status gp_ckpt_write_part(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos,
                             const gp_layout *lay, int64_t shard_bytes);
/* On position 0 of replica 0 (elsewhere nothing), after every part of this step is written:
 * checks that the parts hold every tensor of every stage (names from the model and the layout),
 * writes the index with the step, data position and run in its metadata, renames it into place
 * (the commit), then removes the checkpoint it replaces and what killed writes left. */
gp_status gp_ckpt_commit(gp_trainer *t, const char *dir, const gp_ckpt_pos *pos,
                         const gp_layout *lay);

/* --save across processes, as the checkpoint's parts and commit: replica 0's process at
 * lay->pos writes its stages' weights beside path (X.safetensors) as
 * X-pPOS-0000k-of-0000N.safetensors (shard_bytes each at most; 0: t->shard_bytes) and a part
 * list X-pPOS.index.json, fsynced; other replicas write nothing. Then, after every part (the
 * caller's barrier), position 0 of replica 0 commits X.safetensors.index.json by one rename and
 * removes the set it replaces (one file X.safetensors, or the shards of an earlier index) and
 * the part lists. */
gp_status gp_weights_write_part(gp_trainer *t, const char *path, const gp_layout *lay,
                                int64_t shard_bytes);
gp_status gp_weights_commit(gp_trainer *t, const char *path, const gp_layout *lay);

/* The split the checkpoint in dir was trained on (its "gpipe.balance": units per stage) into
 * balance, at most max entries, *n of them, and its schedule and re-materialization (indices of
 * gp_schedule_names and gp_remat_names; -1 where not recorded); *n = 0 for a checkpoint written
 * before the split was recorded. --resume runs on them, so a resumed run is bit for bit the run
 * it continues (schedule auto's choice included). */
gp_status gp_ckpt_balance(const char *dir, int *balance, int max, int *n, int *schedule,
                          int *remat);

/* The committed checkpoint of dir into out (n bytes): its index, or checkpoint.safetensors.
 * Returns 0 (out "") when dir holds none. */
int gp_ckpt_find(const char *dir, char *out, size_t n);
/* Removes the shards and part lists in dir that no committed checkpoint names (writes that a
 * kill cut short); returns how many. Only while no other process writes a checkpoint there. */
int gp_ckpt_remove_stale(const char *dir);

#endif
