# Sourced before mpirun (srcdir set): Open MPI's switches for root; under AddressSanitizer the
# MPI library's own leaks suppressed (none of gpipe's), its plugins kept loaded and stacks
# unwound in full, so that their frames have names.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS=suppressions=$srcdir/tests/mpi/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
