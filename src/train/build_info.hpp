#pragma once
// What this binary is: its version, the git commit it was built from, its build settings and the
// versions of the libraries it was built with and has loaded. `hpctrain --version` prints it and the
// run_start event of metrics.jsonl records it, so that a result can be traced to the build that made
// it (docs/cli.md, docs/metrics.md).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht {

/// One library: the version of the headers the binary was compiled against and the version of the
/// library loaded now (they differ when the run-time environment provides another build).
struct LibraryVersion {
  std::string name;    ///< "MPI", "HDF5", "oneDNN", "CUDA runtime", "cuDNN", "NCCL", "cuBLAS"
  std::string built;   ///< "4.1.4", "1.10.8", ...
  std::string loaded;  ///< the same form; for MPI the library's own first version line
};

struct BuildInfo {
  std::string version;             ///< project version (CMake project(VERSION))
  std::string commit;              ///< full git commit hash, or "unknown" (built outside a git checkout)
  bool modified = false;           ///< built from a tree with uncommitted changes to tracked files
  std::string build_type;          ///< CMAKE_BUILD_TYPE: Release, Debug, RelWithDebInfo, ...
  std::string compiler;            ///< "GNU 12.2.0"
  std::string sanitizers;          ///< "" or the sanitizers compiled in ("address,undefined")
  bool cuda = false;               ///< the CUDA backend is compiled in
  std::string cuda_architectures;  ///< "80;90" (CMAKE_CUDA_ARCHITECTURES); "" without CUDA
  std::vector<LibraryVersion> libraries;
};

/// The build facts and library versions. Needs no MPI initialisation and no GPU (it asks the
/// libraries for their versions only). Never throws.
BuildInfo build_info();

/// The multi-line text of `hpctrain --version`.
std::string format_build_info(const BuildInfo& b);

/// {"version", "commit", "modified", "build_type", "cuda"}: the run_start event's "build" field.
nlohmann::json build_json(const BuildInfo& b);

/// {name: loaded version}: the run_start event's "libraries" field. Keys are the names in lower case
/// with '_' for ' ' ("mpi", "hdf5", "onednn", "cuda_runtime", "cudnn", "nccl", "cublas").
nlohmann::json libraries_json(const BuildInfo& b);

}  // namespace ht
