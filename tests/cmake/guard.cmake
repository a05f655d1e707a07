# The collective guard's audit (tests/guard/): hpctrain built a second time with an MPI profiling
# layer that reports every blocking MPI call made outside a CollectiveWait scope. Exported symbols
# (-rdynamic) give the report's stacks their function names. Budget: about 40 s.
add_executable(hpctrain_guard_audit ${PROJECT_SOURCE_DIR}/src/cli/main.cpp guard/mpi_guard_audit.cpp)
target_link_libraries(hpctrain_guard_audit PRIVATE hpctrain_core)
set_target_properties(hpctrain_guard_audit PROPERTIES ENABLE_EXPORTS ON)
ht_add_script_test(guard_audit guard/test_guard_audit.sh LABELS mpi TIMEOUT 300)
set_property(TEST guard_audit APPEND PROPERTY ENVIRONMENT "HT_GUARD_AUDIT_BIN=$<TARGET_FILE:hpctrain_guard_audit>")
