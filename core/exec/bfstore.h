/* BF16_MIXED's activations in 16-bit storage: what a micro-batch's forward keeps for its
 * backward, packed to bf16 as each node's forward ends and widened back to f32, one node at a
 * time, for each node that reads it. Lossless: under BF16_MIXED those values are on the bf16
 * grid already. */
#ifndef GP_EXEC_BFSTORE_H
#define GP_EXEC_BFSTORE_H

#include "core/exec/pass.h"

struct stage;

/* Whether a stage on backend be packs: BF16_MIXED, the backend has the ops, GP_BF16_STORE is
 * not 0. */
int gp_bfstore_on(const gp_backend *be);
/* The nodes among [first, end) whose outputs are packed (flag[i], the others left alone): f32
 * outputs that BF16_MIXED rounds (nodes that depend on a trainable parameter, losses and the
 * last node excepted) and that no other stage reads (sent[0..n_sent): the tensor ids handed
 * on, which stay f32 in the channels). A node writing over its input in place shares its
 * producer's storage: the two are flagged alike (packed only if both may be). Returns the bytes
 * per sample packing saves (half their outputs, in-place ones counted once). */
int64_t gp_bfstore_set(const gp_model *m, const int *reader, int first, int end, const int *sent,
                       int n_sent, unsigned char *flag);
/* A pipeline stage (core/exec/internal.h) with `micro` slots, its backend made: where
 * gp_bfstore_on, its flags (st->pack) and widen arena (counted in its meter), its passes
 * pointed at them. */
gp_status gp_bfstore_stage_init(struct stage *st, int micro);
/* Where the forward puts node i's output: p->widen when it will be packed (it lives while
 * the node runs), else ar. */
gp_arena *gp_bfstore_out_arena(const gp_pass *p, int i, gp_arena *ar);
/* After node i's forward (and its rounding): its output packed into e->arena (the slot), or
 * into its producer's packed storage when it ran in place, p->val pointing there (GP_BF16). */
gp_status gp_bfstore_pack_node(gp_pass *p, gp_exec *e, int i);
/* Before node i's forward, recompute or backward: its inputs in[0..n_in) and output
 * *out (NULL: none) that are packed, replaced by f32 copies in p->widen (an alias once). */
gp_status gp_bfstore_widen(gp_pass *p, gp_exec *e, int i, gp_tensor *in, gp_tensor *out);
/* After node i: p->widen emptied. */
gp_status gp_bfstore_release(gp_pass *p);

#endif
