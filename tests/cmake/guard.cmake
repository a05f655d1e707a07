# The collective guard's audit (tests/guard/): hpctrain built a second time with an MPI profiling
# layer that reports every blocking MPI call made outside a CollectiveWait scope. Exported symbols
# (-rdynamic) give the report's stacks their function names. Budget: about 40 s.
add_executable(hpctrain_guard_audit ${PROJECT_SOURCE_DIR}/src/cli/main.cpp guard/mpi_guard_audit.cpp)
target_link_libraries(hpctrain_guard_audit PRIVATE hpctrain_core)
set_target_properties(hpctrain_guard_audit PROPERTIES ENABLE_EXPORTS ON)
ht_add_script_test(guard_audit guard/test_guard_audit.sh LABELS mpi TIMEOUT 300)
set_property(TEST guard_audit APPEND PROPERTY ENVIRONMENT "HT_GUARD_AUDIT_BIN=$<TARGET_FILE:hpctrain_guard_audit>")
# The GPU build's own MPI calls (mpi/gpu/), which guard_audit cannot reach without a GPU: each one
# inside a CollectiveWait, read from the source (no build, no GPU).
add_test(NAME guard_gpu_mpi_calls COMMAND ${HT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/guard/check_gpu_mpi_calls.py
         ${PROJECT_SOURCE_DIR})
set_tests_properties(guard_gpu_mpi_calls PROPERTIES LABELS "unit;mpi" TIMEOUT 60)
