# Operating a run (issue 16): utilisation watchdog, budget stop, node-local staging (src/train/watchdog.*,
# budget.*, stage.*). Unit tests: ht_unit_tests [watchdog], [budget], [stage].
foreach(t watchdog budget stage)
  ht_add_script_test(runops_${t} runops/test_runops.py ARGS ${t} LABELS runops TIMEOUT 300)
endforeach()
