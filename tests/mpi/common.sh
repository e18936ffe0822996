# Sourced by the mpi suite's scripts, after train=$1 srcdir=$2: skips (77) without mpirun; Open
# MPI's settings (sanitize.sh), more processes than cores and TCP between them (as between
# hosts) in "${mpi[@]}"; a temporary folder $tmp (kept when KEEP names one); ok / bad counters
# and finish.
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
. "$srcdir/tests/mpi/sanitize.sh"
mpi=(mpirun --oversubscribe --mca btl tcp,self)
tmp=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; }
