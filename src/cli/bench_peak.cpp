// hpctrain bench peak [--size N] [--reps R] [--dtype bf16|fp32|both] [--out FILE]: this process's
// matrix-multiply peak, measured with one large oneDNN matmul (N x N times N x N; bf16 inputs with
// fp32 accumulation and output, or fp32), the denominator of model FLOP utilisation in
// scripts/bench_vs_torch.sh. Threads: oneDNN's (OMP_NUM_THREADS). Reports GFLOP/s = 2 N^3 / time
// (best and mean of R timed runs after one untimed) and the ISA oneDNN dispatches to.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace ht {
namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

struct Peak {
  double best_gflops = 0, mean_gflops = 0;
  std::string impl;
};

// One N x N x N matmul in `dt` (inputs; f32 output), timed `reps` times after one untimed run.
Peak measure(dnnl::memory::data_type dt, int64_t n, int reps) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::dims d = {n, n};
  memory::desc a_md(d, dt, memory::format_tag::ab), b_md(d, dt, memory::format_tag::any),
      c_md(d, memory::data_type::f32, memory::format_tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), eng);
  // Inputs: random fp32 reordered to the primitive's types and layouts (bf16 rounds them).
  std::vector<float> host(static_cast<size_t>(n * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : host) x = u(rng);
  memory src_f32({d, memory::data_type::f32, memory::format_tag::ab}, eng, host.data());
  memory a(pd.src_desc(), eng), b(pd.weights_desc(), eng), c(pd.dst_desc(), eng);
  reorder(src_f32, a).execute(s, src_f32, a);
  reorder(src_f32, b).execute(s, src_f32, b);
  matmul mm(pd);
  auto run = [&] {
    mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  };
  run();
  Peak p;
  double total = 0, best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += t;
    best = std::min(best, t);
  }
  const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  p.best_gflops = flop / best / 1e9;
  p.mean_gflops = flop / (total / reps) / 1e9;
  p.impl = pd.impl_info_str();
  return p;
}

}  // namespace

int bench_peak(const Args& args) {
  int64_t size = 2048;
  int reps = 10;
  std::string dtype = "both", out;
  CommandLine cl("hpctrain bench peak", "usage: hpctrain bench peak [--size N] [--reps R] [--dtype bf16|fp32|both] [--out FILE]\n"
                                        "  one large oneDNN matmul: this process's multiply peak (threads: OMP_NUM_THREADS)");
  cl.option("size", &size, "N", "matrix size (N x N times N x N)")
      .option("reps", &reps, "R", "timed runs (after one untimed)")
      .option("dtype", &dtype, "T", "bf16 (fp32 accumulation), fp32, or both")
      .option("out", &out, "FILE", "write the results as JSON to this file");
  if (!cl.parse(args)) return kExitOk;
  if (size < 64 || size > 32768) cl.fail("--size must be in [64, 32768]");
  if (reps < 1) cl.fail("--reps must be >= 1");
  if (dtype != "bf16" && dtype != "fp32" && dtype != "both") cl.fail("--dtype must be bf16, fp32 or both");
  nlohmann::json j = {{"benchmark", "peak"}, {"size", size}, {"reps", reps},
                      {"isa", isa_name(dnnl::get_effective_cpu_isa())}};
  for (const char* t : {"bf16", "fp32"}) {
    if (dtype != "both" && dtype != t) continue;
    const Peak p = measure(std::string(t) == "bf16" ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32,
                           size, reps);
    j[t] = {{"best_gflops", p.best_gflops}, {"mean_gflops", p.mean_gflops}, {"impl", p.impl}};
    std::ostringstream line;  // ostream's number formats
    line << "bench peak: " << t << " matmul " << size << "^3: " << p.best_gflops << " GFLOP/s best, " << p.mean_gflops
         << " mean (" << p.impl << ", ISA " << j["isa"].get<std::string>() << ")";
    log_raw_out(line.str());
  }
  if (!out.empty()) {
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    if (!f) throw RuntimeError("hpctrain bench peak: cannot write " + out);
  }
  return kExitOk;
}

}  // namespace ht
