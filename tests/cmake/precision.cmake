# Mixed precision on the CPU (docs/precision.md): bf16 against fp32, exact resume, refusals; the
# quickstart accuracy in bf16 is long (2 epochs of real Fashion-MNIST) and has its own label.
foreach(t loss_curve exact_resume cpu_refusals)
  ht_add_script_test(precision_${t} precision/precision_tests.py ARGS ${t} LABELS precision TIMEOUT 900)
endforeach()
ht_add_script_test(precision_quickstart precision/precision_tests.py ARGS quickstart LABELS precision_long TIMEOUT 1200)
