# The model tests run OpenMP loops; on a shared CI machine (ctest -j2 on 2 cores) spinning
# OpenMP workers steal the time slices of the threads they wait for, so they wait passively.
foreach(t test_model test_layers test_gradcheck test_golden)
  if(TEST model.${t})
    set_tests_properties(model.${t} PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endif()
endforeach()

# The int8 GEMM without VNNI (oneDNN's kernels that add pairs of u8 x s8 products in int16, fed a
# 7-bit op(B)) on every machine: test_precision again with oneDNN held to AVX2 and to SSE4.1.
# On a CPU without VNNI the plain run takes that path too.
foreach(isa AVX2 SSE41)
  string(TOLOWER ${isa} lower)
  add_test(NAME model.test_precision_${lower} COMMAND model_test_precision WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(model.test_precision_${lower} PROPERTIES TIMEOUT ${LS_TEST_TIMEOUT} LABELS model
                       ENVIRONMENT "DNNL_MAX_CPU_ISA=${isa}")
endforeach()
