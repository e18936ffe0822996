#!/usr/bin/env python3
"""Where a step's time goes, by layer type and pass, from a gpipe Chrome trace.

    scripts/trace-layers.py TRACE.json [--steps N] [--stage S] [--by type|layer]

Reads the `layer` slices that `gpipe-train --trace` and `gpipe-bench --trace` write inside
each forward, recompute and backward, keeps the last N steps (default 3: the warm-up steps
come first), and prints per (layer type or layer path, pass): milliseconds per step, calls
per step and microseconds per call, largest first, with the actions' total beside the
layers' (the difference is time spent between layers: gradient sums, arena resets). A trace
with GPU stages has their actions and layers twice: as the host launched them and as the GPU
ran them (the device rows); the GPU's are the ones summed then.
"""
import argparse
import collections
import json
import signal
import sys

DEVICE_ROWS = 1024  # GP_MAX_DEVICES: the trace's device rows start there


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly stop under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=3, help="last N steps (default 3)")
    ap.add_argument("--stage", type=int, help="one stage (default: all)")
    ap.add_argument("--by", choices=("type", "layer"), default="type")
    a = ap.parse_args()
    try:
        ev = json.load(open(a.trace))["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace-layers: {a.trace}: not a gpipe trace ({e})")
    if a.steps < 1:
        sys.exit("trace-layers: --steps must be at least 1")
    # a GPU stage's actions and layers are on two rows: the host's launches (tid = stage) and
    # the GPU's time (tid 1024 + stage); where the trace has the GPU's, those are the ones
    xs = [e for e in ev if e.get("ph") == "X"]
    on_dev = any(e.get("cat") == "layer" and e.get("tid", 0) >= DEVICE_ROWS for e in xs)
    base = DEVICE_ROWS if on_dev else 0
    xs = [e for e in xs if (e.get("tid", 0) >= DEVICE_ROWS) == on_dev
          and (a.stage is None or e.get("tid") == base + a.stage)]
    layers = [e for e in xs if e.get("cat") == "layer"]
    if not layers:
        sys.exit(f"trace-layers: {a.trace}: no layer slices (a trace from before they existed?)")
    keep = set(sorted({e["args"]["step"] for e in layers})[-a.steps:])
    tot, calls = collections.Counter(), collections.Counter()
    for e in layers:
        if e["args"]["step"] in keep:
            k = (e["args"]["type"] if a.by == "type" else e["name"], e["args"]["pass"])
            tot[k] += e["dur"]
            calls[k] += 1
    acts = sum(e["dur"] for e in xs if e.get("cat") in ("forward", "recompute", "backward")
               and e["args"]["step"] in keep)
    n = len(keep)
    print(f"{a.trace}: last {n} step(s){'' if a.stage is None else f', stage {a.stage}'}"
          f"{', device time' if on_dev else ''}: "
          f"actions {acts / n / 1e3:.2f} ms/step, layers {sum(tot.values()) / n / 1e3:.2f} ms/step")
    width = max(len(k[0]) for k in tot)
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f"  {k[0]:<{width}}  {k[1]:<9}  {v / n / 1e3:9.3f} ms/step  "
              f"{calls[k] / n:7g} calls  {v / calls[k]:9.1f} us/call")


if __name__ == "__main__":
    main()
