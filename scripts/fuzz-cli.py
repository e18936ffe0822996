#!/usr/bin/env python3
"""Every number of the model files, replaced in turn by awkward values, through one of the
programs: each run must succeed or fail with one line and exit status 1-3, never crash, hang,
trip a sanitizer or print more (the spec loader's own fuzzer, tests/spec/fuzz_spec.c, stops at
loading; this one goes through shapes, costs, the split and, with gpipe-train, a step).

    scripts/fuzz-cli.py BUILD/cli/gpipe-partition -- --stages 2
    scripts/fuzz-cli.py BUILD/cli/gpipe-train --models models/fashion-cnn.yaml \\
        --values 0,-1,3,65536,0.5,x -- --data synthetic --steps 1 --batch-size 4 --stages 2 \\
        --micro-batches 2 --threads 1 --quiet --eval-every 1000000

Use a sanitizer build (meson setup build-asan -Db_sanitize=address,undefined). Prints each
problem with the file, line, value and the program's output, then the counts; exit 1 if any.
A run past --timeout is listed too: a huge value may be honest work (a 65536-wide image takes
gpipe-train a minute), so read those."""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

NUM = re.compile(r"(?<![\w.])-?\d+(\.\d+)?([eE]-?\d+)?(?![\w.])")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program")
    ap.add_argument("--models",
                    help="comma-separated files (default models/*.yaml bench/models/*.yaml)")
    ap.add_argument("--values", default="0,-1,1,3,65536,2147483648,1e9,0.5,nan,-0.0,x")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds a run (default 20)")
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.args = argv[cut + 1:]  # the program's flags
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = (a.models.split(",") if a.models else
             sorted(glob.glob(f"{root}/models/*.yaml") + glob.glob(f"{root}/bench/models/*.yaml")))
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    runs = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        mutant = os.path.join(tmp, "m.yaml")
        for path in files:
            lines = open(path).read().split("\n")
            for li, line in enumerate(lines):
                code = line.split("#")[0]
                for m in NUM.finditer(code):
                    for v in a.values.split(","):
                        new = line[: m.start()] + v + line[m.end():]
                        text = lines[:li] + [new] + lines[li + 1:]
                        with open(mutant, "w") as f:
                            f.write("\n".join(text))
                        runs += 1
                        try:
                            p = subprocess.run([a.program, mutant] + a.args, capture_output=True,
                                               text=True, timeout=a.timeout, env=env)
                            rc, err = p.returncode, p.stderr
                        except subprocess.TimeoutExpired:
                            rc, err = "timeout", ""
                        said = [x for x in err.strip().split("\n") if x]
                        what = None
                        if rc == "timeout" or rc < 0 or rc > 3:
                            what = f"exit {rc}"
                        elif "Sanitizer" in err or "runtime error" in err:
                            what = "sanitizer"
                        elif rc != 0 and len(said) != 1:
                            what = f"{len(said)} lines"
                        if what:
                            bad += 1
                            print(f"{what}: {os.path.relpath(path, root)}:{li + 1}: "
                                  f"{line.strip()!r} with {v}", flush=True)
                            for x in said[:8]:
                                print(f"    {x}", flush=True)
    print(f"{runs} runs, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
