/* gpipe-bench --data-only: the loader alone, as the trainer drives it. For each count of
 * decode threads: W untimed batches, then S timed batches of the model's training split
 * (its augmentation included); samples/s and samples/s per decode thread. */
#include "cli/bench_data.h"

#include <inttypes.h>
#include <stdlib.h>

#include "cli/bench.h"
#include "cli/machine.h"
#include "cli/progress.h"
#include "core/backend.h"
#include "core/io/json.h"
#include "data/data.h"

typedef struct data_run {
  int workers;
  double samples_per_s, per_thread, ms_per_batch;
} data_run;

static gp_status one_run(const gp_model *m, int64_t batch, int workers, int steps, int warmup,
                         data_run *out) {
  gp_loader_opts lo = gp_loader_opts_of(&m->data);
  lo.workers = workers;
  gp_data_opts o = {.train = 1, .batch = batch, .seed = m->train.seed, .loader = &lo};
  gp_data d;
  GP_TRY(gp_data_open(m, &o, &d));
  gp_status s = GP_OK;
  double t0 = 0;
  int64_t n = 0;
  for (int i = 0; s == GP_OK && i < warmup + steps; i++) {
    gp_batch b;
    if (i == warmup) t0 = gp_now();
    s = gp_batch_source_next(d.train, &b, NULL);
    if (i >= warmup) n += b.n;
  }
  double dt = gp_now() - t0;
  gp_batch_source_stats st;
  gp_batch_source_stats_get(d.train, &st);
  gp_data_close(&d);
  GP_TRY(s);
  out->workers = st.workers;
  out->samples_per_s = dt > 0 ? (double)n / dt : 0;
  out->per_thread = out->samples_per_s / (st.workers > 0 ? st.workers : 1);
  out->ms_per_batch = steps > 0 ? 1e3 * dt / steps : 0;
  return GP_OK;
}

gp_status gp_bench_data_only(const gp_model *m, int64_t batch, const int *workers, int n_workers,
                             int steps, int warmup, int json, int quiet) {
  /* the training split's augmentation where the dataset has one (ImageNet's by default) */
  int augment = m->data.augment;
  if (m->data.dataset == GP_DATA_NONE || m->data.dataset == GP_DATA_SYNTHETIC)
    return GP_ERR(GP_ERR_USAGE, "--data-only: %s has no data section naming a dataset", m->file);
  if (m->data.dataset == GP_DATA_TRANSLATION || m->data.dataset == GP_DATA_TEXT)
    return GP_ERR(GP_ERR_USAGE,
                  "--data-only: %s reads %s token data, which has no decode threads to measure "
                  "(--data-only is for image datasets)",
                  m->file, m->data.dataset == GP_DATA_TEXT ? "text" : "translation");
  /* opened once first, so that what does not fit (its sample shape is then the model
   * input's, and it holds a batch) is said before the runs start */
  gp_data_opts po = {.train = 1, .batch = batch, .seed = m->train.seed};
  gp_data probe;
  GP_TRY(gp_data_open(m, &po, &probe));
  gp_data_close(&probe);
  const gp_model_input *xi;
  GP_TRY(gp_data_input(m, "an image dataset", &xi));
  gp_shape sh = xi->shape;
  data_run *runs = calloc((size_t)n_workers, sizeof *runs);
  gp_status s = runs ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory");
  for (int i = 0; s == GP_OK && i < n_workers; i++) {
    if (!quiet && workers[i] < 0)
      fprintf(stderr, "gpipe-bench: data only, the automatic number of decode threads...\n");
    else if (!quiet)
      fprintf(stderr, "gpipe-bench: data only, %d decode threads...\n", workers[i]);
    s = one_run(m, batch, workers[i], steps, warmup, &runs[i]);
  }
  char cpu[128], shape[96];
  gp_cpu_model(cpu, sizeof cpu);
  gp_shape_str(&sh, shape, sizeof shape);
  if (s == GP_OK && json) { /* the file and CPU names may hold quotes and backslashes */
    printf("{\"machine\": {\"cpu\": ");
    gp_json_write_str(stdout, cpu);
    printf(", \"cores\": %d},\n \"data\": {\"model\": ", gp_cpu_cores());
    gp_json_write_str(stdout, m->file);
    printf(", \"sample\": ");
    gp_json_write_str(stdout, shape);
    printf(", \"batch_size\": %" PRId64 ", \"augment\": %s, \"steps\": %d, \"warmup\": %d},\n "
           "\"runs\": [",
           batch, augment ? "true" : "false", steps, warmup);
    for (int i = 0; i < n_workers; i++)
      printf("%s\n  {\"workers\": %d, \"samples_per_s\": %.1f, \"per_thread\": %.1f, "
             "\"ms_per_batch\": %.3f}",
             i ? "," : "", runs[i].workers, runs[i].samples_per_s, runs[i].per_thread,
             runs[i].ms_per_batch);
    printf("]}\n");
  } else if (s == GP_OK) {
    printf("data only: %s, samples %s, batch %" PRId64 ", augmentation %s, %d timed batches "
           "after %d; %s, %d cores\n",
           m->file, shape, batch, augment ? "on" : "off", steps, warmup, cpu, gp_cpu_cores());
    printf("%8s  %12s  %12s  %10s\n", "threads", "samples/s", "per thread", "ms/batch");
    for (int i = 0; i < n_workers; i++)
      printf("%8d  %12.1f  %12.1f  %10.3f\n", runs[i].workers, runs[i].samples_per_s,
             runs[i].per_thread, runs[i].ms_per_batch);
    for (int i = 0; i < n_workers; i++)
      if (runs[i].workers == 0) {
        printf("(0 threads: decoded on the calling thread)\n");
        break;
      }
  }
  free(runs);
  GP_TRY(s);
  return gp_bench_stream_status(stdout, "stdout"); /* as the sweep's table: a full disk fails */
}
