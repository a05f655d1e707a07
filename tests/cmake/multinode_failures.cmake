# Lost peers (issue 14 items 3 and 4; the collective guard, mpi/collective_guard.hpp).
# Single host, under mpirun (label mpi, part of scripts/test.sh, about 15 s each): a SIGSTOPped peer,
# SIGTERM to a rank stuck waiting on it, a slow checkpoint save that must not be taken for a lost peer,
# a rank in a long save told by the rank that gave up, and a rank whose compute thread is stuck while it
# answers probes (named with its step and phase).
foreach(t stalled term_while_stuck slow_save notice slow_rank)
  ht_add_script_test(mpi_lost_peer_${t} mpi/test_lost_peer.py ARGS ${t} LABELS mpi TIMEOUT 120)
endforeach()
# On the simulated cluster (tests/cluster/cluster.sh; label multinode, not in scripts/test.sh; 77 where no
# cluster can be built): node2's link pulled mid-step, node2's processes SIGKILLed mid-step. Each test
# bounds itself (HT_TEST_LIMIT_S inside, the ctest TIMEOUT above it); one cluster at a time.
ht_add_script_test(multinode_netsplit multinode/test_netsplit.sh LABELS multinode TIMEOUT 200)
ht_add_script_test(multinode_node_dies multinode/test_node_dies.sh LABELS multinode TIMEOUT 300)
set_tests_properties(multinode_netsplit multinode_node_dies PROPERTIES RESOURCE_LOCK ht_cluster)
# The same two failures under Slurm (issue 14 items 3 and 4): an sbatch --nodes=2 job of slurm/train.sbatch
# (srun --mpi=pmix) on the simulated cluster with one slurmd per node (tests/cluster/cluster.sh --slurm).
# The split twice: ended by slurmctld (SlurmdTimeout=30: NODE_FAIL, requeue) and by srun's --wait
# (SlurmdTimeout=300, Slurm's default).
ht_add_script_test(multinode_node_dies_srun multinode/test_node_dies_srun.sh LABELS multinode TIMEOUT 300)
ht_add_script_test(multinode_netsplit_srun multinode/test_netsplit_srun.sh ARGS slurmd LABELS multinode TIMEOUT 260)
ht_add_script_test(multinode_netsplit_srun_wait multinode/test_netsplit_srun.sh ARGS wait LABELS multinode TIMEOUT 260)
set_tests_properties(multinode_node_dies_srun multinode_netsplit_srun multinode_netsplit_srun_wait
                     PROPERTIES RESOURCE_LOCK ht_cluster)
# UDP dropped between the nodes (node2's iptables): the guard warns at start-up and probes over MPI;
# node2's ranks then SIGSTOPped, node1's must still name them.
ht_add_script_test(multinode_udp_blocked multinode/test_udp_blocked.sh LABELS multinode TIMEOUT 200)
set_tests_properties(multinode_udp_blocked PROPERTIES RESOURCE_LOCK ht_cluster)
