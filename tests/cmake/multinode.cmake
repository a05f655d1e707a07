# Multi-node tests (issue 14): each starts its own simulated cluster (tests/cluster/cluster.sh: nodes
# as network/UTS/mount namespaces on a private bridge, Slurm with one slurmd per node where the test
# needs it) as root, bounds itself in time (HT_TEST_LIMIT_S inside, the ctest TIMEOUT above it) and
# exits 77 with the reason where the cluster cannot be built. Label `multinode`: not part of
# scripts/test.sh; .ci/run runs them as their own suite (ctest -L multinode). RESOURCE_LOCK: one
# cluster at a time (the ranks of every node share this machine's cores).
ht_add_script_test(multinode_train_equal cluster/test_train_equal.sh LABELS multinode TIMEOUT 330)
set_tests_properties(multinode_train_equal PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_doctor cluster/test_doctor.sh LABELS multinode TIMEOUT 250)
set_tests_properties(multinode_doctor PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_elastic cluster/test_elastic.sh LABELS multinode TIMEOUT 330)
set_tests_properties(multinode_elastic PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_preempt cluster/test_preempt.sh LABELS multinode TIMEOUT 330)
set_tests_properties(multinode_preempt PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_start_repeat cluster/test_start_repeat.sh LABELS multinode TIMEOUT 480)
set_tests_properties(multinode_start_repeat PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_launch_checks cluster/test_launch_checks.sh LABELS multinode TIMEOUT 330)
set_tests_properties(multinode_launch_checks PROPERTIES RESOURCE_LOCK ht_cluster)
ht_add_script_test(multinode_scaling cluster/test_scaling.sh LABELS multinode TIMEOUT 450)
set_tests_properties(multinode_scaling PROPERTIES RESOURCE_LOCK ht_cluster)
