# Operating a run (issue 16): utilisation watchdog, budget stop, node-local staging (src/train/watchdog.*,
# budget.*, stage.*). Unit tests: ht_unit_tests [watchdog], [budget], [stage].
foreach(t watchdog budget stage)  # label runops (in scripts/test.sh: about 2 min)
  ht_add_script_test(runops_${t} runops/test_runops.py ARGS ${t} LABELS runops TIMEOUT 300)
endforeach()
# Staging on the simulated 2-node cluster (tests/cluster/, issue 14): one copy per node, same losses.
# Skipped (77) where the cluster scripts or namespaces are missing. Not in scripts/test.sh (label multinode).
ht_add_script_test(multinode_stage runops/test_stage_multinode.sh LABELS multinode TIMEOUT 250)
set_tests_properties(multinode_stage PROPERTIES RESOURCE_LOCK ht_cluster)
