# Fails the build when a source file includes a header of a layer above its own, or when src/train
# calls MPI directly (cmake -P script;
# run by the ht_check_layers target before any layer compiles). The layers, bottom to top, and what
# each may include (docs/architecture.md). Layer 1 and 2 are top-level folders, layers 3-6 are in src/:
#   base                     itself only
#   io, mpi, cuda            base and themselves (io/checkpoint and io/dataset are part of io)
#   mpi/gpu                  the bridge of MPI and CUDA: base, mpi, cuda
#   src/ops                  base, cuda (the GPU runtime: context, allocator, checks)
#   src/nn                   + src/ops
#   src/train                + io, mpi, mpi/gpu, src/nn
#   src/cli                  + src/train
# Usage: cmake -DROOT=<source dir> -P cmake/check_layers.cmake
set(allowed_base      "base")
set(allowed_io        "base;io")
set(allowed_mpi       "base;mpi")
set(allowed_cuda      "base;cuda")
set(allowed_mpi/gpu   "base;mpi;cuda;mpi/gpu")
set(allowed_src/ops   "base;cuda;src/ops")
set(allowed_src/nn    "base;cuda;src/ops;src/nn")
set(allowed_src/train "base;io;mpi;mpi/gpu;cuda;src/ops;src/nn;src/train")
set(allowed_src/cli   "base;io;mpi;mpi/gpu;cuda;src/ops;src/nn;src/train;src/cli")
set(layers base io mpi cuda mpi/gpu src/ops src/nn src/train src/cli)
# The folders of each layer (a layer's sub-folders that are not layers of their own).
set(dirs_io io io/checkpoint io/dataset)

# The layer a path (relative to ROOT) belongs to: its directory, where mpi/gpu is its own layer and
# io/checkpoint, io/dataset belong to io.
function(layer_of path out)
  get_filename_component(dir "${path}" DIRECTORY)
  if(dir MATCHES "^io/")
    set(dir "io")
  endif()
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

set(violations "")
foreach(layer ${layers})
  if(NOT DEFINED dirs_${layer})
    set(dirs_${layer} ${layer})
  endif()
  set(files)
  foreach(d ${dirs_${layer}})
    file(GLOB f "${ROOT}/${d}/*.cpp" "${ROOT}/${d}/*.hpp" "${ROOT}/${d}/*.cu" "${ROOT}/${d}/*.cuh")
    list(APPEND files ${f})
  endforeach()
  foreach(f ${files})
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" inc "${line}")
      layer_of("${inc}" target)
      if(target STREQUAL "" OR NOT EXISTS "${ROOT}/${inc}")
        continue()  # a header of a library outside the project, or a file next to the includer
      endif()
      list(FIND allowed_${layer} "${target}" found)
      if(found EQUAL -1)
        file(RELATIVE_PATH rel "${ROOT}" "${f}")
        string(APPEND violations "  ${rel} (layer ${layer}) includes ${inc} (layer ${target})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
# The training layer agrees with its peers only through mpi/ (dist_*, Communicator): there each wait on
# peers is bounded in one place (mpi/collective_guard.hpp). MPI used directly in src/train (a call,
# a handle such as MPI_COMM_WORLD, HT_MPI_CHECK, or #include <mpi.h>) is a violation; names in strings
# and comments are not uses.
file(GLOB train_files "${ROOT}/src/train/*.cpp" "${ROOT}/src/train/*.hpp")
foreach(f ${train_files})
  file(STRINGS "${f}" lines REGEX "(MPI_[A-Z][A-Za-z_]*|HT_MPI_CHECK|<mpi\\.h>)")
  foreach(line ${lines})
    string(REGEX REPLACE "//.*$" "" code "${line}")
    string(REGEX REPLACE "\"[^\"]*\"" "" code "${code}")
    if(code MATCHES "(^|[^A-Za-z0-9_])(MPI_[A-Z][A-Za-z_]*|HT_MPI_CHECK)" OR code MATCHES "<mpi\\.h>")
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      string(STRIP "${line}" line)
      string(APPEND violations "  ${rel} (layer src/train) uses MPI directly: ${line}\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "Includes that point up the layers, or MPI called outside mpi/ (see cmake/check_layers.cmake):\n${violations}")
endif()
