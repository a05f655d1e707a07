// The run-time cuDNN/NCCL CUDA-version check (cuda/lib_versions.hpp): parsing NCCL's version line,
// finding it in an ELF file's .rodata, and the mismatch message naming both versions.
#include <catch2/catch.hpp>

#include <cstdio>
#include <elf.h>

#include <cstring>
#include <fstream>
#include <string>

#include "cuda/lib_versions.hpp"

using namespace ht::cuda;

namespace {
const char kWithNul[] = "junk\0NCCL version 2.21.5+cuda12.4\0%s";

/// Writes a minimal ELF64 file: sections null, .shstrtab, `text_name` (holding `text`, in the file
/// before .rodata) and .rodata (holding `rodata`).
void write_elf(const std::string& path, const std::string& text_name, const std::string& text,
               const std::string& rodata) {
  const std::string names = std::string("\0.shstrtab\0", 11) + text_name + '\0' + ".rodata" + '\0';
  const uint32_t n_shstrtab = 1, n_text = 11, n_rodata = 11 + static_cast<uint32_t>(text_name.size()) + 1;
  std::string body = names + text + rodata;
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 4;
  eh.e_shstrndx = 1;
  eh.e_shoff = sizeof(Elf64_Ehdr) + body.size();
  Elf64_Shdr sh[4]{};
  const uint64_t base = sizeof(Elf64_Ehdr);
  sh[1] = {n_shstrtab, SHT_STRTAB, 0, 0, base, names.size(), 0, 0, 1, 0};
  sh[2] = {n_text, SHT_PROGBITS, 0, 0, base + names.size(), text.size(), 0, 0, 1, 0};
  sh[3] = {n_rodata, SHT_PROGBITS, 0, 0, base + names.size() + text.size(), rodata.size(), 0, 0, 1, 0};
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&eh), sizeof(eh));
  f.write(body.data(), static_cast<std::streamsize>(body.size()));
  f.write(reinterpret_cast<const char*>(sh), sizeof(sh));
}
}  // namespace

TEST_CASE("parse_nccl_cuda_version reads NCCL's version line", "[lib_versions]") {
  CHECK(parse_nccl_cuda_version("NCCL version 2.28.9+cuda13.0") == 13000);
  CHECK(parse_nccl_cuda_version(std::string_view(kWithNul, sizeof(kWithNul) - 1)) == 12040);
  CHECK(parse_nccl_cuda_version("NCCL version 2.27.3-1+cuda12.9 x") == 12090);  // a suffix before +cuda
  // The format string NCCL also carries is skipped; the real line after it is found.
  CHECK(parse_nccl_cuda_version("NCCL version %s+cuda%d.%d ... NCCL version 2.28.9+cuda13.0") == 13000);
  CHECK(parse_nccl_cuda_version("NCCL version 2.28.9") == 0);
  CHECK(parse_nccl_cuda_version("NCCL version 2.28.9 compiled with CUDA 13.0") == 0);
  CHECK(parse_nccl_cuda_version("") == 0);
  CHECK(parse_nccl_cuda_version("NCCL version 2.1+cuda.5") == 0);
}

TEST_CASE("nccl_cuda_version_of_file reads only .rodata of an ELF file", "[lib_versions]") {
  const std::string elf = "/tmp/ht_lib_versions_test.so";
  // A line outside .rodata (here in .text, before it in the file) is not taken.
  write_elf(elf, ".text", std::string("NCCL version 2.1.1+cuda11.1", 27) + '\0',
            std::string("\0%s\0NCCL version 2.28.9+cuda13.0\0NCCL_MNN", 41));
  CHECK(nccl_cuda_version_of_file(elf) == 13000);
  write_elf(elf, ".text", "", std::string("no version line here"));
  CHECK(nccl_cuda_version_of_file(elf) == 0);
  write_elf(elf, ".data", "", "");  // no .rodata content
  CHECK(nccl_cuda_version_of_file(elf) == 0);
  std::remove(elf.c_str());
  CHECK(nccl_cuda_version_of_file("/no/such/libnccl.so.2") == 0);
  const std::string txt = "/tmp/ht_lib_versions_test.txt";  // not ELF, although it holds the line
  { std::ofstream(txt) << "NCCL version 2.28.9+cuda13.0\n"; }
  CHECK(nccl_cuda_version_of_file(txt) == 0);
  std::remove(txt.c_str());
}

TEST_CASE("cuda_major_mismatch names both CUDA versions and the fix", "[lib_versions]") {
  LibCudaBuild cudnn{"cuDNN 9.10.2", "/venv/nvidia/cudnn/lib/libcudnn.so.9", 12080};
  const std::string m = cuda_major_mismatch(cudnn, 13000);
  INFO(m);
  CHECK(m.find("cuDNN 9.10.2 (/venv/nvidia/cudnn/lib/libcudnn.so.9) was built for CUDA 12.8") != std::string::npos);
  CHECK(m.find("built with CUDA 13.0") != std::string::npos);
  CHECK(m.find("LD_LIBRARY_PATH") != std::string::npos);
  CHECK(m.find("-cu13") != std::string::npos);
  CHECK(cuda_major_mismatch({"NCCL 2.28.9", "", 13000}, 13020).empty());  // minor versions may differ
  CHECK(cuda_major_mismatch({"NCCL 2.28.9", "", 0}, 13000).empty());      // unknown: nothing to compare
  CHECK(!cuda_major_mismatch({"NCCL 2.21.5", "libnccl.so.2", 12040}, 13000).empty());
  CHECK(!cuda_major_mismatch({"cuDNN 9.19.0", "", 13000}, 12090).empty());
}

#if defined(HT_HAVE_CUDA)
#include <cuda_runtime_api.h>  // CUDART_VERSION

TEST_CASE("the cuDNN and NCCL loaded here match this build's CUDA major version", "[lib_versions]") {
  // No GPU needed: cudnnGetCudartVersion, ncclGetVersion and the library files only.
  const LibCudaBuild cudnn = loaded_cudnn(), nccl = loaded_nccl();
  INFO(cudnn.name << " " << cudnn.path << " CUDA " << cudnn.cuda_version << "; " << nccl.name << " " << nccl.path
                  << " CUDA " << nccl.cuda_version << "; binary CUDA " << CUDART_VERSION);
  CHECK(cudnn.path.find("libcudnn") != std::string::npos);
  CHECK(nccl.path.find("libnccl") != std::string::npos);
  CHECK(cudnn.cuda_version / 1000 == CUDART_VERSION / 1000);
  CHECK(nccl.cuda_version / 1000 == CUDART_VERSION / 1000);  // found in libnccl's .rodata
  CHECK_NOTHROW(check_library_cuda_versions());
}
#endif
