# The container recipe built and run for real (tests/container/test_container.sh): podman build of
# containers/Containerfile on a Debian 12 base made with mmdebstrap, runs in one container, one
# container per rank (podman, Charliecloud) and under Slurm with preemption. Root, apt and Debian's
# archive needed (exit 77 otherwise). Label `container`, excluded from scripts/test.sh's default run
# (it builds the project again inside the image); run it with `ctest -L container` (README
# "Containers"). Time on 2 cores (docs/containers.md): about 3 minutes with the image layers and the
# ccache mount warm; from a clean machine (mmdebstrap, build dependencies, a cold compile of the
# whole project in the image) well over 10 minutes when the cores are shared, hence the timeout.
# It starts its own Slurm cluster, hence the lock shared with the slurm tests.
ht_add_script_test(container_recipe container/test_container.sh LABELS container TIMEOUT 2400)
set_tests_properties(container_recipe PROPERTIES RESOURCE_LOCK slurm_cluster)
