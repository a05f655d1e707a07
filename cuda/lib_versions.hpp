#pragma once
// The CUDA version that the cuDNN and NCCL found at run time were built for, against the CUDA
// version this binary was built with (CUDART_VERSION). A cuDNN or NCCL for another CUDA major version
// (for example the cu12 wheels of a CUDA 12 PyTorch next to an hpctrain built with CUDA 13) loads
// under the same soname (libcudnn.so.9, libnccl.so.2) and then fails later, far from the cause, or
// silently uses another runtime: cuda::init refuses it at start-up with both versions named.
//
// cuDNN reports its CUDA runtime through cudnnGetCudartVersion(). NCCL has no such call; its library
// carries the line "NCCL version 2.28.9+cuda13.0" (what NCCL_DEBUG=INFO prints) in .rodata, which is
// read from the loaded file (found with dladdr).
//
// The parsing and the comparison are pure (unit-tested in every build); the probe of the loaded
// libraries exists in CUDA builds only.
#include <string>
#include <string_view>

namespace ht::cuda {

/// The CUDA version in "NCCL version X.Y.Z+cudaA.B" (the first such line in `text`), encoded as
/// CUDART_VERSION is (1000*A + 10*B: 13000 for 13.0); 0 when `text` holds no such line.
int parse_nccl_cuda_version(std::string_view text);

/// Searches the .rodata section of the ELF file at `path` for "NCCL version " and returns the CUDA
/// version of that line (parse_nccl_cuda_version); 0 when the file cannot be read, is not a 64-bit
/// ELF file, has no .rodata or holds no such line. Reads only the section headers and .rodata (a few
/// hundred KiB of a 200 MiB libnccl). Never throws.
int nccl_cuda_version_of_file(const std::string& path);

/// One run-time library and the CUDA version it was built for.
struct LibCudaBuild {
  std::string name;      ///< "cuDNN 9.19.0", "NCCL 2.28.9"
  std::string path;      ///< the loaded file ("" when unknown)
  int cuda_version = 0;  ///< CUDART_VERSION encoding; 0 = unknown
};

/// "" when `lib` was built for the same CUDA major version as the binary (`binary_cuda_version`,
/// CUDART_VERSION) or when its version is unknown (0: nothing to compare); else one message naming the
/// library, its file, the CUDA version it was built for, the binary's CUDA version, and the fix.
std::string cuda_major_mismatch(const LibCudaBuild& lib, int binary_cuda_version);

/// CUDA builds: the loaded cuDNN (cudnnGetVersion, cudnnGetCudartVersion, its file) and NCCL
/// (ncclGetVersion, nccl_cuda_version_of_file of its file). CPU-only builds: an empty name and 0.
LibCudaBuild loaded_cudnn();
LibCudaBuild loaded_nccl();

/// Throws RuntimeError (one message for every mismatching library) when the loaded cuDNN or NCCL was
/// built for another CUDA major version than this binary; a no-op in CPU-only builds. Called by
/// cuda::init before any cuDNN handle is made.
void check_library_cuda_versions();

}  // namespace ht::cuda
