ht_add_mpi_test(mpi_dist_np2 2 "[dist]")
# The guard's notice to the peers that still answer (mpi/peer_beacon.hpp): 3 ranks, so one is told and one is not.
ht_add_mpi_test(mpi_peer_notice_np3 3 "[peer_notice]" TIMEOUT 60)
