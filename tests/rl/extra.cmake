# rl end to end: CLI and bad input, multi-process runs under faults, the quick demo.
add_test(NAME rl.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/rl/cli.sh $<TARGET_FILE:llmsys>)
set_tests_properties(rl.cli PROPERTIES TIMEOUT 90 LABELS rl)
add_test(NAME rl.faults COMMAND ${CMAKE_SOURCE_DIR}/tests/rl/faults.sh $<TARGET_FILE:llmsys>)
set_tests_properties(rl.faults PROPERTIES TIMEOUT 120 LABELS rl)
add_test(NAME rl.demo COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:llmsys> demo --quick --workdir $d rl; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(rl.demo PROPERTIES TIMEOUT 120 LABELS rl)
add_test(NAME rl.curve COMMAND ${CMAKE_SOURCE_DIR}/tests/rl/curve.sh $<TARGET_FILE:llmsys>)
set_tests_properties(rl.curve PROPERTIES TIMEOUT 150 LABELS rl ENVIRONMENT "LLMSYS_PROGRESS=0")
