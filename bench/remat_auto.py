#!/usr/bin/env python3
"""remat auto under a memory limit that binds, against `always` (issue 50's acceptance): the
limit is set halfway between the fullest stage's estimates under `never` and `always`
(gpipe-partition), then gpipe-bench runs `--remat auto,always` under it, the two alternated
REPS times (the best of each kept). Prints each stage's choice, estimate and measured peak, and
the step-time ratio, and exits 1 when a measured peak passes the limit or its estimate, or auto
is not faster than always.

  bench/remat_auto.py BUILD [MODEL.yaml] [--stages 2 --micro-batches 8 --schedule gpipe
                                          --reps 3 --steps 3 --limit-mib L]
"""
import argparse
import json
import subprocess
import sys

MIB = 1048576.0


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
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
    auto = run(part + ["--remat", "auto", "--memory-limit", str(int(limit))])
    print(f"{a.model} K={a.stages} M={a.micro_batches} {a.schedule}: fullest stage estimated "
          f"{peak['never'] / MIB:.1f} MiB (never), {peak['always'] / MIB:.1f} MiB (always); "
          f"limit {limit / MIB:.1f} MiB")
    bench = run([f"{a.build}/cli/gpipe-bench", a.model, "--stages", str(a.stages),
                 "--micro-batches", str(a.micro_batches), "--schedule", a.schedule,
                 "--by", "flops",  # gpipe-partition's split, whose estimates are checked
                 "--remat", "auto,always", "--memory-limit", str(int(limit)),
                 "--reps", str(a.reps), "--steps", str(a.steps), "--warmup", "1", "--json"])
    runs = {r["remat"]: r for r in bench["runs"]
            if r["stages"] == a.stages and r["micro_batches"] == a.micro_batches}
    ok = True
    for remat in ("auto", "always"):
        r = runs[remat]
        e = auto if remat == "auto" else est["always"]
        if r["balance"] != ",".join(str(s["units"]) for s in e["partition"]):
            print(f"  {remat}: split {r['balance']} is not gpipe-partition's")
            ok = False
        if r["recomputed_micro_batches"] != [s["recomputed_micro_batches"] for s in e["partition"]]:
            print(f"  {remat}: ran recomputing {r['recomputed_micro_batches']}, not as planned")
            ok = False
        print(f"  {remat:6s} split {r['balance']:6s} {r['samples_per_s']:.2f} samples/s")
        for s, (m, p) in enumerate(zip(r["memory_bytes"], e["partition"])):
            fits = m <= limit and m <= p["memory_bytes"]
            ok &= fits
            print(f"    stage {s}: recomputes {p['recomputed_micro_batches']} of "
                  f"{a.micro_batches}, estimated {p['memory_bytes'] / MIB:.2f} MiB, measured "
                  f"{m / MIB:.2f} MiB{'' if fits else '  <- past the limit or the estimate'}")
    ratio = runs["auto"]["samples_per_s"] / runs["always"]["samples_per_s"]
    pred = auto["predicted_speedup"]["k1"] / est["always"]["predicted_speedup"]["k1"]
    print(f"  auto / always: {ratio:.3f}x the samples/s (predicted {pred:.3f}x)")
    ok &= ratio > 1
    print("acceptance:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
