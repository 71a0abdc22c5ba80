# io: hostile input files through every loader of the CLI (a FIFO, a crafted header, a stripped checksum).
add_test(NAME io.cli_inputs COMMAND ${CMAKE_SOURCE_DIR}/tests/io/cli_inputs.sh $<TARGET_FILE:llmsys>)
set_tests_properties(io.cli_inputs PROPERTIES TIMEOUT 120 LABELS io ENVIRONMENT "LLMSYS_PROGRESS=0")
# CURVE on ZeroMQ links (llmsys keys, --keys, --curve): the loader service from the CLI and a
# 2-stage serve pipeline; keyed clients served identically, strangers refused and logged.
add_test(NAME io.curve_loader COMMAND ${CMAKE_SOURCE_DIR}/tests/io/curve.sh $<TARGET_FILE:llmsys>)
set_tests_properties(io.curve_loader PROPERTIES TIMEOUT 60 LABELS io ENVIRONMENT "LLMSYS_PROGRESS=0")
add_executable(mp_curve ${CMAKE_CURRENT_LIST_DIR}/mp_curve.c)
target_include_directories(mp_curve PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(mp_curve PRIVATE llmsys_lib)
add_test(NAME io.curve_serve COMMAND mp_curve $<TARGET_FILE:llmsys>)
set_tests_properties(io.curve_serve PROPERTIES TIMEOUT 60 LABELS io)
