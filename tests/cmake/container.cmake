# The container recipe built and run for real (tests/container/test_container.sh): podman build of
# containers/Containerfile on a Debian 12 base made with mmdebstrap, runs in one container, one
# container per rank (podman, Charliecloud) and under Slurm with preemption. Root, apt and Debian's
# archive needed (exit 77 otherwise). Label `container`, excluded from scripts/test.sh's default run
# (it builds the project again inside the image); run it with `ctest -L container` (README
# "Containers"). Time on 2 cores (docs/containers.md): 1 to 3 minutes with the image layers and the
# ccache mount warm; from a clean machine (mmdebstrap, build dependencies, a cold compile of the
# whole project in the image) 5.7 minutes on idle cores, about 15 when others load them (load 8 to
# 13), hence the timeout.
# It starts its own Slurm cluster, hence the lock shared with the slurm tests.
ht_add_script_test(container_recipe container/test_container.sh LABELS container TIMEOUT 2400)
set_tests_properties(container_recipe PROPERTIES RESOURCE_LOCK "slurm_cluster;ht_container_image")
# Issue 15, ranks in containers on 2 nodes (tests/container/test_container_2node.sh): the same image
# (built or reused on the host), then in the simulated 2-node cluster (tests/cluster/cluster.sh, with
# Slurm) 4 ranks, one podman container each, under host mpirun across the nodes and under
# `sbatch --nodes=2 slurm/train.sbatch` with HT_CONTAINER: losses equal to the same 4-rank run outside
# containers. Labels `container` and `multinode` (both excluded from scripts/test.sh). About 4
# minutes on 2 shared cores with the image cached; the timeout leaves room for a cold image build.
# Locks: the cluster (one at a time) and the image build shared with container_recipe.
ht_add_script_test(container_2node container/test_container_2node.sh LABELS container multinode TIMEOUT 2400)
set_tests_properties(container_2node PROPERTIES RESOURCE_LOCK "ht_cluster;ht_container_image")
