# Communicator and gradient-bucket tests under mpirun (mpi/ area). Budget: about 60 s in total.
ht_add_mpi_test(mpi_comm_np2 2 "[comm]" TIMEOUT 120)
ht_add_mpi_test(mpi_comm_np4 4 "[comm]" TIMEOUT 120)
ht_add_mpi_test(mpi_bucket_np2 2 "[bucketer]" TIMEOUT 120)
ht_add_mpi_test(mpi_bucket_np4 4 "[bucketer]" TIMEOUT 120)
ht_add_script_test(mpi_bench_allreduce mpi/test_bench_allreduce.sh TIMEOUT 120)
