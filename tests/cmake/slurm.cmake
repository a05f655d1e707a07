# Slurm integration tests: each starts its own single-node cluster (tests/slurm/cluster.sh) as root
# and exits 77 (skipped, with the reason) where Slurm cannot start. RESOURCE_LOCK keeps them from
# running at once: each cluster claims all (virtual) CPUs of the node. Budget: about 5 minutes.
ht_add_script_test(slurm_sbatch_requeue slurm/test_sbatch_requeue.sh LABELS slurm TIMEOUT 150)
set_tests_properties(slurm_sbatch_requeue PROPERTIES RESOURCE_LOCK slurm_cluster)
# The scaling model's arithmetic against hand-computed values (no Slurm needed).
ht_add_script_test(scaling_model slurm/test_scaling_model.py LABELS scaling TIMEOUT 120)
ht_add_script_test(slurm_train_sbatch slurm/test_train_sbatch.sh LABELS slurm TIMEOUT 120)
ht_add_script_test(slurm_preempt slurm/test_preempt.sh LABELS slurm TIMEOUT 180)
ht_add_script_test(slurm_bench_node slurm/test_bench_node.sh LABELS slurm TIMEOUT 240)
set_tests_properties(slurm_train_sbatch slurm_preempt slurm_bench_node PROPERTIES RESOURCE_LOCK slurm_cluster)
