/* The pause inside a spin-wait loop: tells the core it is spinning (no memory-order
 * mis-speculation on exit, less power, the sibling hyperthread runs). */
#ifndef GP_CORE_SPIN_H
#define GP_CORE_SPIN_H

static inline void gp_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
