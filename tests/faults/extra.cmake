# Fault injection, one script per kind of process (kill -9 and SIGSTOP, the expected outcome
# asserted): serve front and stages (plus slow-client floods), the loader service, a rank of
# train --ranks 2 (MPI: without leak checks, see COMMON.md).
foreach(kind serve loader train)
  add_test(NAME faults.${kind} COMMAND ${CMAKE_CURRENT_LIST_DIR}/${kind}.sh $<TARGET_FILE:llmsys>)
  set_tests_properties(faults.${kind} PROPERTIES TIMEOUT 120 LABELS faults SKIP_RETURN_CODE 77)
endforeach()
# faults.serve takes 36-47 s alone and 95 s on a loaded machine: it gets more room
set_tests_properties(faults.serve PROPERTIES TIMEOUT 240)
set_tests_properties(faults.train PROPERTIES ENVIRONMENT
  "ASAN_OPTIONS=detect_leaks=0;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
