# Mixed precision on the CPU (docs/precision.md): bf16 against fp32, exact resume, refusals; the
# quickstart accuracy in bf16 is long (2 epochs of real Fashion-MNIST) and has its own label.
foreach(t loss_curve exact_resume elastic cpu_refusals)
  ht_add_script_test(bf16_cpu_${t} train/bf16_cpu_tests.py ARGS ${t} LABELS bf16_cpu TIMEOUT 900)
endforeach()
ht_add_script_test(bf16_cpu_quickstart train/bf16_cpu_tests.py ARGS quickstart LABELS bf16_cpu_long TIMEOUT 1200)
