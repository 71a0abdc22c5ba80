# io: hostile input files through every loader of the CLI (a FIFO, a crafted header, a stripped checksum).
add_test(NAME io.cli_inputs COMMAND ${CMAKE_SOURCE_DIR}/tests/io/cli_inputs.sh $<TARGET_FILE:llmsys>)
set_tests_properties(io.cli_inputs PROPERTIES TIMEOUT 120 LABELS io ENVIRONMENT "LLMSYS_PROGRESS=0")
