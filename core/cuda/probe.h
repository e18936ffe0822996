/* Whether this build has CUDA and how many devices the machine shows. */
#ifndef GP_CUDA_PROBE_H
#define GP_CUDA_PROBE_H

/* Number of CUDA devices usable now; 0 when the build has no CUDA or there is no GPU. */
int gp_cuda_device_count(void);

#endif
