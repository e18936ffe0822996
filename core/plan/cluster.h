/* The machines a plan is predicted for: hosts, processes and devices per host, each device's
 * compute rate and memory, and the two links (within a host, across hosts). Read from a small
 * YAML cluster file or filled by gpipe-partition's flags; every figure remembers where it came
 * from, so a prediction can say which of its assumptions were given and which were defaults. */
#ifndef GP_CLUSTER_H
#define GP_CLUSTER_H

#include "core/status.h"

/* A link between two processes: bandwidth one way, and the latency of one message. */
typedef struct gp_link {
  double bytes_per_s; /* 0: not said */
  double latency_s;   /* < 0: not said (only the bandwidth was given) */
  char source[200];   /* "--link-local", "cluster file c.yaml", "default: ..." */
} gp_link;

/* What a link is assumed to be when nothing says (orders of magnitude, named as such in
 * `source`): shared memory between the processes of a host, 10 GB/s and 2 us; 10 Gb/s
 * Ethernet over TCP between hosts, 1.25 GB/s and 50 us. */
extern const gp_link gp_link_local_default, gp_link_remote_default;

typedef struct gp_cluster {
  int hosts, procs_per_host, devices_per_host; /* 0: not said */
  double device_flops;                         /* FLOP/s each device sustains (0: not said) */
  double device_memory;                        /* bytes (0: not said) */
  gp_link local, remote;
  char src_hosts[200], src_procs[200], src_devices[200], src_flops[200],
      src_memory[200]; /* as gp_link.source */
} gp_cluster;

/* Reads a cluster file (a YAML mapping; every key optional):
 *   hosts: 16               procs_per_host: 8        devices_per_host: 8
 *   device_tflops: 100      device_memory_gib: 80
 *   link_local: [150, 3]    link_remote: [12.5, 10]  # GB/s, and latency in microseconds
 * Fields not given stay 0 (sources empty); given ones name the file as their source. Errors are
 * "path:line:col: what" (GP_ERR_SPEC), or GP_ERR_IO when the file cannot be read. */
gp_status gp_cluster_read(const char *path, gp_cluster *out);

#endif
