# Mixed precision through the hpctrain binary, CPU (issue 13): loss scaling (exactness, the agreed
# skip, resume) and the bf16 gradient wire. About 60 s in total on 2 cores.
foreach(t scale_exact scale_skip scale_resume grad_bf16)
  ht_add_script_test(precision_${t} precision/precision_tests.py ARGS ${t} LABELS train TIMEOUT 300)
endforeach()
# Low-precision checkpoints through scripts/export_torch.py, PyTorch's forward against ours.
ht_add_script_test(precision_export_lowp precision/precision_tests.py ARGS export_lowp $<TARGET_FILE:ht_unit_tests>
                   LABELS "train;interop" TIMEOUT 300)
# The bf16 wire and the fused unscale on the communicator (tests/mpi/test_wire_bf16.cpp).
ht_add_mpi_test(mpi_wire_bf16_np2 2 "[bf16]" TIMEOUT 120)
ht_add_mpi_test(mpi_wire_bf16_np3 3 "[bf16]" TIMEOUT 120)
# hpctrain bench peak (oneDNN bf16/fp32 matmul).
ht_add_script_test(precision_bench_peak precision/test_bench_peak.sh TIMEOUT 120)
