#!/usr/bin/env python3
"""Each training step's stages, from a gpipe Chrome trace: the step's span, each stage's busy
time, the mean idle share over the stages and the idle share of the step's busiest stage (the
one that set its pace), beside GPipe's bubble (K-1)/(M+K-1).

    scripts/trace-steps.py TRACE.json [--steps N]

Busy is the wall length of a stage's action slices in the step (forward, recompute, backward,
handing a gradient back, optimizer step), from the device rows where the trace has them (GPU
stages). The span runs from the step's first action to its last. Unlike gpipe-bench's
statistics, an optimizer step's slice keeps its wait at the stages' barrier (clipping, tied
weights), and the span leaves out waking the stages, so the figures differ a little from its
`bubble` and `slowest`; what the trace adds is each step on its own: which stage was slow when.
"""
import argparse
import json
import signal
import sys

DEVICE_ROWS = 1024  # GP_MAX_DEVICES: the trace's device rows start there


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly stop under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, help="only the last N steps (default: all)")
    a = ap.parse_args()
    try:
        ev = json.load(open(a.trace))["traceEvents"]
        acts = [e for e in ev if e.get("ph") == "X" and e.get("cat") != "layer"]
        on_dev = any(e["tid"] >= DEVICE_ROWS for e in acts)
        acts = [e for e in acts if (e["tid"] >= DEVICE_ROWS) == on_dev]
        base = DEVICE_ROWS if on_dev else 0
        steps = sorted({e["args"]["step"] for e in acts})
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace-steps: {a.trace}: not a gpipe trace ({e})")
    if not acts:
        sys.exit(f"trace-steps: {a.trace}: no actions (a trace of evaluation only?)")
    if a.steps is not None:
        if a.steps < 1:
            sys.exit("trace-steps: --steps must be at least 1")
        steps = steps[-a.steps:]
    k = 1 + max(e["tid"] for e in acts) - base
    print(f"{'step':>4}  {'span ms':>8}  {'mean idle':>9}  {'busiest idle':>12}  busy ms per stage"
          f"{' (device time)' if on_dev else ''}")
    tot_span = tot_busy = tot_pace = 0.0
    for step in steps:
        sa = [e for e in acts if e["args"]["step"] == step]
        t0 = min(e["ts"] for e in sa)
        span = max(e["ts"] + e["dur"] for e in sa) - t0
        busy = [sum(e["dur"] for e in sa if e["tid"] == base + s) for s in range(k)]
        m = len({e["args"]["micro_batch"] for e in sa if e["cat"] == "forward"})
        if span <= 0:
            continue
        mean = 1 - sum(busy) / (k * span)
        pace = 1 - max(busy) / span
        tot_span += span
        tot_busy += sum(busy)
        tot_pace += max(busy)
        print(f"{step:>4}  {span / 1e3:>8.2f}  {mean:>9.3f}  {pace:>12.3f}  "
              + "/".join(f"{b / 1e3:.1f}" for b in busy))
    if tot_span > 0:
        theory = (k - 1) / (m + k - 1) if m else float("nan")
        print(f"{'all':>4}  {tot_span / 1e3:>8.2f}  {1 - tot_busy / (k * tot_span):>9.3f}  "
              f"{1 - tot_pace / tot_span:>12.3f}  GPipe's bubble for K = {k}, M = {m}: "
              f"{theory:.3f}")


if __name__ == "__main__":
    main()
