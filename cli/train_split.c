/* gpipe-train's split: on --resume the one the checkpoint records (so the resumed run is bit for
 * bit the run it continues), else a balance given by the file, a flag or a plan, else the
 * automatic split by --by (measured unit times by default), made on rank 0 and sent to every
 * process so that they never disagree. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/split.h"
#include "cli/train.h"
#include "core/plan/cluster.h"
#include "core/plan/plan.h"
#include "core/train/checkpoint.h"

static void balance_str(const int *b, int k, char *buf, size_t n) {
  gp_plan p = {.stages = k};
  for (int s = 0, u = 0; s < k; s++) {
    p.st[s].first_unit = u;
    p.st[s].end_unit = u += b[s];
  }
  gp_plan_balance_str(&p, buf, n);
}

/* --resume: the checkpoint's split, where this run asks for none other. A different stage
 * count or a given balance wins: the run goes on from the weights with a note that it is not
 * bit for bit the run it continues. *taken: 1 when ps now holds the recorded balance. */
static gp_status resume_split(run *r, gp_pipeline_spec *ps, int *taken) {
  static int bal[GP_MAX_DEVICES];
  int n = 0, sched = -1, remat = -1;
  *taken = 0;
  GP_TRY(gp_ckpt_balance(tr_flags[F_CKPT_DIR].s, bal, GP_MAX_DEVICES, &n, &sched, &remat));
  if (n == 0) return GP_OK; /* written before the split was recorded: split afresh */
  /* interleaved records its K V chunks: V is the entries over the stages */
  const int v = sched == GP_SCHED_INTERLEAVED && n % ps->stages == 0 ? n / ps->stages : 1;
  const int want = ps->virtual_stages > 1 ? ps->virtual_stages : 1;
  int same = n == ps->stages * v && (want == v || ps->schedule == GP_SCHED_AUTO);
  for (int s = 0; same && ps->n_balance && s < n; s++)
    same = ps->balance[s] == bal[s];
  if (same) {
    ps->n_balance = n;
    memcpy(ps->balance, bal, sizeof(int) * (size_t)n);
    snprintf(r->split_note, sizeof r->split_note, "the checkpoint's");
    *taken = 1;
    /* schedule auto chose on the costs of then: the choice is the checkpoint's too (its V) */
    if (ps->schedule == GP_SCHED_AUTO && sched >= 0 && remat >= 0) {
      ps->schedule = (gp_schedule_kind)sched;
      ps->remat = (gp_remat)remat;
      ps->virtual_stages = v;
    }
    return GP_OK;
  }
  if (r->dist.rank == 0 && !tr_flags[F_QUIET].given) {
    char rec[GP_PLAN_BALANCE_LEN];
    balance_str(bal, n, rec, sizeof rec);
    fprintf(stderr,
            "gpipe-train: --resume: the checkpoint was trained on %d %s%s of %.200s units; "
            "this run %s, so it goes on from the checkpoint but is not bit for bit the run "
            "it continues\n",
            n, sched == GP_SCHED_INTERLEAVED ? "interleaved chunk" : "stage", n == 1 ? "" : "s",
            rec,
            n != ps->stages * v ? "has another number of stages"
            : want != v         ? "runs another number of chunks a stage"
                                : "was given another balance");
  }
  return GP_OK;
}

gp_status tr_split(run *r, int threads, gp_plan *plan) {
  gp_model *m = r->m;
  gp_pipeline_spec ps = m->pipeline;
  const int k = ps.stages;
  /* across processes schedule auto charges every hand-off between them (interleaved's chunk
   * boundaries too) on the assumed link: shared memory on one host, TCP across hosts */
  const int R = ps.replicas > 1 ? ps.replicas : 1;
  ps.across_procs = r->dist.world > 1 && r->dist.world % R == 0 ? r->dist.world / R : 0;
  const gp_link *lk =
      r->dist.local_size < r->dist.world ? &gp_link_remote_default : &gp_link_local_default;
  ps.link_latency_s = lk->latency_s;
  ps.link_bytes_per_s = lk->bytes_per_s;
  r->split_note[0] = 0;
  int taken = 0;
  if (tr_flags[F_RESUME].given) GP_TRY(resume_split(r, &ps, &taken));
  /* a split to make, or a schedule to choose (schedule: auto), weighs the costs of --by: on a
   * given split the choice is made on the costs the run that made it had */
  if (k == 1 || (ps.n_balance && ps.schedule != GP_SCHED_AUTO)) return gp_plan_make(m, &ps, plan);
  /* what the plan refuses whatever the costs (M against interleaved's K, a bad V) is said before
   * any unit is timed: the analytic plan first */
  GP_TRY(gp_plan_make(m, &ps, plan));
  char note[sizeof r->split_note] = "";
  const gp_cli_split f = {"gpipe-train", &tr_flags[F_BY], &tr_flags[F_CACHE],
                          tr_flags[F_QUIET].given || r->dist.rank != 0};
  /* each stage's share of this process's threads, as the pipeline gives them */
  const int here = tr_dist_stages_here(r, k), per = threads / here > 1 ? threads / here : 1;
  /* [0]: 1 when rank 0 made the plan; [1], [2], [3]: its schedule, re-materialization and
   * chunks a stage (schedule auto may choose interleaved's V); then the balance, a chunk an
   * entry (sent whole: the others do not know V before) */
  static int buf[GP_MAX_DEVICES + 4];
  memset(buf, 0, sizeof buf);
  gp_status s = GP_OK;
  if (r->dist.rank == 0) {
    gp_unit_costs c;
    s = gp_cli_split_costs(&f, m, &ps, per, &c, note, sizeof note);
    /* FLOPs: the hand-offs' seconds weighed at this device's rate, measured once */
    if (s == GP_OK && ps.across_procs > 1 && ps.schedule == GP_SCHED_AUTO && c.by == GP_COST_FLOPS)
      ps.seconds_per_flop = gp_cli_split_seconds_per_flop(&ps, per);
    if (s == GP_OK) {
      s = gp_plan_make_from(m, &ps, &c, plan);
      gp_unit_costs_free(&c);
    }
    buf[0] = s == GP_OK;
    buf[1] = (int)plan->schedule;
    buf[2] = (int)plan->remat;
    buf[3] = s == GP_OK ? gp_plan_chunks(plan) : 1;
    for (int i = 0; s == GP_OK && i < plan->stages; i++)
      buf[4 + i] = plan->st[i].end_unit - plan->st[i].first_unit;
  }
  if (!taken && !ps.n_balance) snprintf(r->split_note, sizeof r->split_note, "%s", note);
  if (r->dist.world == 1) return s;
  /* every process runs rank 0's plan: timings differ from process to process */
  gp_status b = tr_dist_bcast(r, buf, sizeof buf);
  if (s != GP_OK || r->dist.rank == 0) return s;
  GP_TRY(b);
  if (!buf[0])
    return GP_ERR(GP_ERR_RUNTIME, "the automatic split failed on rank 0 (its error says why)");
  if (buf[3] < 1 || (long long)k * buf[3] > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_RUNTIME, "rank 0 sent %d chunks a stage", buf[3]);
  int given = ps.n_balance;
  ps.virtual_stages = buf[3];
  ps.n_balance = k * buf[3];
  memcpy(ps.balance, buf + 4, sizeof(int) * (size_t)ps.n_balance);
  ps.schedule = (gp_schedule_kind)buf[1];
  ps.remat = (gp_remat)buf[2];
  if (!given) snprintf(r->split_note, sizeof r->split_note, "rank 0's, by --by");
  return gp_plan_make(m, &ps, plan);
}
