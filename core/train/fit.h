/* Checks, before any memory is taken, that a run can fit: each stage's parameters, gradients,
 * optimizer state and largest activation within its device's memory, and batch norms that see
 * more than one value per channel in every micro-batch. */
#ifndef GP_FIT_H
#define GP_FIT_H

#include "core/plan/plan.h"

/* A lower bound of each stage's memory against its limit: mem_limit (per stage, 0: none) and,
 * for the CPU stages together, the machine's physical memory. What every stage must hold at
 * once is counted (weights, buffers, gradients, the optimizer's state for m's optimizer, and
 * the largest output of a micro-batch), so a stage refused here could not have run; one that
 * passes may still pass its limit while running (the backend reports that). GP_ERR_FULL
 * naming the stage and its largest layer: a 10^6 x 10^6 linear is refused here, where the
 * pipeline asked malloc for 8 TB. */
gp_status gp_pipeline_check_fit(const gp_model *m, const gp_plan *plan, size_t mem_limit);

/* Training only (evaluation uses the running statistics): a batch norm that would normalize one
 * value per channel in the smallest micro-batch (batch / micro samples: micro-batch size 1
 * with a 1x1 or channel-only input) has a variance of 0 and outputs only its bias. GP_ERR_USAGE
 * "file:line:col: ..." naming the layer. */
gp_status gp_fit_check_batchnorm(const gp_model *m, int64_t batch, int micro);

#endif
