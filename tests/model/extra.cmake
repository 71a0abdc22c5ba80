# The model tests run OpenMP loops; on a shared CI machine (ctest -j2 on 2 cores) spinning
# OpenMP workers steal the time slices of the threads they wait for, so they wait passively.
foreach(t test_model test_layers test_gradcheck test_golden)
  if(TEST model.${t})
    set_tests_properties(model.${t} PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endif()
endforeach()
