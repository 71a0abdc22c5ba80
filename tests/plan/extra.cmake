# The plan CLI end to end (exit codes, files) and the quick demo scenario.
add_test(NAME plan.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/plan/cli.sh $<TARGET_FILE:llmsys>)
set_tests_properties(plan.cli PROPERTIES TIMEOUT 60 LABELS plan)
add_test(NAME plan.demo COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:llmsys> demo --quick --workdir $d plan; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(plan.demo PROPERTIES TIMEOUT 60 LABELS plan)
# Closing the loop, reduced: tiny model, 2 CPU stages, one timed batch. Checks the whole
# chain (profile -> cluster -> plan -> llmsys serve -> HTTP load -> report) works; the
# prediction error itself is measured by `llmsys plan validate` at full size (docs/plan.md).
add_test(NAME plan.validate COMMAND ${CMAKE_SOURCE_DIR}/tests/plan/validate.sh $<TARGET_FILE:llmsys>)
set_tests_properties(plan.validate PROPERTIES TIMEOUT 60 LABELS plan)
# Training precision plans (QSync): plan train, bad input, a 2-rank run with a mixed plan
# and a throttled rank, bit-reproducible.
add_executable(mpi_indicator ${CMAKE_SOURCE_DIR}/tests/plan/mpi_indicator.c)
target_link_libraries(mpi_indicator PRIVATE llmsys_lib)
add_test(NAME plan.qsync COMMAND ${CMAKE_SOURCE_DIR}/tests/plan/qsync.sh $<TARGET_FILE:llmsys> $<TARGET_FILE:mpi_indicator>)
set_tests_properties(plan.qsync PROPERTIES TIMEOUT 240 LABELS plan
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
add_test(NAME plan.demo_qsync COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:llmsys> demo --quick --workdir $d qsync; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(plan.demo_qsync PROPERTIES TIMEOUT 120 LABELS plan
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
# The planner's cost model against the H200 layer profiles of data/profiles (bench_costmodel).
add_test(NAME plan.costmodel COMMAND ${CMAKE_SOURCE_DIR}/tests/plan/costmodel.sh $<TARGET_FILE:llmsys> $<TARGET_FILE:bench_costmodel>)
set_tests_properties(plan.costmodel PROPERTIES TIMEOUT 60 LABELS plan)
