#!/usr/bin/env bash
# Our models against PyTorch: generate each fixture with torch_reference.py (float32 and float64),
# then run the hidden Catch2 test on it once per convolution plan (HT_CONV_ALGO: direct, winograd,
# auto; src/ops/conv2d.cpp), and print the table of every run: ours and PyTorch float32, each
# against PyTorch float64. Usage: torch_crosscheck.sh UNIT_TEST_BINARY MODEL...
# Environment: HT_CROSSCHECK_OUT=FILE also writes the table there (Markdown, the CPU named).
set -euo pipefail
bin=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
table=$tmp/table.md
failed=0
for model in "$@"; do
  /usr/bin/python3 "$here/torch_reference.py" "$tmp/$model.h5" "$model"
  for plan in direct winograd auto; do
    HT_CONV_ALGO=$plan HT_CROSSCHECK_TABLE=$table HT_TORCH_FIXTURE="$tmp/$model.h5" "$bin" "[.torch]" || failed=1
  done
done
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
  echo "Relative error (2-norm per tensor) against PyTorch float64 on the same weights and input,"
  echo "on $cpu ($(nproc) CPUs, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset});"
  echo "bound: ours <= 20 x max(PyTorch float32's error, 1e-6) for every tensor (tests/unit/test_torch_crosscheck.cpp)."
  echo
  echo "| model | conv plan | tensors | ours median | ours max | PyTorch fp32 median | PyTorch fp32 max | worst ours / bound (tensor) |"
  echo "|---|---|---|---|---|---|---|---|"
  cat "$table"
} > "$tmp/out.md"
echo
cat "$tmp/out.md"
[[ -n ${HT_CROSSCHECK_OUT:-} ]] && cp "$tmp/out.md" "$HT_CROSSCHECK_OUT"
exit $failed
