# Memory bounds under a memory cgroup (root only; skipped elsewhere).
add_test(NAME core.memlimit COMMAND ${CMAKE_SOURCE_DIR}/tests/core/memlimit.sh $<TARGET_FILE:llmsys>)
set_tests_properties(core.memlimit PROPERTIES TIMEOUT 30 LABELS core SKIP_RETURN_CODE 77)
