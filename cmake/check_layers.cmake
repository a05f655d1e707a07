# Fails the build when a source file includes a header of a layer above its own (cmake -P script;
# run by the ht_check_layers target before any layer compiles). The layers, bottom to top, and what
# each may include (docs/architecture.md):
#   src/base                 itself only
#   io, mpi, cuda            src/base and themselves
#   mpi/gpu                  the bridge of MPI and CUDA: src/base, mpi, cuda
#   src/ops                  src/base, cuda (the GPU halves' declarations)
#   src/nn                   + src/ops
#   src/train                + io, mpi, mpi/gpu, src/nn
#   src/cli                  + src/train
# Usage: cmake -DROOT=<source dir> -P cmake/check_layers.cmake
set(allowed_src/base "src/base")
set(allowed_io       "src/base;io")
set(allowed_mpi      "src/base;mpi")
set(allowed_cuda     "src/base;cuda")
set(allowed_mpi/gpu  "src/base;mpi;cuda;mpi/gpu")
set(allowed_src/ops  "src/base;cuda;src/ops")
set(allowed_src/nn   "src/base;cuda;src/ops;src/nn")
set(allowed_src/train "src/base;io;mpi;mpi/gpu;cuda;src/ops;src/nn;src/train")
set(allowed_src/cli  "src/base;io;mpi;mpi/gpu;cuda;src/ops;src/nn;src/train;src/cli")
set(layers src/base io mpi cuda mpi/gpu src/ops src/nn src/train src/cli)

# The layer a path (relative to ROOT) belongs to: its directory, where mpi/gpu is its own layer.
function(layer_of path out)
  get_filename_component(dir "${path}" DIRECTORY)
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

set(violations "")
foreach(layer ${layers})
  file(GLOB files "${ROOT}/${layer}/*.cpp" "${ROOT}/${layer}/*.hpp" "${ROOT}/${layer}/*.cu" "${ROOT}/${layer}/*.cuh")
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
if(violations)
  message(FATAL_ERROR "Includes that point up the layers (see cmake/check_layers.cmake):\n${violations}")
endif()
