#!/usr/bin/env bash
# cmake/check_onednn.cmake: configuring hpctrain against a oneDNN that is not 2.x stops at configure
# with a message naming the version found, the 2.x required and what to do (instead of compile errors
# in src/ops). A fake oneDNN package in a temporary prefix (a dnnl CMake config whose DNNL::dnnl
# target points at a dnnl_version.h) is passed with -Ddnnl_DIR: 3.1.1 (Ubuntu 24.04's) must stop the
# configuration, 2.6.3 (Debian 12's) must pass the check. Configure only, nothing compiles.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ht-onednn.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

fake_onednn() {  # fake_onednn PREFIX MAJOR MINOR PATCH
  local p=$1
  mkdir -p "$p/include/oneapi/dnnl" "$p/lib/cmake/dnnl"
  cat >"$p/include/oneapi/dnnl/dnnl_version.h" <<H
#ifndef ONEAPI_DNNL_DNNL_VERSION_H
#define ONEAPI_DNNL_DNNL_VERSION_H
#define DNNL_VERSION_MAJOR $2
#define DNNL_VERSION_MINOR $3
#define DNNL_VERSION_PATCH $4
#define DNNL_VERSION_HASH  "N/A"
#endif
H
  # The package claims 2.6.3 whatever the header says: the check must believe the header.
  echo 'set(PACKAGE_VERSION "2.6.3")
set(PACKAGE_VERSION_COMPATIBLE TRUE)' >"$p/lib/cmake/dnnl/dnnl-config-version.cmake"
  echo 'if(NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl INTERFACE IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()' >"$p/lib/cmake/dnnl/dnnl-config.cmake"
}

configure() {  # configure PREFIX LOG: the project's configure step against the fake oneDNN
  cmake -S "$src" -B "$1/build" -G Ninja -DHT_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF \
    -Ddnnl_DIR="$1/lib/cmake/dnnl" >"$2" 2>&1
}

fake_onednn "$work/v3" 3 1 1
if configure "$work/v3" "$work/v3.log"; then
  cat "$work/v3.log"; fail "configuration succeeded against oneDNN 3.1.1"
fi
cat "$work/v3.log" | sed -n '/CMake Error/,/^-- Configuring incomplete/p'
# The message comes without CMake's line wrapping when joined.
msg=$(tr -s ' \n' ' ' <"$work/v3.log")
for want in "needs oneDNN 2.x" "found oneDNN '3.1.1'" "$work/v3/include/oneapi/dnnl/dnnl_version.h" \
            "What to do:" "-Ddnnl_DIR="; do
  [[ $msg == *"$want"* ]] || fail "the configure error does not say '$want'"
done
grep -q "src/ops" "$work/v3.log" || fail "the error does not say where the v2 API is used (src/ops)"

fake_onednn "$work/v2" 2 6 3
configure "$work/v2" "$work/v2.log" || { tail -n 30 "$work/v2.log"; fail "configuration failed against oneDNN 2.6.3"; }
grep -q "hpctrain: oneDNN 2.6.3 ($work/v2/include/oneapi/dnnl/dnnl_version.h)" "$work/v2.log" ||
  { cat "$work/v2.log"; fail "no 'hpctrain: oneDNN 2.6.3' status line"; }
echo "PASS: oneDNN 3.1.1 stops the configuration with the message above; 2.6.3 passes"
