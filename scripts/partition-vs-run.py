#!/usr/bin/env python3
"""gpipe-partition's predictions against a measured run: for each run of a gpipe-bench --json
file (one process, or under mpirun with the launch's processes and replicas), asks
gpipe-partition for the same layout (stages, balance, M, schedule, re-materialization, batch,
W, R) predicted from single-process unit times (--by time) and the link figures given, and
compares the step time and each stage's activation memory, for every run that fit
(baselines included). Exit 1 when one is off by more
than the tolerance (issue 49's acceptance: 15% at W <= 2).

  scripts/partition-vs-run.py GPIPE-PARTITION BENCH.json [--tolerance 0.15] [--model FILE]
                              [-- extra gpipe-partition flags, e.g. --link-local 5,3]

Fields read from each run: stages, micro_batches, schedule, remat, batch_size, balance,
samples_per_s, memory_bytes (per stage: the backend's whole peak; older files: peak_bytes, the
activation arenas alone, compared without the weights and state), fits;
and where the MPI runtime writes them, processes and replicas (absent: 1), and link figures
handoff_bytes_per_s / handoff_latency_s (within the host) if measured: the run's, else the
machine object's (gpipe-bench measures them once under mpirun). The model file is the
JSON's model_file unless --model says. Runs that did not fit are skipped."""
import argparse
import json
import subprocess
import sys


def predict(part, model, run, threads, extra, machine):
    cmd = [part, model, "--stages", str(run["stages"]), "--micro-batches",
           str(run["micro_batches"]), "--schedule", run["schedule"], "--remat", run["remat"],
           "--batch-size", str(run["batch_size"]), "--by", "time", "--threads", str(threads),
           "--processes", str(run.get("processes", 1)), "--replicas",
           str(run.get("replicas", 1)), "--json"]
    if run.get("balance"):
        b = run["balance"]  # gpipe-bench writes "2,5"
        cmd += ["--balance", b if isinstance(b, str) else ",".join(str(x) for x in b)]
    # gpipe-bench measures the links once under mpirun, into its machine object; a run's own
    # figures, where a JSON has them, win
    link = run if run.get("handoff_bytes_per_s") else machine
    if link.get("handoff_bytes_per_s") and "--link-local" not in extra:
        cmd += ["--link-local", "%g,%g" % (link["handoff_bytes_per_s"] / 1e9,
                                           (link.get("handoff_latency_s") or 0) * 1e6)]
    out = subprocess.run(cmd + extra, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("partition-vs-run: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("partition", help="the gpipe-partition binary")
    ap.add_argument("bench", help="gpipe-bench --json output of the measured run(s)")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--model", help="the model file (default: the JSON's model_file)")
    ap.add_argument("extra", nargs="*", help="after --: more gpipe-partition flags")
    a = ap.parse_args()
    bench = json.load(open(a.bench))
    model = a.model or bench.get("model_file")
    if not model:
        sys.exit("partition-vs-run: the JSON names no model_file: give --model")
    threads = bench.get("machine", {}).get("threads") or 1
    worst, rows = 0.0, 0
    print("%-34s %12s %12s %7s   %s" % ("run", "step pred", "step meas", "off", "stage memory "
                                        "pred / meas MiB (off)"))
    for run in bench["runs"]:
        # baselines (M = 1, or K = 1) are layouts too: K = 1 at R = 2 is plain data parallelism
        if not run.get("fits", True) or not run.get("samples_per_s"):
            continue
        p = predict(a.partition, model, run, threads, a.extra, bench.get("machine", {}))
        d = p["distributed"]
        meas = run["batch_size"] / run["samples_per_s"]
        off = d["step_s"] / meas - 1
        worst = max(worst, abs(off))
        slots = p["optimizer_slots"]
        mem = []
        # each stage's whole memory (what --memory-limit holds it to) where the JSON has it,
        # else its activation arenas, against the estimate without the weights and state
        total = run.get("memory_bytes")
        for s, peak in zip(p["partition"], total or run.get("peak_bytes") or []):
            act = s["memory_bytes"] - (0 if total else 4 * s["params"] * (2 + slots))
            o = act / peak - 1 if peak else 0.0
            worst = max(worst, abs(o))
            mem.append("%.1f/%.1f (%+.0f%%)" % (act / 2**20, peak / 2**20, 100 * o))
        name = "K=%d M=%d %s %s W=%d R=%d" % (run["stages"], run["micro_batches"], run["schedule"],
                                             run["remat"], d["processes"], d["replicas"])
        print("%-34s %10.2fms %10.2fms %+6.0f%%   %s" % (name, 1e3 * d["step_s"], 1e3 * meas,
                                                       100 * off, "  ".join(mem)))
        rows += 1
    if rows == 0:
        sys.exit("partition-vs-run: no measured run to compare in %s" % a.bench)
    verdict = "within" if worst <= a.tolerance else "OUTSIDE"
    print("worst %.1f%%: %s the tolerance of %.0f%%" % (100 * worst, verdict, 100 * a.tolerance))
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
