/* What a benchmark reports about the machine: the sgemm rate it is compared with. */
#ifndef GP_CLI_MACHINE_H
#define GP_CLI_MACHINE_H

#include <sched.h>
#include <stddef.h>
#include <stdio.h>

#include "core/backend.h"

/* Best-of-several cblas_sgemm 1024^3 GFLOP/s with `threads` OpenBLAS threads (the first run is a
 * warm-up); 0 if the buffers cannot be had. Leaves OpenBLAS single-threaded, as the CPU
 * backend runs it. */
double gp_sgemm_gflops(int threads);

/* Best-of-several GEMM GFLOP/s of CUDA device `ordinal` through the backend's own GEMM in
 * precision prec (cuBLAS: fp32 without TF32, or bf16 operands with f32 accumulation), on
 * 4096^3 (the first run is a warm-up); 0 when there is no such device or memory. */
double gp_gpu_gemm_gflops(int ordinal, gp_precision prec);

/* Debian's OpenBLAS picks its kernels from the CPU's model when it is loaded, before main; on
 * a CPU model it does not know (a KVM guest reporting "Intel(R) Xeon(R) Processor") it falls
 * back to Prescott's SSE3 kernels, 4-6x slower than the AVX-512 ones the CPU can run. When
 * the kernels OpenBLAS chose predate AVX2 although the CPU has AVX2 and FMA (or AVX-512), and
 * OPENBLAS_CORETYPE is not set, this runs the program again (execv of /proc/self/exe with
 * argv) with OPENBLAS_CORETYPE naming the kernels the CPU allows. Silent, so that a bad flag
 * or file still gets its one line: the programs say it where they describe the machine (see
 * gp_blas_replaced). Returns when there is nothing to do or the exec failed. */
void gp_blas_pick_kernels(char **argv);

/* In a run that gp_blas_pick_kernels started: the name of the kernels OpenBLAS had chosen
 * ("Prescott"); else NULL. */
const char *gp_blas_replaced(void);

/* The name of the kernels OpenBLAS runs ("Haswell", "SkylakeX", ...). */
const char *gp_blas_kernels(void);

/* The CPU's model name from /proc/cpuinfo ("unknown" without one), with characters that
 * would need quoting in CSV, JSON or SVG replaced by spaces. */
void gp_cpu_model(char *out, size_t n);

/* CPU time of the CPUs in `cpus`, from /proc/stat's per-CPU lines ("cpuN user nice system idle
 * iowait irq softirq steal ..."), in ticks: busy (user, nice, system, irq, softirq) and steal
 * (time the hypervisor ran something else while the CPU had work). 1 if at least one of the
 * CPUs was read, else 0. */
int gp_cpu_ticks(FILE *stat, const cpu_set_t *cpus, unsigned long long *busy,
                 unsigned long long *steal);

/* gp_cpu_ticks of /proc/stat over the CPUs this process may run on. */
int gp_cpu_ticks_now(unsigned long long *busy, unsigned long long *steal);

#endif
