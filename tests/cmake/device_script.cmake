# scripts/device_check.sh (the prepared GPU-machine run) on its CPU path: environment set-up,
# mpirun start, doctor, JSON and table, reusing this build (a few seconds; no GPU, no build).
ht_add_script_test(device_check_cpu device/test_device_check.sh LABELS device_script TIMEOUT 120)
