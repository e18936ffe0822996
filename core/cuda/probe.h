/* Whether this build has CUDA and how many devices the machine shows. */
#ifndef GP_CUDA_PROBE_H
#define GP_CUDA_PROBE_H

#include <stddef.h>

/* Number of CUDA devices usable now; 0 when the build has no CUDA or there is no GPU. */
int gp_cuda_device_count(void);
/* Free and total memory of CUDA device `device` (cudaMemGetInfo); -1 when unknown. */
int gp_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);

#endif
