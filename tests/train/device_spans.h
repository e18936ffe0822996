/* Checks of a device-timed pipeline's spans (gp_pipeline_opts.device_timing on the CPU, every
 * GPU stage), shared by the CPU test of the path and the GPU test of the timers. */
#ifndef GP_TEST_DEVICE_SPANS_H
#define GP_TEST_DEVICE_SPANS_H

#include "core/exec/pipeline.h"

/* After `steps` training steps of `micro` micro-batches with trace on and the optimizer's
 * barrier used (clipping) on pipeline pl: every stage is device-timed; every action of every
 * step has one device span, tagged as its host span; a stage's device spans follow each other
 * and lie inside the run; a span's time is its length, the step's less its barrier waits; the
 * statistics are the sums of the spans; 0 <= replayed bubble <= measured < 1. Prints each
 * failure with cfg; returns how many checks failed, and adds the number made to *checks. */
int device_spans_check(const gp_pipeline *pl, int steps, int micro, const char *cfg, int *checks);

#endif
