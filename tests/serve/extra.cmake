# Multi-process serving test: a helper binary (not test_*.c: it needs the llmsys path).
add_executable(mp_serve ${CMAKE_CURRENT_LIST_DIR}/mp_serve.c)
target_include_directories(mp_serve PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(mp_serve PRIVATE llmsys_lib)
add_test(NAME serve.pipeline COMMAND mp_serve $<TARGET_FILE:llmsys>)
set_tests_properties(serve.pipeline PROPERTIES TIMEOUT 90 LABELS serve)
# The serve demo scenario, reduced (trains a tiny model when no core model exists).
add_test(NAME serve.demo COMMAND llmsys demo --quick --workdir ${CMAKE_BINARY_DIR}/test-demo-serve serve)
set_tests_properties(serve.demo PROPERTIES TIMEOUT 60 LABELS serve)
# OpenAI-compatible endpoints (models, chat, served name), shapes checked field by field.
add_executable(mp_openai ${CMAKE_CURRENT_LIST_DIR}/mp_openai.c)
target_include_directories(mp_openai PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(mp_openai PRIVATE llmsys_lib m)
add_test(NAME serve.openai COMMAND mp_openai $<TARGET_FILE:llmsys>)
set_tests_properties(serve.openai PROPERTIES TIMEOUT 60 LABELS serve)
