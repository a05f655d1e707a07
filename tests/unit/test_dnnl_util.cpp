// dnnl_util: Staged reorders between plain NCHW and a blocked layout, with and without accumulation.
#include <catch2/catch.hpp>

#include <vector>

#include "src/ops/dnnl_util.hpp"
#include "src/ops/op.hpp"

using namespace ht;
namespace du = ht::dnnl_util;

TEST_CASE("dnnl_util Staged round trip and accumulate", "[dnnl_util]") {
  const du::memory::dims d{2, 19, 3, 5};  // 19 channels: not a multiple of the 16-channel block
  const auto user = du::plain_desc(d);
  const auto blocked = du::f32_desc(d, du::tag::nChw16c);
  std::vector<float> a(2 * 19 * 3 * 5), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f - 3.0f;

  for (int slot : {-1, 0})
  for (bool blocked_layout : {true, false}) {
    du::Staged in, out;
    in.init(user, blocked_layout ? blocked : user, slot);
    out.init(user, blocked_layout ? blocked : user, slot < 0 ? slot : slot + 1);
    CHECK(in.reorders() == blocked_layout);
    auto m = in.in(a.data());
    // Copy the staged input to the output's buffer through a reorder, then back to plain.
    auto o = out.out(b.data(), false);
    dnnl::reorder(m, o).execute(du::stream(), m, o);
    out.finish();
    CHECK(b == a);
    // Accumulate: c = 1 + a.
    std::fill(c.begin(), c.end(), 1.0f);
    o = out.out(c.data(), true);
    dnnl::reorder(m, o).execute(du::stream(), m, o);
    out.finish();
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(c[i] == 1.0f + a[i]);
  }
}

TEST_CASE("OpArgs validates once and names the tensor", "[op_args]") {
  auto t = Tensor::zeros({2, 3});
  const OpArgs a("op", t);
  CHECK(a.device() == Device::cpu);
  CHECK_NOTHROW(a.f32(t, "x", {2, 3}));
  CHECK_THROWS_WITH(a.f32(t, "x", {3, 2}), Catch::Contains("op(cpu): x has shape [2, 3], expected [3, 2]"));
  auto u = Tensor::zeros({2, 3}, DType::f64);
  CHECK_THROWS_WITH(a.f32(u, "w", {2, 3}), Catch::Contains("float32"));
  CHECK_THROWS_WITH(a.f32(Tensor(), "b"), Catch::Contains("b is undefined"));
  auto v = Tensor::zeros({5});
  CHECK_THROWS_WITH(a.same_numel(t, "x", v, "y"), Catch::Contains("differ in size"));
  CHECK_THROWS_WITH(a.i32(t, "labels"), Catch::Contains("expected int32"));
}
