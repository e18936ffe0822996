#!/usr/bin/env bash
# scripts/uneven-cores.py (docs/bench.md, "Unequal cores"): the command's newest thread runs on
# the slow CPU and every other thread on the fast one, the hog shares the slow CPU while the
# command runs and is gone after, and the command's exit status is the script's.
set -uo pipefail
src=$1
if ! taskset -c 0,1 true 2>/dev/null || ! command -v cc >/dev/null; then
  echo "skip: needs CPUs 0 and 1 and a C compiler"
  exit 77
fi
fail=0
probe='
import os, subprocess, threading, time
seen = {}
def helper():
    time.sleep(0.5)  # the script pins every 10 ms
    seen["helper"] = sorted(os.sched_getaffinity(0))
    seen["hogs"] = subprocess.run(["pgrep", "-x", "hog"], capture_output=True,
                                  text=True).stdout.split()
t = threading.Thread(target=helper)
t.start()
t.join()
print("main", sorted(os.sched_getaffinity(0)), "helper", seen["helper"], "hogs", len(seen["hogs"]))
raise SystemExit(3)'
out=$(python3 "$src/scripts/uneven-cores.py" -- python3 -c "$probe")
rc=$?
echo "$out"
[ "$out" = "main [0] helper [1] hogs 1" ] || { echo "FAIL: threads placed as '$out'"; fail=1; }
[ $rc = 3 ] || { echo "FAIL: exit status $rc, the command's was 3"; fail=1; }
if pgrep -x hog >/dev/null; then echo "FAIL: the hog outlived the command"; fail=1; fi
out=$(python3 "$src/scripts/uneven-cores.py" --cpus 1,0 -- python3 -c "$probe")
[ "$out" = "main [1] helper [0] hogs 1" ] || { echo "FAIL: --cpus 1,0 placed '$out'"; fail=1; }
python3 "$src/scripts/uneven-cores.py" >/dev/null 2>&1
[ $? = 2 ] || { echo "FAIL: no command is not a usage error"; fail=1; }
[ $fail = 0 ] && echo "uneven-cores: ok"
exit $fail
