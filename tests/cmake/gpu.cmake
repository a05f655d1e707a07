# GPU tests (tests/gpu/*.cpp): built only with the CUDA backend. Each entry exits 77 (reported as
# skipped) when no GPU is usable, so `ctest -L gpu` is safe on any machine.
if(HT_HAVE_CUDA)
  file(GLOB HT_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/*.cpp)
  add_executable(ht_gpu_tests ${HT_GPU_TESTS})
  target_link_libraries(ht_gpu_tests PRIVATE hpctrain_core Catch2::Catch2)
  foreach(area ops nccl lowp)
    add_test(NAME gpu_${area} COMMAND $<TARGET_FILE:ht_gpu_tests> "[gpu_${area}]")
    set_tests_properties(gpu_${area} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "${HT_MPI_TEST_ENV}")
  endforeach()
  # NCCL init time limit (a peer that never arrives): about 3 s when it works; a hang in ncclCommAbort
  # costs at most this TIMEOUT of the device check's budget.
  add_test(NAME gpu_nccl_timeout COMMAND $<TARGET_FILE:ht_gpu_tests> "[gpu_nccl_timeout]")
  set_tests_properties(gpu_nccl_timeout PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 30
                       ENVIRONMENT "${HT_MPI_TEST_ENV}")
endif()

# Two ranks on the single GPU of the verification machine (refused, then shared through MPI). The
# other gpu_train.py checks are registered in train.cmake.
ht_add_script_test(gpu_train_shared_gpu gpu/gpu_train.py ARGS shared_gpu LABELS gpu TIMEOUT 300)
# Mixed precision training on the GPU against fp32 on the GPU (issue 13; tolerances in gpu_train.py).
foreach(t bf16 fp16)
  ht_add_script_test(gpu_train_${t} gpu/gpu_train.py ARGS ${t} LABELS gpu TIMEOUT 300)
endforeach()
