# Mixed precision through the hpctrain binary, CPU (issue 13): loss scaling (exactness, the agreed
# skip, resume) and the bf16 gradient wire. About 60 s in total on 2 cores.
foreach(t scale_exact scale_skip scale_resume grad_bf16)
  ht_add_script_test(precision_${t} precision/precision_tests.py ARGS ${t} LABELS train TIMEOUT 300)
endforeach()
# The bf16 wire and the fused unscale on the communicator (tests/mpi/test_wire_bf16.cpp).
ht_add_mpi_test(mpi_wire_bf16_np2 2 "[bf16]" TIMEOUT 120)
ht_add_mpi_test(mpi_wire_bf16_np3 3 "[bf16]" TIMEOUT 120)
