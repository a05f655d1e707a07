#!/usr/bin/env bash
# Our models against PyTorch: generate each fixture with torch_reference.py, then run the hidden
# Catch2 test on it. Usage: torch_crosscheck.sh UNIT_TEST_BINARY MODEL...
set -euo pipefail
bin=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in "$@"; do
  /usr/bin/python3 "$here/torch_reference.py" "$tmp/$model.h5" "$model"
  HT_TORCH_FIXTURE="$tmp/$model.h5" "$bin" "[.torch]"
done
