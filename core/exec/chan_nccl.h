/* Private to the channels (channel.c, chan_nccl.c): GP_CHAN_NCCL's side of the channel calls,
 * which channel.c's public functions dispatch to, and the delivery they share. */
#ifndef GP_CHAN_NCCL_H
#define GP_CHAN_NCCL_H

#include "core/exec/channel.h"

/* Adds one to a counter of the stage behind inbox b and wakes it. */
void gp_chan_deliver(const gp_chan_inbox *b, _Atomic int *counter);

gp_status gp_chan_nccl_begin(gp_chan *c, const int64_t *off, int training);
gp_status gp_chan_nccl_send(gp_chan *c, int m, const gp_tensor *v, void *grad_to);
gp_status gp_chan_nccl_recv(gp_chan *c, int m, gp_arena *own, gp_tensor *out);
gp_status gp_chan_nccl_send_grad(gp_chan *c, int m, const gp_tensor *g, gp_arena *own);
gp_status gp_chan_nccl_grad(gp_chan *c, int m, float *into);
gp_status gp_chan_nccl_poll(gp_chan *c, int *pending);

#endif
