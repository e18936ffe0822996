/* How many processes the launcher started, from its environment: the one question about
 * processes that a build without MPI asks too. */
#include <stdlib.h>

#include "core/dist/dist.h"

int gp_dist_launched(void) {
  /* Open MPI, MPICH's Hydra, PMIx launchers (srun --mpi=pmix), Slurm */
  const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", NULL};
  for (int i = 0; names[i]; i++) {
    const char *v = getenv(names[i]);
    int n = v && *v ? atoi(v) : 0;
    if (n > 1) return n;
  }
  return 1;
}
