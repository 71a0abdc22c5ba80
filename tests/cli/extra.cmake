# Cross-module CLI checks.
add_test(NAME cli.eval_quant COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/eval_quant.sh $<TARGET_FILE:llmsys>)
set_tests_properties(cli.eval_quant PROPERTIES TIMEOUT 60 LABELS cli)
