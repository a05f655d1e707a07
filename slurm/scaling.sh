#!/usr/bin/env bash
# Weak- and strong-scaling sweep over node counts: one bench_node.sbatch job per node count (all GPUs
# of those nodes, allreduce + training throughput, weak and strong), then a collector job that runs
# scripts/scaling_study.py over all points once they have ended (--dependency=afterany).
#
#   slurm/scaling.sh [--nodes "1 2 4 8"] [--gpus-per-node 8] [--batch-per-gpu B] [--global-batch G]
#                    [--model NAME] [--precision P] [--grad-dtype T] [--results DIR] [--cluster NAME] [--wait]
#                    [-- SBATCH_ARGS...]
#
#   --nodes           node counts, one job each (default "1 2 4 8")
#   --gpus-per-node   tasks (= GPUs) per node (default 8)
#   --batch-per-gpu   weak scaling: per-GPU batch (default: bench_node's, 256 GPU / 32 CPU)
#   --global-batch    strong scaling: fixed global batch (default batch-per-gpu x the largest GPU count)
#   --precision       train.precision of every point (HT_BENCH_PRECISION; the study models this one)
#   --grad-dtype      dist.grad_dtype of every point: fp32 or bf16 (HT_BENCH_GRAD_DTYPE)
#   --results         sweep folder (default results/<cluster>/scaling-<date>-<time>)
#   --no-gpus         ask for no GPUs (--gpus-per-node=0; CPU partitions)
#   --study-args "A"  extra arguments for scripts/scaling_study.py (word-split; it always gets
#                     --gpus-per-node, so ranks beyond one node use the network's fabric)
#   --wait            block until the collector has finished, then print its summary
#   after --           passed to every sbatch (partition, account, time limit, constraints ...)
# Environment: HT_BIN, HT_LAUNCHER and the HT_BENCH_* variables of bench_node.sbatch pass through
# (sbatch exports the environment); HT_PYTHON (default /usr/bin/python3) runs the study.
# Output: <sweep>/n<N>/ per point, <sweep>/study/ (scaling.csv, PNG plots, cost table) from the collector.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

nodes="1 2 4 8" gpn=8 per_gpu="" global="" model="" results="" cluster="" wait=0 gpus=1 study_args=""
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --gpus-per-node) gpn=$2; shift 2 ;;
    --batch-per-gpu) per_gpu=$2; shift 2 ;;
    --global-batch) global=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --precision) export HT_BENCH_PRECISION=$2; shift 2 ;;
    --grad-dtype) export HT_BENCH_GRAD_DTYPE=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --no-gpus) gpus=0; shift ;;
    --study-args) study_args=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "scaling.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
command -v sbatch >/dev/null || { echo "scaling.sh: sbatch not found" >&2; exit 2; }
if [[ -z $cluster ]]; then
  cluster=$(scontrol show config 2>/dev/null | sed -n 's/^ClusterName *= *//p')
  cluster=${cluster:-cluster}
fi
results=${results:-$root/results/$cluster/scaling-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$results"
results=$(cd "$results" && pwd)

max_nodes=0
for n in $nodes; do (( n > max_nodes )) && max_nodes=$n; done
[[ -n $per_gpu ]] && export HT_BENCH_BATCH_PER_RANK=$per_gpu
if [[ -n $global ]]; then export HT_BENCH_GLOBAL_BATCH=$global
elif [[ -n $per_gpu ]]; then export HT_BENCH_GLOBAL_BATCH=$(( per_gpu * gpn * max_nodes ))
else
  # bench_node's default per-rank batch depends on the device it finds; fix the global batch from
  # the same defaults so every point of the strong sweep uses one value.
  if [[ $gpus == 1 ]]; then export HT_BENCH_GLOBAL_BATCH=$(( 256 * gpn * max_nodes ))
  else export HT_BENCH_GLOBAL_BATCH=$(( 32 * gpn * max_nodes )); fi
fi
[[ -n $model ]] && export HT_BENCH_MODEL=$model
export HT_BIN=${HT_BIN:-$root/build/hpctrain}

# --gpus-per-node=0 with --no-gpus: bench_node.sbatch's header asks for 8, which a CPU partition
# cannot give ("Requested node configuration is not available").
gres=(--gpus-per-node=0)
[[ $gpus == 1 ]] && gres=(--gpus-per-node="$gpn")
ids=()
for n in $nodes; do
  k=$(( n * gpn ))
  id=$(cd "$root" && HT_RESULTS_DIR=$results/n$n sbatch --parsable --job-name="ht-scale-n$n" \
        --nodes="$n" --ntasks-per-node="$gpn" "${gres[@]}" --output="$results/n$n.out" "${extra[@]}" \
        "$here/bench_node.sbatch" --parts allreduce,train --ranks "$k")
  id=${id%%;*}
  ids+=("$id")
  echo "scaling.sh: $n node(s) x $gpn = $k ranks: job $id -> $results/n$n"
done

py=${HT_PYTHON:-/usr/bin/python3}
dep=$(IFS=:; echo "${ids[*]}")
# The collector runs whatever points finished; a failed point is missing from the study, not fatal.
collector=$(cd "$root" && sbatch --parsable --job-name=ht-scale-collect --nodes=1 --ntasks=1 \
  --dependency="afterany:$dep" --output="$results/collect.out" "${extra[@]}" \
  --wrap "$py '$root/scripts/scaling_study.py' ${HT_BENCH_PRECISION:+--precision $HT_BENCH_PRECISION} --out '$results/study' --gpus-per-node $gpn $study_args '$results'/n*")
collector=${collector%%;*}
echo "scaling.sh: collector job $collector -> $results/study (after ${ids[*]})"
echo "$results" >"$results/SWEEP"

if [[ $wait == 1 ]]; then
  # Poll rather than `sbatch --wait`: the collector was submitted already.
  pending=()
  for j in "${ids[@]}" "$collector"; do pending+=(-e "$j"); done
  while squeue -h -o %A 2>/dev/null | grep -qxF "${pending[@]}"; do sleep 2; done
  cat "$results/collect.out" 2>/dev/null || true
  [[ -f $results/study/scaling.csv ]] || { echo "scaling.sh: no study output in $results/study" >&2; exit 1; }
fi
