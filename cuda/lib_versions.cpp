// Run-time cuDNN/NCCL against the binary's CUDA version (see lib_versions.hpp). Host code, compiled
// in every build; the probe of the loaded libraries is guarded by HT_HAVE_CUDA.
#include "cuda/lib_versions.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "base/error.hpp"

#if defined(HT_HAVE_CUDA)
#include <dlfcn.h>

#include "cuda/check.hpp"
#endif

namespace ht::cuda {

namespace {
std::string version_text(int v) {  // CUDART_VERSION encoding -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

/// Reads `n` bytes at `off` of `f` into `out`; false on a short read.
bool read_at(std::ifstream& f, uint64_t off, size_t n, void* out) {
  f.seekg(static_cast<std::streamoff>(off));
  f.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
  return static_cast<size_t>(f.gcount()) == n;
}
}  // namespace

int parse_nccl_cuda_version(std::string_view text) {
  const std::string_view key = "NCCL version ";
  for (size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    // "NCCL version 2.28.9+cuda13.0": the version runs up to the first character outside [0-9.a-z+].
    size_t end = at + key.size();
    while (end < text.size() && text[end] != '\0' && text[end] != ' ' && text[end] != '\n') ++end;
    const std::string_view ver = text.substr(at + key.size(), end - at - key.size());
    const size_t plus = ver.find("+cuda");
    if (plus == std::string_view::npos) continue;
    int major = 0, minor = 0;
    size_t i = plus + 5;
    const size_t major_start = i;
    while (i < ver.size() && ver[i] >= '0' && ver[i] <= '9' && i - major_start < 4) major = major * 10 + (ver[i++] - '0');
    if (i == major_start || i >= ver.size() || ver[i] != '.') continue;
    const size_t minor_start = ++i;
    while (i < ver.size() && ver[i] >= '0' && ver[i] <= '9' && i - minor_start < 2) minor = minor * 10 + (ver[i++] - '0');
    if (i == minor_start || major == 0) continue;
    return major * 1000 + minor * 10;
  }
  return 0;
}

int nccl_cuda_version_of_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return 0;
  Elf64_Ehdr eh{};
  if (!read_at(f, 0, sizeof(eh), &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shnum > 4096 || eh.e_shstrndx >= eh.e_shnum)
    return 0;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!read_at(f, eh.e_shoff, sh.size() * sizeof(Elf64_Shdr), sh.data())) return 0;
  const Elf64_Shdr& strtab = sh[eh.e_shstrndx];
  if (strtab.sh_size == 0 || strtab.sh_size > (1u << 20)) return 0;
  std::vector<char> names(strtab.sh_size + 1, '\0');
  if (!read_at(f, strtab.sh_offset, strtab.sh_size, names.data())) return 0;
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_name >= strtab.sh_size || std::strcmp(names.data() + s.sh_name, ".rodata") != 0) continue;
    if (s.sh_type != SHT_PROGBITS || s.sh_size == 0 || s.sh_size > (64u << 20)) return 0;
    std::string data(s.sh_size, '\0');
    if (!read_at(f, s.sh_offset, s.sh_size, data.data())) return 0;
    return parse_nccl_cuda_version(data);
  }
  return 0;
}

std::string cuda_major_mismatch(const LibCudaBuild& lib, int binary_cuda_version) {
  if (lib.cuda_version <= 0 || binary_cuda_version <= 0) return "";
  if (lib.cuda_version / 1000 == binary_cuda_version / 1000) return "";
  const std::string major = std::to_string(binary_cuda_version / 1000);
  return lib.name + (lib.path.empty() ? std::string() : " (" + lib.path + ")") + " was built for CUDA " +
         version_text(lib.cuda_version) + ", but this hpctrain was built with CUDA " +
         version_text(binary_cuda_version) +
         ": the CUDA major versions must match. Put a build of it for CUDA " + major +
         " first on LD_LIBRARY_PATH (the CUDA toolkit's own, or the *-cu" + major +
         " pip wheel), or rebuild hpctrain with a CUDA " + std::to_string(lib.cuda_version / 1000) + " toolkit";
}

#if defined(HT_HAVE_CUDA)

namespace {
std::string file_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return "";
}

std::string lib_version_text(long v) {  // major*10000 + minor*100 + patch (cuDNN 9, NCCL >= 2.9)
  if (v < 10000) return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}
}  // namespace

LibCudaBuild loaded_cudnn() {
  LibCudaBuild b;
  b.name = "cuDNN " + lib_version_text(static_cast<long>(cudnnGetVersion()));
  b.path = file_of(reinterpret_cast<const void*>(&cudnnGetVersion));
  b.cuda_version = static_cast<int>(cudnnGetCudartVersion());
  return b;
}

LibCudaBuild loaded_nccl() {
  LibCudaBuild b;
  int v = 0;
  b.name = std::string("NCCL ") + (ncclGetVersion(&v) == ncclSuccess ? lib_version_text(v) : "(unknown version)");
  b.path = file_of(reinterpret_cast<const void*>(&ncclGetVersion));
  b.cuda_version = b.path.empty() ? 0 : nccl_cuda_version_of_file(b.path);
  return b;
}

void check_library_cuda_versions() {
  std::string msg;
  for (const LibCudaBuild& lib : {loaded_cudnn(), loaded_nccl()}) {
    const std::string m = cuda_major_mismatch(lib, CUDART_VERSION);
    if (!m.empty()) msg += (msg.empty() ? "" : "; ") + m;
  }
  if (!msg.empty()) throw RuntimeError("CUDA: " + msg);
}

#else

LibCudaBuild loaded_cudnn() { return {}; }
LibCudaBuild loaded_nccl() { return {}; }
void check_library_cuda_versions() {}

#endif

}  // namespace ht::cuda
