# robust: controller + agents + mpirun end to end (every fault kind recovered, bad input).
# Open MPI as root must be allowed explicitly; ASan's leak check is off for MPI runs.
add_test(NAME robust.faults COMMAND ${CMAKE_SOURCE_DIR}/tests/robust/faults.sh $<TARGET_FILE:llmsys>)
set_tests_properties(robust.faults PROPERTIES TIMEOUT 600 LABELS robust
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
add_test(NAME robust.demo_quick COMMAND $<TARGET_FILE:llmsys> demo robust --quick --workdir ${CMAKE_BINARY_DIR}/robust-demo-quick)
set_tests_properties(robust.demo_quick PROPERTIES TIMEOUT 120 LABELS robust
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
# forge_step: a step report sent to the controller as an agent would (limits.sh, stale report)
add_executable(robust_forge_step ${CMAKE_CURRENT_LIST_DIR}/forge_step.c)
target_include_directories(robust_forge_step PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(robust_forge_step PRIVATE llmsys_lib)
add_test(NAME robust.limits COMMAND ${CMAKE_SOURCE_DIR}/tests/robust/limits.sh $<TARGET_FILE:llmsys> $<TARGET_FILE:robust_forge_step>)
set_tests_properties(robust.limits PROPERTIES TIMEOUT 480 LABELS robust
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
