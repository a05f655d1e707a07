# GPU tests (tests/gpu/*.cpp): built only with the CUDA backend. Each entry exits 77 (reported as
# skipped) when no GPU is usable, so `ctest -L gpu` is safe on any machine.
if(HT_HAVE_CUDA)
  file(GLOB HT_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/*.cpp)
  add_executable(ht_gpu_tests ${HT_GPU_TESTS})
  target_link_libraries(ht_gpu_tests PRIVATE hpctrain_core Catch2::Catch2)
  # One ctest entry per area, each its own process: a sticky CUDA error (an illegal address in one
  # case) fails only the cases of its area, and the others still say how their ops stand. Every test
  # case belongs to exactly one area (gpu_test_areas checks it from the test list, without a GPU);
  # scripts/device_check.sh runs them one by one under their own time limits.
  set(HT_GPU_TEST_AREAS
      "ops_conv2d=[gpu_ops][conv2d]" "ops_linear=[gpu_ops][linear]~[conv2d]" "ops_batchnorm=[gpu_ops][batchnorm]"
      "ops_pool=[gpu_ops][pool]" "ops_elementwise=[gpu_ops][elementwise]" "ops_sgd=[gpu_ops][sgd]"
      "ops_softmax_xent=[gpu_ops][softmax_xent]" "ops_allocator=[gpu_ops][allocator]"
      "lowp_conv2d=[gpu_lowp][conv2d]" "lowp_linear=[gpu_lowp][linear]" "lowp_batchnorm=[gpu_lowp][batchnorm]"
      "lowp_pool=[gpu_lowp][pool]" "lowp_elementwise=[gpu_lowp][elementwise]" "lowp_convert=[gpu_lowp][convert]"
      "lowp_nccl=[gpu_lowp][nccl]" "nccl=[gpu_nccl]")
  foreach(entry ${HT_GPU_TEST_AREAS})
    string(REGEX REPLACE "=.*" "" area "${entry}")
    string(REGEX REPLACE "^[^=]*=" "" spec "${entry}")
    add_test(NAME gpu_${area} COMMAND $<TARGET_FILE:ht_gpu_tests> "${spec}")
    set_tests_properties(gpu_${area} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "${HT_MPI_TEST_ENV}")
  endforeach()
  # No GPU needed: every test case is in exactly one area (nccl_timeout included), and
  # scripts/device_check.sh expects exactly the gpu-labelled tests ctest has.
  add_test(NAME gpu_test_areas
           COMMAND ${HT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/check_gpu_areas.py $<TARGET_FILE:ht_gpu_tests>
                   ${PROJECT_SOURCE_DIR}/scripts/device_check.sh "${CMAKE_CTEST_COMMAND}" ${HT_GPU_TEST_AREAS}
                   "nccl_timeout=[gpu_nccl_timeout]")
  set_tests_properties(gpu_test_areas PROPERTIES LABELS unit TIMEOUT 60)
  # NCCL init time limit (a peer that never arrives): about 3 s when it works; a hang in ncclCommAbort
  # costs at most this TIMEOUT of the device check's budget.
  add_test(NAME gpu_nccl_timeout COMMAND $<TARGET_FILE:ht_gpu_tests> "[gpu_nccl_timeout]")
  set_tests_properties(gpu_nccl_timeout PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 30
                       ENVIRONMENT "${HT_MPI_TEST_ENV}")
endif()

# Two ranks on the single GPU of the verification machine (refused, then shared through MPI). The
# other gpu_train.py checks are registered in train.cmake.
ht_add_script_test(gpu_train_shared_gpu gpu/gpu_train.py ARGS shared_gpu LABELS gpu TIMEOUT 300)
# Mixed precision training on the GPU against fp32 on the GPU (issue 13; tolerances in gpu_train.py),
# the fp16 scaler backing off from 2^24, and evaluation in bf16.
foreach(t bf16 fp16 fp16_overflow evaluation_bf16)
  ht_add_script_test(gpu_train_${t} gpu/gpu_train.py ARGS ${t} LABELS gpu TIMEOUT 300)
endforeach()
