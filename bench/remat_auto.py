#!/usr/bin/env python3
"""remat auto under a memory limit that binds (issue 50's acceptance): the limit is set halfway
between the fullest stage's estimates under `never` and `always` (gpipe-partition), then
gpipe-bench runs under it `--remat auto` (selective: cheap layers first), the same with
GP_REMAT_SELECTIVE=0 (whole micro-batches alone, as before) and `always`, one process each,
alternated REPS times (the best of each kept). Prints each stage's choice, estimate and
measured peak, and the step-time ratios, and exits 1 when a measured peak passes the limit or
its estimate, or auto is not faster than always.

  bench/remat_auto.py BUILD [MODEL.yaml] [--stages 2 --micro-batches 8 --schedule gpipe
                                          --reps 3 --steps 3 --limit-mib L]
"""
import argparse
import json
import os
import subprocess
import sys

MIB = 1048576.0


def run(cmd, whole=False):
    env = dict(os.environ, GP_REMAT_SELECTIVE="0") if whole else None
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"remat_auto: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model", nargs="?", default="models/resnet56-cifar.yaml")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--schedule", default="gpipe")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--limit-mib", type=float, default=0, help="default: halfway")
    a = ap.parse_args()
    part = [f"{a.build}/cli/gpipe-partition", a.model, "--stages", str(a.stages),
            "--micro-batches", str(a.micro_batches), "--schedule", a.schedule, "--json"]
    est = {r: run(part + ["--remat", r]) for r in ("never", "always")}
    peak = {r: max(s["memory_bytes"] for s in est[r]["partition"]) for r in est}
    limit = a.limit_mib * MIB if a.limit_mib else (peak["never"] + peak["always"]) / 2
    limit = float(int(limit))
    lim = ["--memory-limit", str(int(limit))]
    est["auto"] = run(part + ["--remat", "auto"] + lim)
    est["whole"] = run(part + ["--remat", "auto"] + lim, whole=True)
    print(f"{a.model} K={a.stages} M={a.micro_batches} {a.schedule}: fullest stage estimated "
          f"{peak['never'] / MIB:.1f} MiB (never), {peak['always'] / MIB:.1f} MiB (always); "
          f"limit {limit / MIB:.1f} MiB")
    bench = [f"{a.build}/cli/gpipe-bench", a.model, "--stages", str(a.stages),
             "--micro-batches", str(a.micro_batches), "--schedule", a.schedule,
             "--by", "flops",  # gpipe-partition's split, whose estimates are checked
             "--steps", str(a.steps), "--warmup", "1", "--reps", "1", "--json"] + lim
    runs = {}
    for _ in range(a.reps):  # alternated: the load moves under all three alike
        for name in ("auto", "whole", "always"):
            out = run(bench + ["--remat", "always" if name == "always" else "auto"],
                      whole=name == "whole")
            r = next(r for r in out["runs"]
                     if r["stages"] == a.stages and r["micro_batches"] == a.micro_batches)
            if name not in runs or r["samples_per_s"] > runs[name]["samples_per_s"]:
                runs[name] = r
    ok = True
    for name in ("auto", "whole", "always"):
        r, e = runs[name], est[name]["partition"]
        if r["balance"] != ",".join(str(s["units"]) for s in e):
            print(f"  {name}: split {r['balance']} is not gpipe-partition's")
            ok = False
        planned = [[s["recomputed_micro_batches"] for s in e],
                   [s.get("selective_micro_batches", 0) for s in e]]
        if [r["recomputed_micro_batches"], r["selective_micro_batches"]] != planned:
            print(f"  {name}: ran recomputing {r['recomputed_micro_batches']} "
                  f"(selective {r['selective_micro_batches']}), not as planned")
            ok = False
        print(f"  {name:6s} split {r['balance']:6s} {r['samples_per_s']:.2f} samples/s, busy "
              f"{' + '.join(f'{b:.0f}' for b in r['busy_ms'])} ms a step (recompute "
              f"{' + '.join(f'{b:.0f}' for b in r['recompute_ms'])})")
        for s, (m, p) in enumerate(zip(r["memory_bytes"], e)):
            fits = m <= limit and m <= p["memory_bytes"]
            ok &= fits
            print(f"    stage {s}: recomputes {p['recomputed_micro_batches']} of "
                  f"{a.micro_batches}, selective {p.get('selective_micro_batches', 0)}, "
                  f"estimated {p['memory_bytes'] / MIB:.2f} MiB, measured "
                  f"{m / MIB:.2f} MiB{'' if fits else '  <- past the limit or the estimate'}")
    k1 = {n: est[n]["predicted_speedup"]["k1"] for n in ("auto", "whole", "always")}
    for x, y in (("auto", "always"), ("auto", "whole"), ("whole", "always")):
        ratio = runs[x]["samples_per_s"] / runs[y]["samples_per_s"]
        print(f"  {x} / {y}: {ratio:.3f}x the samples/s (predicted {k1[x] / k1[y]:.3f}x)")
    # the stages' compute (thread CPU time where BLAS is single-threaded): less moved by a
    # shared machine's load than samples/s; the slowest stage's bounds the step
    for x, y in (("auto", "always"), ("auto", "whole")):
        bx, by = max(runs[x]["busy_ms"]), max(runs[y]["busy_ms"])
        print(f"  {x} / {y}: slowest stage's compute {by / bx:.3f}x as fast")
    ok &= runs["auto"]["samples_per_s"] > runs["always"]["samples_per_s"]
    print("acceptance:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
