# The tokenizer against independent implementations (Node.js oracles; skipped without them).
add_test(NAME text.oracle COMMAND ${CMAKE_SOURCE_DIR}/tests/text/oracle.sh $<TARGET_FILE:llmsys>)
set_tests_properties(text.oracle PROPERTIES TIMEOUT 120 LABELS text SKIP_RETURN_CODE 77)
# A BPE model through train, resume, eval, quantize, generate and serve (about 10 s).
add_test(NAME text.e2e COMMAND ${CMAKE_SOURCE_DIR}/tests/text/e2e.sh $<TARGET_FILE:llmsys>)
set_tests_properties(text.e2e PROPERTIES TIMEOUT 120 LABELS text SKIP_RETURN_CODE 77)
