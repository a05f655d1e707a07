# Sourced by scripts/device_check.sh (not run on its own): phase 1, the dependencies. Unpacks
# $DEPS/deps.tar.xz, exposes its libraries through a shim folder, finds cuDNN/NCCL, and sets what the
# later phases use: LIBDIR, SHIM, LDP, CMAKE_CUDA_ARGS, RPATH_LINK (and the status entries).
# Unpacked once per tarball (a tree left by an earlier call for another tarball is replaced).
write_json
if [[ -f "$DEPS/deps.tar.xz" ]]; then
  sum=$(md5sum < "$DEPS/deps.tar.xz" | cut -c1-32)
  if [[ "$(cat "$ROOT/.unpacked_from" 2>/dev/null)" != "$sum" ]]; then
    rm -rf "$ROOT" && mkdir -p "$ROOT"
    if ! limited "$(limit_for $DEPS_LIMIT)" tar -C "$ROOT" -xJf "$DEPS/deps.tar.xz"; then
      unverified deps "unpacking $DEPS/deps.tar.xz failed or ran past ${DEPS_LIMIT} s (disk space? $(df -h "$DEPS" | tail -1))"
      finish
    fi
    echo "$sum" > "$ROOT/.unpacked_from"
  fi
elif [[ ! -d "$ROOT/usr" ]]; then
  unverified deps "$DEPS/deps.tar.xz is missing: run scripts/pack_device_deps.sh on a Debian machine first and carry only .device_deps/deps.tar.xz (git-ignored) with the tree: the unpacked tree is about 246 MiB, over the 64 MiB the device tool carries"
  finish
fi
status deps "$(wc -l < "$ROOT/PACKAGES.txt" 2>/dev/null || echo '?') packages, $(du -sm "$ROOT" 2>/dev/null | cut -f1) MiB unpacked at $(elapsed) s"
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
# Expose only the shared libraries this machine does not already have (by soname), so the Debian
# copies never shadow the system's own (cmake, python and the driver keep theirs).
SHIM=$DEPS/shim
rm -rf "$SHIM" && mkdir -p "$SHIM"
# ldconfig -p lists the cache; the standard directories are added in case the cache is stale or
# ldconfig is missing (then every Debian library would shadow the system's).
have=$( { ldconfig -p 2>/dev/null | awk 'NR>1 {print $1}'
          ls /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/lib 2>/dev/null | grep '\.so'; } | sort -u)
