/* Predictions for a plan run by W processes as R data-parallel replicas over hosts: each
 * process's memory, the step time (the pipeline simulated with hand-offs on the links between
 * processes, then each stage's gradients all-reduced across its replicas in buckets), the
 * bubble and the bytes on each link. Arithmetic on the unit costs and the split only: nothing
 * of the model is allocated, so a model far larger than this machine can be planned. */
#ifndef GP_PREDICT_H
#define GP_PREDICT_H

#include "core/dist/layout.h"
#include "core/plan/cluster.h"
#include "core/plan/solve.h"

/* Gradients are all-reduced in buckets of at least this many bytes, each started when its last
 * gradient is complete (PyTorch DDP's default bucket, 25 MiB). */
#define GP_DIST_BUCKET_BYTES (25.0 * 1048576.0)

typedef struct gp_dist_req {
  const gp_unit_costs *c;    /* what times are predicted from (gp_part_time_costs) */
  double seconds_per_cost;   /* seconds per unit of c->fwd / c->bwd (1 / FLOP/s; 1 for time) */
  const gp_partition_req *r; /* M, schedule, re-materialization, speeds, optimizer slots */
  const gp_partition *p;     /* the split, and each stage's memory (gp_partition_evaluate's) */
  const gp_layout *l;        /* W, R, P and which stages each position holds */
  int procs_per_host;        /* ranks fill hosts in order: host = rank / procs_per_host */
  int devices_per_host;      /* local rank l uses device l mod this (0: a device each) */
  gp_link local, remote;     /* within a host, across hosts; bytes_per_s > 0 */
  double bucket_bytes;       /* 0: GP_DIST_BUCKET_BYTES */
  /* CPU cores of each process (0: a core or device for each stage): a process whose CPU
   * stages outnumber its cores runs them in turns, a core each (as gpipe-train gives a stage
   * max(1, cores / stages) threads); cpu[s]: stage s is a CPU stage (NULL: all are) */
  int cores;
  const unsigned char *cpu;
} gp_dist_req;

/* One position of a replica (the same in every replica but for the hosts it lands on). */
typedef struct gp_dist_proc {
  int first_stage, end_stage; /* stages [first, end) (interleaved: devices, with their chunks) */
  double params;
  /* memory, bytes: weights + gradients + optimizer state; the rest of its stages' estimate
   * (activations, gradient and hand-off buffers, working set); the copy of its inputs a
   * process receives from another (none where its stage re-materializes: that one keeps its
   * input already); and their sum */
  double mem_state, mem_act, mem_handoff, mem_total;
  double compute_s; /* per micro-batch: its stages' forward, backward and recompute */
  /* to the next position, per micro-batch one way (the gradient comes back the same size);
   * interleaved: to the positions of its chunks' successors, summed */
  double send_bytes, send_s;
  int send_remote; /* replicas in which that pair sits on two hosts (0: every pair local) */
  /* the all-reduce of its gradients across the R replicas, per step */
  double ar_bytes; /* f32 gradients: 4 x params */
  double ar_sent;  /* what the process sends (and receives): 2 (R-1)/R x ar_bytes */
  int ar_remote;   /* ring edges (replica r to r+1) that cross hosts */
  int ar_buckets;
  double ar_s;        /* the buckets' ring all-reduce times, summed */
  double ar_hidden_s; /* of which run before the pipeline's last backward ends */
  double ar_end;      /* when its last bucket is done */
  double bwd_end;     /* when its last backward ends */
} gp_dist_proc;

typedef struct gp_dist_pred {
  int procs; /* P */
  gp_dist_proc proc[GP_MAX_DEVICES];
  double pipeline_s; /* the simulated makespan of one step's M micro-batches, hand-offs included */
  int turns;         /* the most CPU stages of a process that take turns on its cores (0: none) */
  double bubble;     /* of that simulation */
  double step_s;     /* max(pipeline, the last all-reduce's end) */
  double ar_s, ar_hidden_s; /* over one replica's positions */
  double mem_max;           /* the fullest process */
  double dev_mem_max;       /* the fullest device: the processes sharing it summed */
  int dev_share;            /* processes on the most shared device */
  /* bytes per step over the whole launch: hand-offs (forward and backward) and all-reduce
   * sends, split by the link they cross */
  double bytes_local, bytes_remote;
  double handoff_s_max; /* the slowest hand-off of one micro-batch */
} gp_dist_pred;

/* Ring all-reduce of `bytes` over R processes on link k: 2 (R-1)/R x bytes / bandwidth plus
 * 2 latencies (R-1 reduce-scatter steps, R-1 all-gather steps); 0 when R = 1. */
double gp_dist_allreduce_s(double bytes, int replicas, const gp_link *k);

/* GP_ERR_USAGE for a request that does not fit together (layout and split of different K, a
 * link without bandwidth); the simulator's errors otherwise. */
gp_status gp_dist_predict(const gp_dist_req *q, gp_dist_pred *out);

#endif
