/* Plans as YAML files: gpipe-partition writes one (-o plan.yaml), gpipe-train reads it
 * (--partition plan.yaml). A plan names its model and lists the model's units, so a plan
 * made for another model, or for an edited one, is refused instead of silently misapplied. */
#ifndef GP_PLAN_IO_H
#define GP_PLAN_IO_H

#include "core/plan/plan.h"

/* Writes p for model m atomically (path.tmp, fsync, rename, fsync of the directory).
 * GP_ERR_IO when the file cannot be written. */
gp_status gp_plan_write(const char *path, const gp_model *m, const gp_plan *p);

/* Reads a plan and checks it against m: the model name, the unit count and names, the
 * balance (one entry per stage, each >= 1, summing to the units) and the device names.
 * Errors are "path:line:col: what": GP_ERR_SPEC for malformed YAML or a value of the wrong
 * type, GP_ERR_USAGE for a plan that does not fit the model, GP_ERR_IO when unreadable.
 * Keys left out (schedule, remat, devices, micro_batches, units) take the model's
 * pipeline section's values; stages and balance are required. The old name checkpoint: is
 * read as remat: and noted in out->renamed (giving both is GP_ERR_SPEC). batch_size (the batch
 * M was chosen for) must be m's train.batch_size: another would change the micro-batches' size
 * unseen; a plan without it (older files) gets out->batch 0. M larger than the batch is
 * refused at micro_batches. */
gp_status gp_plan_read(const char *path, const gp_model *m, gp_plan *out);

#endif
