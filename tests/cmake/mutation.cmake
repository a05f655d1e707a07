# The mutation run (tests/mutation/, docs/testing.md#the-mutation-run): seeded mutants of real shards
# and checkpoints through inspect, training start and resume. Registered only in a sanitizer build
# (-DHT_SANITIZE=address,undefined, what scripts/mutation_run.sh configures), so the plain
# scripts/test.sh run never includes it; there: ctest -L mutation --output-on-failure.
if(HT_SANITIZE)
  add_test(NAME mutation_run COMMAND ${HT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mutation/run_mutation.py
           --bin $<TARGET_FILE:hpctrain> --mpiexec ${MPIEXEC_EXECUTABLE}
           --work ${CMAKE_BINARY_DIR}/mutation --summary ${CMAKE_BINARY_DIR}/mutation_summary.json
           --command "ctest -L mutation")
  set_tests_properties(mutation_run PROPERTIES TIMEOUT 2400 LABELS "mutation")
endif()
