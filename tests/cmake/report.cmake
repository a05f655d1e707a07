# hpctrain report (scripts/report.py, src/cli/cmd_report.cpp; docs/report.md): a real 2-rank run
# preempted, crashed and resumed, NVML fields and watchdog warnings faked into copies, two runs
# overlaid, a live run, bad run directories, matplotlib missing. About 40 s on 2 quiet cores, 2 min under a load of 12.
ht_add_script_test(report_np2 report/test_report.py LABELS report TIMEOUT 480)
# What the plots show (log ticks, smoothed loss, minimum eval spans, overlay axis, test-set note), from
# hand-written run directories; no MPI. About 20 s.
ht_add_script_test(report_plots report/test_report_plots.py LABELS report TIMEOUT 300)
