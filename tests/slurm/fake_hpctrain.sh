#!/usr/bin/env bash
# Test double for `hpctrain train`, used to test slurm/train.sbatch's signal forwarding and
# requeue logic on their own: each rank counts steps (0.2 s each) up to --train.max_steps; USR1 or
# TERM makes every rank "checkpoint" (rank 0 writes DIR/LATEST) and exit 75; a rerun on the same
# --run.dir resumes from LATEST. Rank 0 appends run_start/step/checkpoint/run_end lines to
# DIR/metrics.jsonl like the real trainer.
set -u
[[ ${1:-} == train ]] || { echo "fake_hpctrain: only 'train'" >&2; exit 2; }
shift
dir="" max=20
while [[ $# -gt 0 ]]; do
  case $1 in
    --run.dir) dir=$2; shift 2 ;;
    --train.max_steps) max=$2; shift 2 ;;
    *) shift ;;
  esac
done
[[ -n $dir ]] || { echo "fake_hpctrain: --run.dir missing" >&2; exit 2; }
# mpirun inside a job inherits the batch shell's SLURM_PROCID=0, so Open MPI's variables go first.
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}
size=${OMPI_COMM_WORLD_SIZE:-${SLURM_NTASKS:-1}}
mkdir -p "$dir"
step=0
[[ -f $dir/LATEST ]] && step=$(cat "$dir/LATEST")
stop=0
trap 'stop=1' USR1 TERM
m() { [[ $rank == 0 ]] && echo "$1" >>"$dir/metrics.jsonl"; }
m "{\"event\":\"run_start\",\"world_size\":$size,\"resume_step\":$step}"
while (( step < max )); do
  sleep 0.2 & wait $!
  if (( stop )); then
    [[ $rank == 0 ]] && echo "$step" >"$dir/LATEST"
    m "{\"event\":\"checkpoint\",\"step\":$step}"
    m "{\"event\":\"run_end\",\"status\":\"stopped\",\"exit_code\":75}"
    exit 75
  fi
  step=$((step + 1))
  m "{\"event\":\"step\",\"step\":$step}"
done
m "{\"event\":\"run_end\",\"status\":\"finished\",\"exit_code\":0}"
exit 0
