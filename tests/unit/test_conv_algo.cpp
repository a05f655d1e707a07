// cuDNN convolution algorithm selection (src/ops/conv2d_gpu_algo.hpp) on fake perf-result arrays: status
// filter, workspace cap (reported and re-queried), deterministic restriction, strict FP32 vs TF32
// math types, cuDNN's order kept.
#include <catch2/catch.hpp>

#include <map>

#include "src/ops/conv2d_gpu_algo.hpp"
#include "tests/unit/text_test_util.hpp"

using namespace ht::cuda;
using ht::test::check_mentions;

namespace {
constexpr size_t MiB = size_t{1} << 20;

ConvAlgoPerf perf(int algo, size_t mem, ConvMath math = ConvMath::fma, bool det = true, bool ok = true) {
  return ConvAlgoPerf{algo, ok, mem, math, det};
}

/// Workspace query that returns what the perf entry said, or a table override; records the calls.
struct FakeWs {
  std::map<int, std::optional<size_t>> table;
  std::vector<std::pair<int, ConvMath>> calls;
  std::function<std::optional<size_t>(int, ConvMath)> fn() {
    return [this](int algo, ConvMath m) -> std::optional<size_t> {
      calls.emplace_back(algo, m);
      auto it = table.find(algo);
      return it == table.end() ? std::optional<size_t>(0) : it->second;
    };
  }
};
}  // namespace

TEST_CASE("choose_conv_algo keeps cuDNN's order and skips unsupported entries", "[conv_algo]") {
  FakeWs ws;
  std::vector<ConvAlgoPerf> v{perf(6, 0, ConvMath::fma, true, /*ok=*/false), perf(1, 0), perf(0, 0)};
  auto c = choose_conv_algo(ConvPass::forward, v, 256 * MiB, false, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 1);
  CHECK(c->math == ConvMath::fma);
  REQUIRE(ws.calls.size() == 1);  // no workspace query for the unsupported entry
  CHECK(ws.calls[0].first == 1);
}

TEST_CASE("choose_conv_algo honours the workspace cap, reported and re-queried", "[conv_algo]") {
  FakeWs ws;
  ws.table[2] = 300 * MiB;       // perf said 10 MiB, the re-query says 300 MiB: refused
  ws.table[5] = std::nullopt;    // the query fails: refused
  ws.table[1] = 64 * MiB;
  std::vector<ConvAlgoPerf> v{perf(7, 512 * MiB), perf(2, 10 * MiB), perf(5, 0), perf(1, 64 * MiB)};
  auto c = choose_conv_algo(ConvPass::forward, v, 256 * MiB, false, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 1);
  CHECK(c->workspace == 64 * MiB);
  CHECK_FALSE(choose_conv_algo(ConvPass::forward, v, 32 * MiB, false, false, ws.fn()));
  // Exactly at the cap is allowed.
  CHECK(choose_conv_algo(ConvPass::forward, {perf(1, 64 * MiB)}, 64 * MiB, false, false, ws.fn()));
}

TEST_CASE("deterministic mode refuses non-deterministic entries and the documented atomics algorithms",
          "[conv_algo]") {
  FakeWs ws;
  // Backward filter: ALGO_0 and ALGO_3 are refused even when reported deterministic.
  std::vector<ConvAlgoPerf> bf{perf(0, 0), perf(3, 0), perf(2, 0, ConvMath::fma, /*det=*/false), perf(1, 0)};
  auto c = choose_conv_algo(ConvPass::backward_filter, bf, 256 * MiB, true, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 1);
  // Outside deterministic mode the fastest one wins.
  c = choose_conv_algo(ConvPass::backward_filter, bf, 256 * MiB, false, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 0);
  // Backward data: ALGO_0 refused, ALGO_1 taken.
  std::vector<ConvAlgoPerf> bd{perf(0, 0), perf(1, 0)};
  c = choose_conv_algo(ConvPass::backward_data, bd, 256 * MiB, true, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 1);
  // Forward algorithm 0 is fine.
  c = choose_conv_algo(ConvPass::forward, bd, 256 * MiB, true, false, ws.fn());
  REQUIRE(c);
  CHECK(c->algo == 0);
  CHECK(conv_algo_nondeterministic(ConvPass::backward_filter, 3));
  CHECK_FALSE(conv_algo_nondeterministic(ConvPass::backward_data, 1));
}

TEST_CASE("strict FP32 never runs tensor-op math; TF32 runs the entry's math type", "[conv_algo]") {
  std::vector<ConvAlgoPerf> v{perf(1, 0, ConvMath::tensor_op), perf(4, 0, ConvMath::tensor_op_allow_conversion),
                              perf(0, 0, ConvMath::default_math), perf(2, 0, ConvMath::fma)};
  FakeWs strict;
  auto c = choose_conv_algo(ConvPass::forward, v, 256 * MiB, false, /*tf32=*/false, strict.fn());
  REQUIRE(c);
  CHECK(c->algo == 0);
  CHECK(c->math == ConvMath::fma);  // DEFAULT_MATH would permit TF32: the descriptor keeps FMA_MATH
  REQUIRE(strict.calls.size() == 1);
  CHECK(strict.calls[0].second == ConvMath::fma);  // the workspace is queried with the math type run

  FakeWs tf32;
  c = choose_conv_algo(ConvPass::forward, v, 256 * MiB, false, /*tf32=*/true, tf32.fn());
  REQUIRE(c);
  CHECK(c->algo == 1);
  CHECK(c->math == ConvMath::tensor_op);
  CHECK(tf32.calls.at(0).second == ConvMath::tensor_op);

  // FP16 conversion is refused in both modes.
  CHECK_FALSE(conv_run_math(perf(4, 0, ConvMath::tensor_op_allow_conversion), true));
  CHECK_FALSE(conv_run_math(perf(4, 0, ConvMath::tensor_op_allow_conversion), false));
  CHECK(conv_base_math(false) == ConvMath::fma);
  CHECK(conv_base_math(true) == ConvMath::default_math);
  // bf16/fp16 data: searched with tensor-op math, as PyTorch (tensor-core kernels first); such a
  // choice runs as found (tensor-core math is allowed for low precision).
  CHECK(conv_base_math(true, true) == ConvMath::tensor_op);
  CHECK(conv_base_math(false, true) == ConvMath::tensor_op);
  CHECK(conv_run_math(perf(1, 0, ConvMath::tensor_op), true) == ConvMath::tensor_op);
}

TEST_CASE("no_conv_algo_message says why each entry was refused and what to change", "[conv_algo]") {
  std::vector<ConvAlgoPerf> v{perf(0, 0, ConvMath::fma, true, false), perf(1, 512 * MiB),
                              perf(2, 0, ConvMath::tensor_op), perf(3, 0)};
  const std::string m = no_conv_algo_message(ConvPass::backward_filter, "x [1,2,3,4]", v, 256 * MiB, true, false);
  check_mentions(m, {"backward-filter", "x [1,2,3,4]", "256 MiB", "algo 0: not supported",
                     "algo 1: workspace 536870912 B over the cap", "algo 2: TENSOR_OP_MATH not allowed",
                     "algo 3: non-deterministic", "--cuda.workspace_mb", "--train.deterministic"});
  CHECK(no_conv_algo_message(ConvPass::forward, "s", {}, 0, false, true).find("no algorithm returned") !=
        std::string::npos);
}
