# The plan CLI end to end (exit codes, files) and the quick demo scenario.
add_test(NAME plan.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/plan/cli.sh $<TARGET_FILE:llmsys>)
set_tests_properties(plan.cli PROPERTIES TIMEOUT 60 LABELS plan)
add_test(NAME plan.demo COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:llmsys> demo --quick --workdir $d plan; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(plan.demo PROPERTIES TIMEOUT 60 LABELS plan)
