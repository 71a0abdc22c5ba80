# train: CLI behaviour (bad input, determinism, resume), MPI data parallelism, and the
# quick core demo. The MPI test needs Open MPI's mpirun; as root it must be allowed
# explicitly, and ASan's leak check is off there (Open MPI keeps allocations at exit).
add_executable(ckpt_cmp ${CMAKE_SOURCE_DIR}/tests/train/ckpt_cmp.c)
target_link_libraries(ckpt_cmp PRIVATE llmsys_lib)
add_executable(mpi_mask ${CMAKE_SOURCE_DIR}/tests/train/mpi_mask.c)
target_link_libraries(mpi_mask PRIVATE llmsys_lib)
add_executable(mpi_agree ${CMAKE_SOURCE_DIR}/tests/train/mpi_agree.c)
target_link_libraries(mpi_agree PRIVATE llmsys_lib)

add_test(NAME train.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/train/cli.sh $<TARGET_FILE:llmsys>)
add_test(NAME train.mpi COMMAND ${CMAKE_SOURCE_DIR}/tests/train/mpi.sh $<TARGET_FILE:llmsys> $<TARGET_FILE:ckpt_cmp> $<TARGET_FILE:mpi_mask> $<TARGET_FILE:mpi_agree>)
add_test(NAME train.demo_quick COMMAND ${CMAKE_SOURCE_DIR}/tests/train/demo_quick.sh $<TARGET_FILE:llmsys>)
set_tests_properties(train.cli train.demo_quick PROPERTIES TIMEOUT 120 LABELS train)
set_tests_properties(train.mpi PROPERTIES TIMEOUT 120 LABELS train
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
