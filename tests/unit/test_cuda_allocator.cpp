// CPU-side parts of the CUDA allocator: the out-of-memory message and the current-layer guard.
#include <catch2/catch.hpp>

#include "cuda/allocator.hpp"
#include "cuda/cuda_context.hpp"
#include "tests/unit/text_test_util.hpp"

using namespace ht::cuda;
using ht::test::check_mentions;
using ht::format_bytes;

TEST_CASE("oom_message gives layer, bytes, free/total memory and remedies", "[cuda_alloc]") {
  const std::string m = oom_message("layer2.0.conv1", size_t{3} << 30, size_t{512} << 20, size_t{80} << 30,
                                    size_t{70} << 30, 1);
  check_mentions(m, {"out of memory on device 1", "layer 'layer2.0.conv1'", "3.00 GiB (3221225472 bytes)",
                     "512.0 MiB free of 80.00 GiB total", "70.00 GiB", "train.accumulation_steps",
                     "train.precision = bf16", "halves activation memory", "nvidia-smi"});
  // Mixed precision is a remedy this version has (it was refused once; the advice must not say so).
  CHECK(m.find("refused") == std::string::npos);
  CHECK(m.find("fp32/tf32 only") == std::string::npos);
  CHECK(oom_message("", 10, 0, 0, 0, 0).find("(outside any layer)") != std::string::npos);
}

TEST_CASE("format_bytes picks the unit", "[cuda_alloc]") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(size_t{12} << 20) == "12.0 MiB");
  CHECK(format_bytes(size_t{3} << 29) == "1.50 GiB");
}

TEST_CASE("CurrentLayer sets and restores the thread's layer name", "[cuda_alloc]") {
  CHECK(current_layer().empty());
  {
    CurrentLayer a("stem");
    CHECK(current_layer() == "stem");
    {
      CurrentLayer b("layer1.0");
      CHECK(current_layer() == "layer1.0");
    }
    CHECK(current_layer() == "stem");
  }
  CHECK(current_layer().empty());
}

TEST_CASE("CUDA options round-trip; a CPU-only build refuses init", "[cuda_alloc]") {
  Options saved = options();
  Options o;
  o.workspace_bytes = size_t{64} << 20;
  o.deterministic = true;
  set_options(o);
  CHECK(options().workspace_bytes == (size_t{64} << 20));
  CHECK(options().deterministic);
  set_options(saved);
  if (!built_with_cuda()) CHECK_THROWS(init(0));
}
