#!/usr/bin/env python3
"""Processes against threads on one machine, pair by pair: the training steps' throughput of
gpipe-train launched by mpirun (A) against one process (B), the two alternated REPS times, each
timed by its own log between step WARM and the last (start-up, MPI's included, left out).

  bench/mpi_ab.py BUILD MODEL.yaml --a 'MPI-NP FLAGS' --b 'FLAGS' [--steps 30 --warm 5 --reps 5]

e.g. pipeline-2 in 2 processes against 2 threads:
  bench/mpi_ab.py build models/fashion-cnn.yaml --a '2 --stages 2 --micro-batches 4 --threads 1' \\
      --b '--stages 2 --micro-batches 4 --threads 2'
Prints each run's samples/s, the medians and the median of the paired ratios A/B. Open MPI's
switches for root and for more processes than cores are set; TCP is forced between processes
(--tcp) as between hosts, or shared memory (default)."""
import argparse, json, os, shlex, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("build"); ap.add_argument("model")
ap.add_argument("--a", required=True, help="'NP flags' of the mpirun run")
ap.add_argument("--b", required=True, help="flags of the one-process run")
ap.add_argument("--steps", type=int, default=30); ap.add_argument("--warm", type=int, default=5)
ap.add_argument("--reps", type=int, default=5); ap.add_argument("--tcp", action="store_true")
ap.add_argument("--extra", default="--data synthetic", help="flags of both")
o = ap.parse_args()
train = os.path.join(o.build, "cli", "gpipe-train")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
common = shlex.split(o.extra) + ["--steps", str(o.steps), "--quiet", "--set", "train.log_every=1",
                                 "--set", "train.eval_every=1000000000"]


def run(cmd, log):
    p = subprocess.run(cmd + ["--log", log], env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    t = {}
    for line in open(log):
        e = json.loads(line)
        if e.get("event") == "train":
            t[e["step"]] = e["time_s"]
    batch = None
    for a, b in zip(cmd, cmd[1:]):
        if a == "--batch-size":
            batch = int(b)
    return (o.steps - o.warm) / (t[o.steps] - t[o.warm]), batch


a = shlex.split(o.a)
mpi = ["mpirun", "--oversubscribe", "-np", a[0], "--mca", "btl", "tcp,self" if o.tcp else "vader,self"]
cmd_a = mpi + [train, o.model] + common + a[1:]
cmd_b = [train, o.model] + common + shlex.split(o.b)
ra, rb, pairs = [], [], []
with tempfile.TemporaryDirectory() as d:
    for i in range(o.reps):
        sa, _ = run(cmd_a, os.path.join(d, f"a{i}.jsonl"))
        sb, _ = run(cmd_b, os.path.join(d, f"b{i}.jsonl"))
        ra.append(sa); rb.append(sb); pairs.append(sa / sb)
        print(f"pair {i + 1}: A {sa:.2f} steps/s, B {sb:.2f} steps/s, A/B {sa / sb:.3f}", flush=True)
print(f"A: {' '.join(cmd_a)}\nB: {' '.join(cmd_b)}")
print(f"median steps/s A {statistics.median(ra):.2f}, B {statistics.median(rb):.2f}; "
      f"A/B paired median {statistics.median(pairs):.3f} [min {min(pairs):.3f}, max {max(pairs):.3f}]")
