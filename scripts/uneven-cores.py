#!/usr/bin/env python3
"""Runs a command on two cores of unequal speed, to see what a CPU stage's threads lose when
one of its cores is slower than the others (as on a shared VM, where the 16-core machine's
CPUs ran the same code up to 1.5x apart; docs/bench.md). The command's newest thread (with
`--threads 2` and one stage: the stage's helper) is pinned to CPU B, which a hog shares by
computing BUSY us then sleeping IDLE us, over and over (a core that much slower, at a grain
finer than an op); every other thread of it to CPU A. Exits with the command's status.

    scripts/uneven-cores.py [--busy 100] [--idle 100] [--cpus 0,1] -- \\
        build/cli/gpipe-bench bench/models/balanced-cnn.yaml --stages 1 --threads 2 ...

Compare GP_CPU_PIECES=1 (a started share is waited for) with the default in one run."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The hog, in C: Python's sleeps are too coarse for a 100 us grain.
HOG = r"""
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
  double busy = atof(argv[1]) * 1e-6;
  struct timespec idle = {0, (long)(atof(argv[2]) * 1e3)};
  for (;;) {
    double t = now();
    while (now() - t < busy) {
    }
    nanosleep(&idle, NULL);
  }
}
"""


def main(argv):
    cut = argv.index("--") if "--" in argv else None
    if cut is None or cut == len(argv) - 1:
        print("usage: scripts/uneven-cores.py [--busy US] [--idle US] [--cpus A,B] -- COMMAND...",
              file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", type=float, default=100.0, help="us the hog computes (default 100)")
    ap.add_argument("--idle", type=float, default=100.0, help="us it sleeps (default 100)")
    ap.add_argument("--cpus", default="0,1", help="the fast and the slow CPU (default 0,1)")
    a = ap.parse_args(argv[:cut])
    fast, slow = (int(c) for c in a.cpus.split(","))
    tmp = tempfile.mkdtemp()
    with open(f"{tmp}/hog.c", "w") as f:
        f.write(HOG)
    subprocess.run(["cc", "-O2", "-o", f"{tmp}/hog", f"{tmp}/hog.c"], check=True)
    hog = subprocess.Popen(["taskset", "-c", str(slow), f"{tmp}/hog", str(a.busy), str(a.idle)])
    cmd = subprocess.Popen(argv[cut + 1:])
    try:
        while cmd.poll() is None:
            try:
                tids = sorted(int(t) for t in os.listdir(f"/proc/{cmd.pid}/task"))
            except FileNotFoundError:
                break
            for t in tids:
                try:
                    os.sched_setaffinity(t, {slow} if t == tids[-1] and len(tids) > 1 else {fast})
                except OSError:
                    pass  # the thread ended meanwhile
            time.sleep(0.01)
    finally:
        hog.kill()
        hog.wait()
        shutil.rmtree(tmp)
    return cmd.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
