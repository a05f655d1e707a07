#include "src/train/build_info.hpp"

#include <hdf5.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cctype>
#include <sstream>

#ifdef HT_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#endif

#include "mpi/dist.hpp"
#include "ht_git_commit.inc"  // generated each build by cmake/git_commit.cmake

#ifndef HT_VERSION
#define HT_VERSION "unknown"
#endif
#ifndef HT_BUILD_TYPE
#define HT_BUILD_TYPE "unknown"
#endif
#ifndef HT_COMPILER
#define HT_COMPILER "unknown"
#endif
#ifndef HT_SANITIZERS
#define HT_SANITIZERS ""
#endif
#ifndef HT_CUDA_ARCHS
#define HT_CUDA_ARCHS ""
#endif

namespace ht {

namespace {
std::string dotted(long a, long b, long c) {
  return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
}

#ifdef HT_HAVE_CUDA
// CUDA encodes versions as 1000*major + 10*minor; cuDNN 9 as 10000*major + 100*minor + patch; NCCL
// >= 2.9 as 10000*major + 100*minor + patch.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
std::string code_version(long v) { return dotted(v / 10000, (v % 10000) / 100, v % 100); }
#endif
}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.version = HT_VERSION;
  b.commit = HT_GIT_COMMIT;
  b.modified = HT_GIT_DIRTY != 0;
  b.build_type = HT_BUILD_TYPE;
  b.compiler = HT_COMPILER;
  b.sanitizers = HT_SANITIZERS;

  b.libraries.push_back({"MPI", mpi_build_version(), mpi_library_version()});
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  b.libraries.push_back({"HDF5", dotted(H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE), dotted(maj, min, rel)});
  const dnnl_version_t* dv = dnnl_version();
  b.libraries.push_back({"oneDNN", dotted(DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH),
                         dotted(dv->major, dv->minor, dv->patch)});
#ifdef HT_HAVE_CUDA
  b.cuda = true;
  b.cuda_architectures = HT_CUDA_ARCHS;
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  b.libraries.push_back({"CUDA runtime", cuda_version(CUDART_VERSION), rt ? cuda_version(rt) : "unknown"});
  b.libraries.push_back({"cuDNN", dotted(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL),
                         code_version(static_cast<long>(cudnnGetVersion()))});
  int nv = 0;
  b.libraries.push_back({"NCCL", dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),
                         ncclGetVersion(&nv) == ncclSuccess ? code_version(nv) : "unknown"});
  int cb[3] = {0, 0, 0};
  bool cb_ok = cublasGetProperty(MAJOR_VERSION, &cb[0]) == CUBLAS_STATUS_SUCCESS &&
               cublasGetProperty(MINOR_VERSION, &cb[1]) == CUBLAS_STATUS_SUCCESS &&
               cublasGetProperty(PATCH_LEVEL, &cb[2]) == CUBLAS_STATUS_SUCCESS;
  b.libraries.push_back({"cuBLAS", dotted(CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH),
                         cb_ok ? dotted(cb[0], cb[1], cb[2]) : "unknown"});
#endif
  return b;
}

std::string format_build_info(const BuildInfo& b) {
  std::ostringstream o;
  o << "hpctrain " << b.version << "\n";
  o << "commit: " << b.commit << (b.modified ? " (modified)" : "") << "\n";
  o << "build: " << b.build_type << ", " << b.compiler;
  if (!b.sanitizers.empty()) o << ", sanitizers " << b.sanitizers;
  o << "\n";
  o << "CUDA backend: " << (b.cuda ? "on, architectures " + b.cuda_architectures : std::string("off")) << "\n";
  o << "libraries (built with / loaded):\n";
  for (const auto& l : b.libraries) {
    o << "  " << l.name << std::string(l.name.size() < 13 ? 13 - l.name.size() : 1, ' ') << l.built;
    if (l.loaded != l.built) o << " / " << l.loaded;
    o << "\n";
  }
  return o.str();
}

nlohmann::json build_json(const BuildInfo& b) {
  return {{"version", b.version}, {"commit", b.commit}, {"modified", b.modified},
          {"build_type", b.build_type}, {"cuda", b.cuda}};
}

nlohmann::json libraries_json(const BuildInfo& b) {
  nlohmann::json libs = nlohmann::json::object();
  for (const auto& l : b.libraries) {
    std::string key;
    for (char c : l.name) key += c == ' ' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    libs[key] = l.loaded;
  }
  return libs;
}

}  // namespace ht
