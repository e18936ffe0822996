# Sourced by the mpi suite's scripts, after train=$1 srcdir=$2: skips (77) without mpirun; Open
# MPI's switches for root and for more processes than cores, TCP between processes (as between
# hosts) in "${mpi[@]}"; under AddressSanitizer the MPI library's own leaks suppressed (none of
# gpipe's), its plugins kept loaded and stacks unwound in full so that their frames have names;
# a temporary folder $tmp (kept when KEEP names one); ok / bad counters and finish.
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS=suppressions=$srcdir/tests/mpi/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
mpi=(mpirun --oversubscribe --mca btl tcp,self)
tmp=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; }
