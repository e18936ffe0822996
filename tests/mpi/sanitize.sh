# Sourced before mpirun (srcdir set): Open MPI's switches for root; under AddressSanitizer the
# MPI library's own leaks suppressed (none of gpipe's), its plugins kept loaded and stacks
# unwound in full, so that their frames have names. MALLOC_PERTURB_ (meson sets one per test)
# goes to the ranks alone: Open MPI 4.1's mpirun reads memory it freed when a rank aborts
# (pmix_server_log_fn -> orte_rml_oob_send_buffer_nb), which the perturbed bytes turned into
# a segfault of mpirun itself, exit 139, in about one run of ten of the NaN test.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS=suppressions=$srcdir/tests/mpi/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
if [ -n "${MALLOC_PERTURB_:-}" ]; then
  export OMPI_MCA_mca_base_env_list="MALLOC_PERTURB_=$MALLOC_PERTURB_${OMPI_MCA_mca_base_env_list:+;$OMPI_MCA_mca_base_env_list}"
  unset MALLOC_PERTURB_
fi
