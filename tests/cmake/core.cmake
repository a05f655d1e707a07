ht_add_mpi_test(mpi_dist_np2 2 "[dist]")
