#!/usr/bin/env bash
# Not a ctest: counts ranks that die inside MPI_Init under srun --mpi=pmix on 2 nodes of the
# simulated cluster (results/cpu/cluster/mpi_init_crash.md). Each round submits JOBS (default "a b":
# two jobs at once) of one srun step each, `hpctrain doctor --qualify` as train.sbatch's qualification
# runs it, and looks for a SIGSEGV in their output.
#   ROUNDS=25 MITIGATE=1 bash tests/cluster/stress_mpi_init.sh
# MITIGATE=1 sets Open MPI's direct modex (one PMIx fence in MPI_Init); VERBOSE_PMIX=10 shows the
# PMIx fences. Needs root (see tests/cluster/cluster.sh).
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-1500}
source "$(dirname "$0")/lib.sh"
rounds=${ROUNDS:-20}
[[ ${MITIGATE:-0} == 1 ]] && export OMPI_MCA_pmix_base_async_modex=1 OMPI_MCA_pmix_base_collect_data=0
[[ -n ${VERBOSE_PMIX:-} ]] && export OMPI_MCA_pmix_base_verbose=$VERBOSE_PMIX
crashes=0 launches=0
for r in $(seq 1 "$rounds"); do
  ids=()
  for j in ${JOBS:-a b}; do
    id=$(sbatch --parsable --job-name="$j$r" --nodes=2 --ntasks-per-node=1 --output="$work/$j$r.out" \
         --wrap "srun --mpi=pmix --kill-on-bad-exit=0 --wait=5 $HT_BIN doctor --qualify --device cpu --qualify-seconds 0.3") ||
      fail "sbatch"
    ids+=("${id%%;*}")
  done
  for id in "${ids[@]}"; do ht_slurm_wait_state "$id" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 120 >/dev/null; done
  for j in ${JOBS:-a b}; do
    launches=$((launches + 1))
    if grep -q "Segmentation fault" "$work/$j$r.out"; then
      crashes=$((crashes + 1))
      echo "round $r job $j: a rank died of SIGSEGV"; grep -m 8 "Signal\|Failing\|\[ 0\]\|srun: error" "$work/$j$r.out"
    fi
  done
done
echo "launches $launches, ranks dead of SIGSEGV: $crashes"
