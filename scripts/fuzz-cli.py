#!/usr/bin/env python3
"""Every number of the model files, replaced in turn by awkward values (or, with --structure,
every line deleted or doubled and every `type:` swapped for each other type), through one of the
programs: each run must succeed or fail with one line and exit status 1-3, never crash, hang,
trip a sanitizer or print more (the spec loader's own fuzzer, tests/spec/fuzz_spec.c, stops at
loading; this one goes through shapes, costs, the split and, with gpipe-train, a step).

    scripts/fuzz-cli.py BUILD/cli/gpipe-partition -- --stages 2
    scripts/fuzz-cli.py --structure BUILD/cli/gpipe-partition -- --stages 2
    scripts/fuzz-cli.py BUILD/cli/gpipe-train --models models/fashion-cnn.yaml \\
        --values 0,-1,3,65536,0.5,x -- --data synthetic --steps 1 --batch-size 4 --stages 2 \\
        --micro-batches 2 --threads 1 --quiet --eval-every 1000000

Use a sanitizer build (meson setup build-asan -Db_sanitize=address,undefined). Prints each
problem with the file, line, mutation and the program's output, then the counts; exit 1 if any.
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
TYPE = re.compile(r"\btype: *([A-Za-z_0-9]+)")


def number_mutants(lines, values):
    """(line index, what, text): each number replaced by each value."""
    for li, line in enumerate(lines):
        for m in NUM.finditer(line.split("#")[0]):
            for v in values:
                yield li, f"with {v}", lines[:li] + [line[: m.start()] + v + line[m.end():]] + \
                    lines[li + 1:]


def structure_mutants(lines, types):
    """Each line deleted, each line doubled, each type: swapped for each other type."""
    for li, line in enumerate(lines):
        if not line.strip():
            continue
        yield li, "deleted", lines[:li] + lines[li + 1:]
        yield li, "doubled", lines[:li + 1] + lines[li:]
        for m in TYPE.finditer(line.split("#")[0]):
            for t in types:
                if t != m.group(1):
                    yield li, f"as {t}", lines[:li] + \
                        [line[: m.start(1)] + t + line[m.end(1):]] + lines[li + 1:]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program")
    ap.add_argument("--models",
                    help="comma-separated files (default models/*.yaml bench/models/*.yaml)")
    ap.add_argument("--values", default="0,-1,1,3,65536,2147483648,1e9,0.5,nan,-0.0,x")
    ap.add_argument("--structure", action="store_true",
                    help="delete and double lines and swap layer types instead of numbers")
    ap.add_argument("--every", type=int, default=1,
                    help="run every N-th mutant only (a sample, the same each time)")
    ap.add_argument("--types", help="with --structure, the types to swap in (default: every "
                    "type the model files name)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds a run (default 20)")
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.args = argv[cut + 1:]  # the program's flags
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = sorted(glob.glob(f"{root}/models/*.yaml") + glob.glob(f"{root}/bench/models/*.yaml"))
    files = a.models.split(",") if a.models else ours
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    runs = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        mutant = os.path.join(tmp, "m.yaml")
        texts = {path: open(path).read().split("\n") for path in files}
        types = sorted({m.group(1) for path in set(ours + files) for x in open(path)
                        for m in TYPE.finditer(x.split("#")[0])})  # every model's types
        if a.types:
            types = a.types.split(",")
        for path, lines in texts.items():
            mutants = (structure_mutants(lines, types) if a.structure else
                       number_mutants(lines, a.values.split(",")))
            for i, (li, how, text) in enumerate(mutants):
                if i % a.every:
                    continue
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
                          f"{lines[li].strip()!r} {how}", flush=True)
                    for x in said[:8]:
                        print(f"    {x}", flush=True)
    print(f"{runs} runs, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
