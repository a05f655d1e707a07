# hpctrain report (scripts/report.py, src/cli/cmd_report.cpp; docs/report.md): a real 2-rank run
# preempted, crashed and resumed, NVML fields and watchdog warnings faked into copies, two runs
# overlaid, a live run, bad run directories, matplotlib missing. About 90 s on a loaded 2-core machine.
ht_add_script_test(report_np2 report/test_report.py LABELS report TIMEOUT 300)
