#!/usr/bin/env python3
"""The include rules of docs/design.md, checked on the source tree: core/ includes nothing
from cli/, data/ or layers/; layers/ nothing from cli/ or data/; data/ nothing from cli/ or
layers/. Also: no C, header or CUDA file in cli/, core/, data/ or layers/ over 800 lines, none
in cli/ over 600. Prints each breach as file:line and exits 1 if there is one.
Usage: check-includes.py [ROOT] (default: the repository this script is in)."""
import os
import re
import sys

FORBIDDEN = {"core": ("cli", "data", "layers"), "layers": ("cli", "data"), "data": ("cli", "layers")}
LIMIT = {"cli": 600, "core": 800, "data": 800, "layers": 800}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check(root):
    breaches = []
    for top in LIMIT:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                if len(lines) > LIMIT[top]:
                    breaches.append(f"{rel}: {len(lines)} lines, over {LIMIT[top]}")
                for i, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1).split("/")[0] in FORBIDDEN.get(top, ()):
                        breaches.append(f"{rel}:{i}: {top}/ includes {m.group(1)}")
    return breaches


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    breaches = check(root)
    for b in breaches:
        print(b)
    print(f"{0 if breaches else 1} passed, {1 if breaches else 0} failed")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
