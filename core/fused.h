/* Fused nodes: two adjacent layers run as one node (core/spec/fuse.c decides which), a
 * producer whose output only the other reads. To the pass, the schedules' B/W split and
 * re-materialization it is one layer; inside, the parts' own forwards and backwards run in
 * order (the unfused layers' ops: on the CPU the same bits), or one fused backend op where
 * the backend has one (be->linear_act_forward, be->add_*norm_forward). */
#ifndef GP_FUSED_H
#define GP_FUSED_H

#include "core/layer.h"

typedef enum gp_fuse_kind {
  GP_FUSE_LINEAR_ACT, /* linear (+bias), then relu, gelu or gelu tanh */
  GP_FUSE_ADD_NORM,   /* a residual add of two tensors, then layernorm or rmsnorm */
} gp_fuse_kind;

/* Fills *out with the node fusing a (the producer) and b (whose one input is a's output),
 * taking over their conf and path (freed with out->conf and out->path, as any layer's; a and
 * b are left without them). a_trains: a's output depends on a trainable parameter (the
 * unfused pass would round it in bf16-mixed and hand it a gradient). */
gp_status gp_fused_make(gp_fuse_kind kind, gp_layer *a, gp_layer *b, int a_trains, gp_layer *out);

/* A fused node's part i (0: the producer, 1: its reader), or NULL when l is not fused. */
const gp_layer *gp_fused_part(const gp_layer *l, int i);

#endif
