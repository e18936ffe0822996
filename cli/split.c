/* The automatic split's flags shared by gpipe-train and gpipe-bench (--by, --cache-dir), and
 * the line that says units are being timed. */
#include "cli/split.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "cli/machine.h"
#include "core/env.h"

const char *const gp_cli_by_names[] = {"flops", "params", "time", NULL};
_Static_assert(GP_COST_TIME == 2, "--by names");

void gp_cli_cache_dir(const gp_flag *cache, char *buf, size_t n) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  buf[0] = 0;
  if (cache && cache->given)
    snprintf(buf, n, "%s", cache->s);
  else if (xdg && *xdg)
    snprintf(buf, n, "%s/gpipe", xdg);
  else if (home && *home)
    snprintf(buf, n, "%s/.cache/gpipe", home);
}

gp_status gp_cli_split_by(const gp_cli_split *f, gp_cost_by *by) {
  int v = GP_COST_TIME;
  if (f->by && f->by->given) GP_TRY(gp_cli_choice(f->by->name, f->by->s, gp_cli_by_names, &v));
  *by = (gp_cost_by)v;
  return GP_OK;
}

typedef struct progress {
  const gp_cli_split *f;
  const char *cache;
} progress;

/* Timing takes seconds to a minute, once per micro-batch size and thread count: said before. */
static void measuring(void *ctx, int units, int64_t micro, int threads) {
  const progress *p = ctx;
  if (p->f->quiet) return;
  fprintf(stderr,
          "%s: timing %d unit%s for the split (micro-batch %" PRId64 ", %d thread%s a stage; "
          "once: %s)...\n",
          p->f->prog, units, units == 1 ? "" : "s", micro, threads, threads == 1 ? "" : "s",
          p->cache && *p->cache ? "kept in the cache" : "no cache folder");
  fflush(stderr);
}

gp_status gp_cli_split_costs(const gp_cli_split *f, const gp_model *m, const gp_pipeline_spec *ps,
                             int threads, gp_unit_costs *out, char *note, size_t n) {
  char cache[4096];
  gp_cli_cache_dir(f->cache, cache, sizeof cache);
  progress p = {f, cache};
  gp_split_opts o = {
      .threads = threads, .cache_dir = cache[0] ? cache : NULL, .measuring = measuring, .ctx = &p};
  GP_TRY(gp_cli_split_by(f, &o.by));
  gp_status s = gp_split_costs(m, ps, &o, out);
  /* the default folder is only a cache: one that cannot be made or written (a read-only home)
   * costs a warning; an explicit --cache-dir stays an error */
  if (s == GP_ERR_IO && o.cache_dir && !(f->cache && f->cache->given)) {
    fprintf(stderr, "%s: not caching unit times: %s\n", f->prog, gp_error_message());
    gp_error_clear();
    o.cache_dir = NULL;
    p.cache = NULL;
    s = gp_split_costs(m, ps, &o, out);
  }
  GP_TRY(s);
  if (o.by == GP_COST_TIME && out->by != GP_COST_TIME)
    snprintf(note, n, "by FLOPs: CUDA stages are not timed");
  else
    snprintf(note, n, "by %s",
             out->by == GP_COST_TIME    ? "measured time"
             : out->by == GP_COST_FLOPS ? "FLOPs"
                                        : "parameters");
  return GP_OK;
}

double gp_cli_split_seconds_per_flop(const gp_pipeline_spec *ps, int threads) {
  const int pinned = gp_env_get(GP_ENV_SPLIT_GFLOPS, 0); /* a rate given: no measuring */
  if (pinned > 0) return 1 / (pinned * 1e9);
  const char *dev = ps->n_devices > 0 ? ps->devices[0] : "cpu";
  double g = strncmp(dev, "cuda", 4) == 0 ? gp_gpu_gemm_gflops(atoi(dev + 5), GP_PREC_FP32)
                                          : gp_sgemm_gflops(threads);
  return g > 0 ? 1 / (g * 1e9) : 0;
}
