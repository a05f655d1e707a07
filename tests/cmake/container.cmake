# The container recipe built and run for real (tests/container/test_container.sh): podman build of
# containers/Containerfile on a Debian 12 base made with mmdebstrap, runs in one container, one
# container per rank (podman, Charliecloud) and under Slurm with preemption. Root, apt and Debian's
# archive needed (exit 77 otherwise). Label `container`, excluded from scripts/test.sh's default run
# (it builds the project again inside the image); run it with `ctest -L container` (README
# "Containers"). Budget: under 10 minutes on 2 cores, the image build included. It starts its own
# Slurm cluster, hence the lock shared with the slurm tests.
ht_add_script_test(container_recipe container/test_container.sh LABELS container TIMEOUT 1200)
set_tests_properties(container_recipe PROPERTIES RESOURCE_LOCK slurm_cluster)
