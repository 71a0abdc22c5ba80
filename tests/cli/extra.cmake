# Cross-module CLI checks.
add_test(NAME cli.eval_quant COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/eval_quant.sh $<TARGET_FILE:llmsys>)
set_tests_properties(cli.eval_quant PROPERTIES TIMEOUT 60 LABELS cli)
add_test(NAME cli.args COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/args.sh $<TARGET_FILE:llmsys>)
set_tests_properties(cli.args PROPERTIES TIMEOUT 120 LABELS cli)
add_test(NAME cli.docs_commands COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/docs_commands.sh $<TARGET_FILE:llmsys> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli.docs_commands PROPERTIES TIMEOUT 120 LABELS cli)
# Hostile files and values through the commands (audit): exit 2 or 1 by the README rule, one line, nothing written.
add_test(NAME cli.inputs COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/inputs.sh $<TARGET_FILE:llmsys>)
set_tests_properties(cli.inputs PROPERTIES TIMEOUT 600 LABELS cli ENVIRONMENT "LLMSYS_PROGRESS=0")
