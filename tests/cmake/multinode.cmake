# Multi-node tests (issue 14): each starts its own simulated cluster (tests/cluster/cluster.sh: nodes
# as network/UTS/mount namespaces on a private bridge, Slurm with one slurmd per node where the test
# needs it) as root, bounds itself in time (HT_TEST_LIMIT_S inside, the ctest TIMEOUT above it) and
# exits 77 with the reason where the cluster cannot be built. Label `multinode`: not part of
# scripts/test.sh; .ci/run runs them as their own suite (ctest -L multinode). RESOURCE_LOCK: one
# cluster at a time (the ranks of every node share this machine's cores).
function(ht_add_multinode_test name script timeout)
  ht_add_script_test(${name} ${script} LABELS multinode TIMEOUT ${timeout})
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ht_cluster)
endfunction()
ht_add_multinode_test(multinode_train_equal cluster/test_train_equal.sh 330)
ht_add_multinode_test(multinode_doctor cluster/test_doctor.sh 250)
ht_add_multinode_test(multinode_elastic cluster/test_elastic.sh 330)
ht_add_multinode_test(multinode_preempt cluster/test_preempt.sh 330)
ht_add_multinode_test(multinode_start_repeat cluster/test_start_repeat.sh 480)
ht_add_multinode_test(multinode_launch_checks cluster/test_launch_checks.sh 330)
ht_add_multinode_test(multinode_scaling cluster/test_scaling.sh 450)
# Restart inside the allocation (issue 27; slurm/train.sbatch): one failure per mode.
foreach(mode spare spare_mpirun elastic repeat qualify)
  ht_add_script_test(multinode_restart_${mode} cluster/test_restart.sh ARGS ${mode} LABELS multinode TIMEOUT 330)
  set_tests_properties(multinode_restart_${mode} PROPERTIES RESOURCE_LOCK ht_cluster)
endforeach()