declare -A HAVE=()
while read -r n; do [[ -n "$n" ]] && HAVE[$n]=1; done <<<"$have"
for so in $(find "$LIBDIR" "$LIBDIR/hdf5/serial" -maxdepth 1 -name 'lib*.so.*' 2>/dev/null); do
  name=$(basename "$so")
  # The MPI stack always comes from the tree: libmpi and its helpers must match the packed mpirun
  # and OPAL_PREFIX even where the machine has another Open MPI (e.g. HPC-X in NGC images).
  case $name in
    libmpi*|libopen-pal*|libopen-rte*|liboshmem*|libmca_common*|libpmix*|libhwloc*|libevent*|libmunge*)
      [[ -e "$SHIM/$name" ]] || ln -s "$so" "$SHIM/$name"
      soname=$(readelf -d "$so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
      [[ -n "$soname" && ! -e "$SHIM/$soname" ]] && ln -s "$so" "$SHIM/$soname"
      continue ;;
  esac
  [[ -n "${HAVE[$name]:-}" ]] && continue  # this very file name is there already: no readelf needed
  soname=$(readelf -d "$so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ -z "$soname" ]] && soname=$name
  if [[ -z "${HAVE[$soname]:-}" && ! -e "$SHIM/$soname" ]]; then ln -s "$so" "$SHIM/$soname"; fi
done
# Development links (libfoo.so) for the linker.
for so in $(find "$LIBDIR" -maxdepth 1 -name 'lib*.so' 2>/dev/null); do
  [[ -e "$SHIM/$(basename "$so")" ]] || ln -s "$so" "$SHIM/$(basename "$so")"
done
status shim_libraries "$(ls "$SHIM" | wc -l)"

export OPAL_PREFIX=$ROOT/usr            # relocated Open MPI finds its components and help files
export PATH=$ROOT/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
# Without ssh/rsh on the machine, Open MPI refuses to start even the local daemon that a singleton
# (hpctrain run without mpirun) or mpirun needs: "plm_rsh_agent: ssh : rsh ... could not be found".
# The agent is never used on one node; `false` only has to exist.
export OMPI_MCA_plm_rsh_agent=false
# PMIx does not follow OPAL_PREFIX: point it at its relocated components (else a "pcompress
# unavailable" help message on every start).
export PMIX_MCA_mca_base_component_path=$LIBDIR/pmix2/lib/pmix
LDP=$SHIM

# cuDNN, NCCL and cuBLAS: the toolkit's when it has them (they match nvcc), else PyTorch's pip wheels
# (site-packages/nvidia/{cudnn,nccl}/{include,lib}, nvidia/cu13/{include,lib} or nvidia/cublas/...;
# wheels ship only versioned libraries such as libcudnn.so.9, so CMake gets full paths).
CMAKE_CUDA_ARGS=()
if [[ "$CPU_ONLY" != 1 ]]; then
  CUDA_HOME=/usr/local/cuda
  NVROOTS=$(python3 - <<'PYEOF' 2>/dev/null
import importlib.util, os
roots = []
try:
    import nvidia
    roots += [os.path.realpath(p) for p in nvidia.__path__]
except Exception:
    pass
spec = importlib.util.find_spec("torch")  # located, not imported: importing torch is slow
if spec and spec.origin:
    roots.append(os.path.join(os.path.dirname(spec.origin), "lib"))
print(" ".join(dict.fromkeys(r for r in roots if os.path.isdir(r))))
PYEOF
)
  status nvidia_wheel_roots "${NVROOTS:-none}"
  for r in $NVROOTS; do find "$(dirname "$r")/" -maxdepth 1 \( -name 'nvidia_*.dist-info' -o -name 'torch-*.dist-info' \); done \
    | xargs -rn1 basename | sort -u | tr '\n' ' ' | sed 's/^/device_check: wheels: /; s/$/\n/' | tee -a "$LOG"
  # Trailing slashes: find does not descend into a start point that is a symbolic link
  # (/usr/local/cuda -> cuda-13.0).
  SEARCH=("$CUDA_HOME/")
  for r in $NVROOTS; do SEARCH+=("$r/"); done
  SEARCH+=(/usr/lib/x86_64-linux-gnu/ /usr/include/)
  # findlib GLOB: first match, by search root order; findhdr NAME LIB: the header next to LIB's
  # package (LIB/../include), else the first match.
  findlib() { local r f; for r in "${SEARCH[@]}"; do
      f=$(find "$r" -path '*/stubs' -prune -o \( -type f -o -type l \) -name "$1" -print 2>/dev/null | sort | head -1)
      [[ -n "$f" ]] && { echo "$f"; return; }; done; }
  findhdr() { local r f; if [[ -n "$2" && -f "$(dirname "$2")/../include/$1" ]]; then
      realpath -m "$(dirname "$2")/../include"; return; fi
    for r in "${SEARCH[@]}"; do f=$(find "$r" -name "$1" 2>/dev/null | sort | head -1)
      [[ -n "$f" ]] && { dirname "$f"; return; }; done; }
  CUDNN_SO=$(findlib 'libcudnn.so.[0-9]*'); [[ -z "$CUDNN_SO" ]] && CUDNN_SO=$(findlib libcudnn.so)
  NCCL_SO=$(findlib 'libnccl.so.[0-9]*'); [[ -z "$NCCL_SO" ]] && NCCL_SO=$(findlib libnccl.so)
  CUDNN_INC=$(findhdr cudnn.h "$CUDNN_SO"); NCCL_INC=$(findhdr nccl.h "$NCCL_SO")
  status cudnn "$CUDNN_SO ($CUDNN_INC)"
  status nccl "$NCCL_SO ($NCCL_INC)"
  if [[ -z "$CUDNN_INC" || -z "$CUDNN_SO" || -z "$NCCL_INC" || -z "$NCCL_SO" ]]; then
    echo "device_check: cuDNN or NCCL not found in ${SEARCH[*]}: the configure step will fail" | tee -a "$LOG"
  fi
  CMAKE_CUDA_ARGS=(-DHT_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc")
  [[ -n "$CUDNN_SO" ]] && CMAKE_CUDA_ARGS+=(-DCUDNN_LIBRARY="$CUDNN_SO")
  [[ -n "$CUDNN_INC" ]] && CMAKE_CUDA_ARGS+=(-DCUDNN_INCLUDE_DIR="$CUDNN_INC")
  [[ -n "$NCCL_SO" ]] && CMAKE_CUDA_ARGS+=(-DNCCL_LIBRARY="$NCCL_SO")
  [[ -n "$NCCL_INC" ]] && CMAKE_CUDA_ARGS+=(-DNCCL_INCLUDE_DIR="$NCCL_INC")
  for lib in "$CUDNN_SO" "$NCCL_SO"; do [[ -n "$lib" ]] && LDP="$LDP:$(dirname "$lib")"; done
  # cuBLAS: FindCUDAToolkit looks for the unversioned libcublas.so in the toolkit; when that is
  # missing, hand it the versioned libraries (toolkit or wheel) and the wheel's headers, which go
  # last on the include path (CMAKE_<LANG>_STANDARD_INCLUDE_DIRECTORIES) so they never shadow nvcc's.
  if [[ -e "$CUDA_HOME/lib64/libcublas.so" ]]; then
    status cublas "$CUDA_HOME/lib64/libcublas.so"
  else
    CUBLAS_SO=$(findlib 'libcublas.so.[0-9]*'); CUBLASLT_SO=$(findlib 'libcublasLt.so.[0-9]*')
    CUBLAS_INC=$(findhdr cublas_v2.h "$CUBLAS_SO")
    status cublas "$CUBLAS_SO ($CUBLAS_INC)"
    [[ -n "$CUBLAS_SO" ]] && { CMAKE_CUDA_ARGS+=(-DCUDA_cublas_LIBRARY="$CUBLAS_SO"); LDP="$LDP:$(dirname "$CUBLAS_SO")"; }
    [[ -n "$CUBLASLT_SO" ]] && CMAKE_CUDA_ARGS+=(-DCUDA_cublasLt_LIBRARY="$CUBLASLT_SO")
    if [[ -n "$CUBLAS_INC" && ! -f "$CUDA_HOME/include/cublas_v2.h" ]]; then
      CMAKE_CUDA_ARGS+=(-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$CUBLAS_INC"
                        -DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES="$CUBLAS_INC")
    fi
  fi
else
  CMAKE_CUDA_ARGS=(-DHT_ENABLE_CUDA=OFF)
fi
export LD_LIBRARY_PATH=$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
RPATH_LINK=$(tr ':' '\n' <<<"$LDP" | sed 's/^/-Wl,-rpath-link,/' | tr '\n' ' ')
