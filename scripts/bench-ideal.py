#!/usr/bin/env python3
"""One line from a `gpipe-bench --json` file: each pipelined run's speed-up over naive-K as a
share of the ideal K*M/(M+K-1), with the work factor of that share (naive-K's stages' busy
time over the run's, where the file has it), its measured bubble against the theory (and the
idle share of each step's busiest stage, the run's steps replayed with free hand-offs and the
schedule simulated with the run's own stage times, where the file has them), and the most that
the hypervisor took (steal) in any run of the file.

    scripts/bench-ideal.py BENCH.json
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/bench-ideal.py BENCH.json")
    try:
        runs = json.load(open(sys.argv[1]))["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{sys.argv[1]}: not gpipe-bench --json output ({e})")
    cells = []
    naive = {r["stages"]: r for r in runs if r["micro_batches"] == 1
             and r["schedule"] == "gpipe" and r["remat"] == "never"}
    for r in runs:
        k, m = r["stages"], r["micro_batches"]
        if r["baseline"] or k == 1 or m == 1:
            continue
        ideal = k * m / (m + k - 1)
        # the stages' wall time in actions against naive-K's for the same samples (gpipe-bench's
        # "of ideal" line: the work factor of the share)
        n = naive.get(k)
        work = ""
        if n and r.get("wall_busy_ms") and n.get("wall_busy_ms") and sum(r["wall_busy_ms"]) > 0:
            work = f", work x{sum(n['wall_busy_ms']) / sum(r['wall_busy_ms']):.2f}"
        extra = [f"{name} {r[key]:.3f}" for name, key in
                 (("slowest", "bubble_slowest"), ("replay", "bubble_replayed"),
                  ("sim", "bubble_simulated"))
                 if r.get(key) is not None]
        sim = f" ({', '.join(extra)})" if extra else ""
        cells.append(f"K={k} M={m} {r['schedule']} {r['speedup_vs_naive']:.2f}x of {ideal:.2f} "
                     f"({100 * r['speedup_vs_naive'] / ideal:.0f}%{work}, bubble "
                     f"{r['bubble_measured']:.3f}{sim} vs {r['bubble_theory']:.3f})")
    steals = [r["steal"] for r in runs if r.get("steal") is not None]
    if steals:
        cells.append(f"steal up to {100 * max(steals):.1f}%")
    print("; ".join(cells) if cells else "no pipelined runs")


if __name__ == "__main__":
    main()
