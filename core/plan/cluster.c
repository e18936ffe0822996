/* Cluster files: the hosts and links gpipe-partition predicts a multi-process run on. */
#include "core/plan/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/layout.h"
#include "core/io/target.h"
#include "core/spec/cfg.h"

const gp_link gp_link_local_default = {
    10e9, 2e-6, "default: assumed shared memory between the processes of a host, 10 GB/s, 2 us"};
const gp_link gp_link_remote_default = {
    1.25e9, 50e-6, "default: assumed 10 Gb/s Ethernet over TCP, 1.25 GB/s, 50 us"};

/* A cluster file is a few lines; anything this large is some other file. */
#define CLUSTER_MAX_BYTES (64 * 1024)

/* link_x: GB/s, or [GB/s, latency in microseconds]. */
static gp_status read_link(gp_cfg *c, const char *key, const char *path, gp_link *out) {
  double v[2] = {0, 0};
  int n = 0;
  GP_TRY(gp_cfg_floats_in(c, key, 2, (gp_range)GP_RANGE_NONNEGATIVE, v, &n));
  if (n == 0) return GP_OK;
  if (v[0] <= 0 || v[0] > 1e5)
    return gp_cfg_error_item(c, key, 0, "%s: bandwidth %g GB/s is out of range (0, 100000]", key,
                             v[0]);
  if (n == 2 && v[1] > 1e7)
    return gp_cfg_error_item(c, key, 1, "%s: latency %g us is out of range [0, 10000000]", key,
                             v[1]);
  out->bytes_per_s = v[0] * 1e9;
  out->latency_s = n == 2 ? v[1] * 1e-6 : -1;
  snprintf(out->source, sizeof out->source, "cluster file %s", path);
  return GP_OK;
}

static gp_status parse(gp_cfg *c, const char *path, gp_cluster *out) {
  gp_cfg_set_what(c, "a cluster file");
  int64_t hosts = 0, procs = 0, devs = 0;
  GP_TRY(gp_cfg_int(c, "hosts", 0, 1, GP_MAX_PROCESSES, &hosts));
  GP_TRY(gp_cfg_int(c, "procs_per_host", 0, 1, GP_MAX_PROCESSES, &procs));
  GP_TRY(gp_cfg_int(c, "devices_per_host", 0, 1, 1024, &devs));
  double tflops = 0, gib = 0;
  GP_TRY(gp_cfg_float(c, "device_tflops", 0, 1e-6, 1e6, &tflops));
  GP_TRY(gp_cfg_float(c, "device_memory_gib", 0, 1e-6, 1e6, &gib));
  GP_TRY(read_link(c, "link_local", path, &out->local));
  GP_TRY(read_link(c, "link_remote", path, &out->remote));
  GP_TRY(gp_cfg_check_unknown(c, NULL, NULL));
  char src[200];
  snprintf(src, sizeof src, "cluster file %s", path);
  out->hosts = (int)hosts;
  out->procs_per_host = (int)procs;
  out->devices_per_host = (int)devs;
  out->device_flops = tflops * 1e12;
  out->device_memory = gib * 1073741824.0;
  if (hosts) snprintf(out->src_hosts, sizeof out->src_hosts, "%s", src);
  if (procs) snprintf(out->src_procs, sizeof out->src_procs, "%s", src);
  if (devs) snprintf(out->src_devices, sizeof out->src_devices, "%s", src);
  if (tflops > 0) snprintf(out->src_flops, sizeof out->src_flops, "%s", src);
  if (gib > 0) snprintf(out->src_memory, sizeof out->src_memory, "%s", src);
  return GP_OK;
}

gp_status gp_cluster_read(const char *path, gp_cluster *out) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  GP_TRY(gp_io_read_text(path, CLUSTER_MAX_BYTES, "a cluster file", &text, NULL));
  gp_cfg *c = NULL;
  gp_status st = gp_cfg_parse(text, path, &c);
  free(text);
  if (st == GP_ERR_SPEC && strstr(gp_error_message(), ":1:1: expected a mapping"))
    st = GP_ERR(GP_ERR_SPEC,
                "%s:1:1: expected a mapping of hosts, procs_per_host, "
                "device_tflops, link_local, link_remote (docs/partition.md)",
                path);
  if (st == GP_OK) st = parse(c, path, out);
  gp_cfg_free(c);
  if (st != GP_OK) memset(out, 0, sizeof *out);
  return st;
}
