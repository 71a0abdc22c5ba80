# The quant tests again with the SIMD level forced down to AVX2 (LLMSYS_ISA), so the AVX2
# decode kernels and the AVX2 integer prefill GEMM are checked as the default on a machine
# whose CPU has AVX-512 too.
add_test(NAME quant.test_quant_avx2 COMMAND quant_test_quant WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(quant.test_quant_avx2 PROPERTIES TIMEOUT ${LS_TEST_TIMEOUT} LABELS quant ENVIRONMENT "LLMSYS_ISA=avx2")
