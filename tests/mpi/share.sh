#!/usr/bin/env bash
# tests/mpi/test_share.c under mpirun -np 4: the bootstrap shares of NCCL's ids. Usage:
# share.sh TEST_SHARE SRCDIR
set -u
bin=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
timeout 120 "${mpi[@]}" -np 4 "$bin" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] && [ "$(grep -c " 0 failed" "$tmp/out")" = 4 ]
