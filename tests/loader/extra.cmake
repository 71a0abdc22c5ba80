# Loader tests that run the CLI: the demo scenario (quick) and a shell test of the service
# (serve, fetch, kill -9, restart from the saved state, control messages, bad input).
add_test(NAME loader.demo_quick
         COMMAND $<TARGET_FILE:llmsys> demo --quick --workdir ${CMAKE_BINARY_DIR}/test-loader-demo loader)
add_test(NAME loader.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/loader/cli.sh $<TARGET_FILE:llmsys>)
set_tests_properties(loader.demo_quick PROPERTIES TIMEOUT 60 LABELS loader)
# ~12 s in release; several times that under ASan on a loaded machine
set_tests_properties(loader.cli PROPERTIES TIMEOUT 150 LABELS loader)
# train --ranks 2 --loader under mpirun (MPI tests run without leak checks, see COMMON.md)
add_test(NAME loader.mpi COMMAND ${CMAKE_SOURCE_DIR}/tests/loader/mpi.sh $<TARGET_FILE:llmsys>)
set_tests_properties(loader.mpi PROPERTIES TIMEOUT 90 LABELS loader ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0"
                     SKIP_RETURN_CODE 77)
