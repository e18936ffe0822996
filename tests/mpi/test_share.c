/* Run by tests/mpi/share.sh under mpirun -np 4 (2 replicas of 2 positions, K = 2): the main
 * thread's shares NCCL's bootstrap rides on (core/dist/dist.h), from a pair of positions of a
 * replica (MPI_Send / MPI_Recv) and across a stage's replicas (MPI_Bcast); and where NCCL is
 * built but no GPU answers, gp_nccl_pair failing on both ends with one line rather than
 * hanging. Exits 77 outside a launch of 4. */
#include <stdio.h>
#include <string.h>

#include "core/cuda/probe.h"
#include "core/dist/dist.h"
#include "core/dist/nccl.h"
#include "tests/support/check.h"

static int failures, passes;

int main(void) {
  if (gp_dist_launched() != 4) {
    printf("not a launch of 4 processes: skipped\n");
    return 77;
  }
  gp_dist d;
  gp_layout lay;
  if (gp_dist_init(&d) != GP_OK || gp_layout_make(4, d.rank, 2, 2, NULL, &lay) != GP_OK ||
      gp_dist_set_layout(&d, &lay) != GP_OK) {
    printf("FAIL: setup: %s\n", gp_error_message());
    return 1;
  }
  const int pos = d.lay.pos, rep = d.lay.replica;
  unsigned char buf[128]; /* an ncclUniqueId's size */
  /* position 0 to 1 in each replica: each receives its own replica's bytes */
  for (int i = 0; i < 128; i++)
    buf[i] = pos == 0 ? (unsigned char)(rep * 100 + i) : 0;
  CHECK(gp_dist_pair_share(&d, 0, 1, buf, sizeof buf) == GP_OK, "pair share: %s",
        gp_error_message());
  int same = 1;
  for (int i = 0; i < 128; i++)
    same &= buf[i] == (unsigned char)(rep * 100 + i);
  CHECK(same, "rank %d: the pair's bytes are its replica's", d.rank);
  /* stage `pos` (held by position pos) across the replicas: replica 0's bytes everywhere */
  for (int i = 0; i < 128; i++)
    buf[i] = rep == 0 ? (unsigned char)(pos * 50 + i) : 0;
  CHECK(gp_dist_bcast_replicas(&d, pos, buf, sizeof buf) == GP_OK, "bcast: %s", gp_error_message());
  same = 1;
  for (int i = 0; i < 128; i++)
    same &= buf[i] == (unsigned char)(pos * 50 + i);
  CHECK(same, "rank %d: stage %d's bytes are replica 0's", d.rank, pos);
  CHECK(gp_dist_bcast_replicas(&d, 1 - pos, buf, sizeof buf) != GP_OK,
        "a stage held elsewhere is refused");
  if (gp_nccl_built() && gp_cuda_device_count() == 0) {
    gp_nccl *c = NULL;
    gp_status s = gp_nccl_pair(&d, 1 - pos, pos == 0, 0, 1, &c);
    CHECK(s != GP_OK && !c && *gp_error_message() && !strchr(gp_error_message(), '\n'),
          "rank %d: no GPU: one line, no communicator (%s)", d.rank, gp_error_message());
    printf("rank %d: without a GPU: %s\n", d.rank, gp_error_message());
  }
  printf("rank %d: %d passed, %d failed\n", d.rank, passes, failures);
  gp_dist_finalize(&d);
  return failures ? 1 : 0;
}
