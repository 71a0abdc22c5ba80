# Multi-process serving test: a helper binary (not test_*.c: it needs the llmsys path).
add_executable(mp_serve ${CMAKE_CURRENT_LIST_DIR}/mp_serve.c)
target_include_directories(mp_serve PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(mp_serve PRIVATE llmsys_lib)
add_test(NAME serve.pipeline COMMAND mp_serve $<TARGET_FILE:llmsys>)
set_tests_properties(serve.pipeline PROPERTIES TIMEOUT 90 LABELS serve)
