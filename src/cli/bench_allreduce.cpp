// hpctrain bench allreduce: allreduce bandwidth in the nccl-tests style (all_reduce_perf), on the
// communicator of the device (MPI on CPU, NCCL on CUDA).
//
// For each size (min..max bytes, doubling): a barrier, warm-up iterations, timed iterations of an
// in-place allreduce_sum, time per iteration = the slowest rank's mean. algbw = bytes / time,
// busbw = algbw * 2(n-1)/n (the bytes each rank's link carries in a ring allreduce, comparable across
// rank counts; nccl-tests' PERFORMANCE.md). Then a separate correctness pass: rank r holds
// (r+1)*(i%7+1) in element i, so the sum (i%7+1)*n(n+1)/2 is an exact small integer in float, and
// every element that differs is counted. The gradient-bucket path (GradBucketer over a buffer of
// several buckets, parameters marked in backward order, averaged) is measured and checked the same
// way at --bucket-mb. Rank 0 prints the table and writes JSON; exit 1 on any wrong element.
//
// --grad-dtype bf16 (dist.grad_dtype): the data travels as bfloat16, which only the gradient path
// does (Communicator::start_allreduce_average), so the sweep times that path's average instead of
// allreduce_sum; sizes, algbw and busbw count the wire bytes (2 per element), bucket sizes too. The
// check then allows the bf16 roundings: each partial sum rounded once, at most (n-1) x 2^-8 relative
// (the pattern's values below 256 are exact in bf16, so with up to 8 ranks every element is exact).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/bucketer.hpp"
#include "mpi/gpu/communicator_factory.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/tensor.hpp"

#if defined(HT_HAVE_CUDA) && __has_include("cuda/cuda_context.hpp")
#include "cuda/cuda_context.hpp"
#define HT_BENCH_CUDA 1
#endif

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int iters = 20;
  int warmup = 5;
  double bucket_mb = 25;
  int bucket_count = 4;  // buckets in the gradient-bucket measurement
  std::string device = "cpu";
  std::string grad_dtype = "fp32";  // dist.grad_dtype: fp32 or bf16
  std::string out;
  double timeout_s = 300;
  int corrupt_rank = -1;  // test hook: this rank damages one reduced element before checking
};

// Waits for the device so host timers see finished work (CPU: nothing to wait for).
void device_sync(Device d) {
#if defined(HT_BENCH_CUDA)
  if (d == Device::cuda) cuda::synchronize();
#else
  (void)d;
#endif
}

// "8", "64K", "4M", "1G" (powers of 1024, as nccl-tests' -b/-e) -> bytes.
int64_t parse_bytes(const std::string& opt, const std::string& v) {
  size_t pos = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = std::string::npos;
  }
  int64_t mult = 1;
  if (pos != std::string::npos && pos + 1 == v.size()) {
    switch (v[pos]) {
      case 'K': case 'k': mult = int64_t{1} << 10; break;
      case 'M': case 'm': mult = int64_t{1} << 20; break;
      case 'G': case 'g': mult = int64_t{1} << 30; break;
      default: pos = std::string::npos;
    }
    if (pos != std::string::npos) pos = v.size();
  }
  if (pos != v.size() || x < 0)
    throw UsageError("hpctrain bench allreduce: " + opt + ": expected bytes like 8, 64K, 4M or 1G, got '" + v + "'");
  return x * mult;
}

float pattern_value(int64_t i, int rank) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)); }
float expected_sum(int64_t i, int n) { return static_cast<float>(static_cast<int>(i % 7 + 1) * n * (n + 1) / 2); }

// Host pattern -> device tensor.
void fill_pattern(Tensor& buf, int rank) {
  Tensor host = Tensor::empty({buf.numel()}, DType::f32, Device::cpu);
  auto h = host.span<float>();
  for (int64_t i = 0; i < buf.numel(); ++i) h[static_cast<size_t>(i)] = pattern_value(i, rank);
  buf.copy_from(host);
}

// Counts elements of buf for which ok(i, value) is false, over all ranks.
template <class F>
long long count_wrong(const Tensor& buf, F ok, bool corrupt) {
  Tensor host = buf.to(Device::cpu);
  auto h = host.span<float>();
  if (corrupt && !h.empty()) h[h.size() / 2] += 1.0f;
  long long bad = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    if (!ok(i, h[static_cast<size_t>(i)])) ++bad;
  return static_cast<long long>(dist_sum(static_cast<double>(bad)));  // exact below 2^53
}

std::span<float> device_span(const Tensor& t) { return {t.data<float>(), static_cast<size_t>(t.numel())}; }

struct Row {
  std::string path;  // "allreduce_sum" or "bucketer"
  int64_t bytes = 0, count = 0;
  double time_us = 0, time_min_us = 0, algbw = 0, busbw = 0;
  long long wrong = 0;
  int buckets = 0;
};

// Runs `op` o.warmup times untimed, then o.iters times timed between a barrier and the last device
// sync, and fills r's times (us: the slowest rank's mean, and its fastest iteration) and bandwidths
// (GB/s, from r.bytes).
template <class Op> void time_into(Row& r, Op&& op, const Options& o, Device dev, double bus_factor) {
  for (int i = 0; i < o.warmup; ++i) op();
  device_sync(dev);
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  double best = 1e30;
  for (int i = 0; i < o.iters; ++i) {
    auto ti = Clock::now();
    op();
    device_sync(dev);
    best = std::min(best, seconds_since(ti));
  }
  const double sec = dist_max(seconds_since(t0)) / o.iters;
  r.time_us = sec * 1e6;
  r.time_min_us = dist_max(best) * 1e6;
  r.algbw = static_cast<double>(r.bytes) / sec / 1e9;
  r.busbw = r.algbw * bus_factor;
}

// The 1-minute load average (Linux /proc/loadavg; -1 if unavailable): shared machines make the
// timings noisy, so the JSON records how busy this one was.
double load_avg() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  if (!(f >> v)) v = -1;
  return v;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

int bench_allreduce(const Args& args) {
  Options o;
  std::string min_bytes = "8", max_bytes = "256M";
  CommandLine cl("hpctrain bench allreduce", "usage: [mpirun -np N] hpctrain bench allreduce [options]");
  cl.option("min-bytes", &min_bytes, "BYTES", "smallest message in bytes (>= 4; K, M, G suffixes)")
      .option("max-bytes", &max_bytes, "BYTES", "largest message in bytes (sizes double)")
      .option("iters", &o.iters, "N", "timed iterations per size")
      .option("warmup", &o.warmup, "N", "untimed iterations per size")
      .option("bucket-mb", &o.bucket_mb, "MB", "gradient bucket size in MiB (dist.bucket_mb)")
      .option("bucket-count", &o.bucket_count, "N", "buckets in the gradient-bucket measurement (0 = skip it)")
      .option("device", &o.device, "D", "cpu (MPI) or cuda (NCCL)")
      .option("grad-dtype", &o.grad_dtype, "T", "fp32 or bf16: the wire type of gradient averages (dist.grad_dtype)")
      .option("timeout-s", &o.timeout_s, "S", "communicator time limit (dist.timeout_s)")
      .option("out", &o.out, "FILE", "write the results as JSON to this file (rank 0)")
      .option("test-corrupt-rank", &o.corrupt_rank, "R", "test hook: this rank damages one result element");
  if (!cl.parse(args)) return kExitOk;
  o.min_bytes = parse_bytes("--min-bytes", min_bytes);
  o.max_bytes = parse_bytes("--max-bytes", max_bytes);
  const auto& d = dist();
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes)
    throw UsageError("hpctrain bench allreduce: --min-bytes must be >= 4 and <= --max-bytes, got " +
                     std::to_string(o.min_bytes) + " and " + std::to_string(o.max_bytes));
  if (o.iters < 1 || o.warmup < 0)
    throw UsageError("hpctrain bench allreduce: --iters must be >= 1 and --warmup >= 0");
  if (o.bucket_count < 0) throw UsageError("hpctrain bench allreduce: --bucket-count must be >= 0");
  if (o.grad_dtype != "fp32" && o.grad_dtype != "bf16")
    throw UsageError("hpctrain bench allreduce: --grad-dtype must be fp32 or bf16, got '" + o.grad_dtype + "'");
  const WireDType wire = o.grad_dtype == "bf16" ? WireDType::bf16 : WireDType::f32;
  const int64_t wb = wire_bytes(wire);
  Device dev;
  if (o.device == "cpu") {
    dev = Device::cpu;
  } else if (o.device == "cuda") {
#if defined(HT_BENCH_CUDA)
    dev = Device::cuda;
    cuda::init(d.local_rank);
#else
    throw UsageError("hpctrain bench allreduce: --device cuda: this hpctrain was built without the CUDA backend");
#endif
  } else {
    throw UsageError("hpctrain bench allreduce: --device must be cpu or cuda, got '" + o.device + "'");
  }

  const double load_start = load_avg();
  auto comm = make_communicator(dev, false, o.timeout_s);
  const int n = comm->world_size(), rank = comm->rank();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  std::vector<Row> rows;
  if (wire != WireDType::f32 && n > 1) comm->set_wire_dtype(wire);  // UsageError where unsupported
  // bf16 wire: each partial sum rounded once to bf16 (relative error <= 2^-8 each).
  const float tol = wire == WireDType::f32 ? 0.0f : static_cast<float>(n - 1) * 0x1p-8f;
  auto near = [tol](float got, float want) { return tol == 0 ? got == want : std::abs(got - want) <= tol * std::abs(want); };

  // ---- sweep: in-place allreduce_sum ---------------------------------------------------------
  const int64_t max_count = o.max_bytes / wb;
  Tensor buf = Tensor::zeros({max_count}, DType::f32, dev);
  // fp32: in-place allreduce_sum. bf16: the gradient path's average (the only one with a bf16 wire).
  const bool average = wire != WireDType::f32;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    Row r;
    r.path = average ? "average" : "allreduce_sum";
    r.count = bytes / wb;
    r.bytes = r.count * wb;
    Tensor part = buf.slice_flat(0, {r.count});
    auto span = device_span(part);
    auto op = [&] {
      if (!average) return comm->allreduce_sum(span);
      comm->start_allreduce_average(span);
      comm->wait_all();
    };
    part.zero_();  // zeros stay zeros under repeated sums: no overflow, no denormals
    time_into(r, op, o, dev, bus_factor);
    // Correctness: a separate pass with exactly predictable data.
    fill_pattern(part, rank);
    op();
    device_sync(dev);
    const float div = average ? static_cast<float>(n) : 1.0f;
    r.wrong = count_wrong(part, [&](int64_t i, float got) { return near(got, expected_sum(i, n) / div); },
                          rank == o.corrupt_rank);
    rows.push_back(r);
  }
  buf = Tensor();

  // ---- gradient-bucket path: GradBucketer over bucket_count buckets, marked in backward order ----
  if (o.bucket_count > 0) {
    const int64_t bucket_floats = static_cast<int64_t>(o.bucket_mb * 1024 * 1024 / static_cast<double>(wb));
    const int per_bucket = 8;  // parameters per bucket
    const int64_t pcount = std::max<int64_t>(1, bucket_floats / per_bucket);
    std::vector<ParamSlice> params;
    for (int i = 0; i < o.bucket_count * per_bucket; ++i) params.push_back({i * pcount, pcount});
    const int64_t total = pcount * static_cast<int64_t>(params.size());
    Tensor grads = Tensor::zeros({total}, DType::f32, dev);
    GradBucketer bk(*comm, device_span(grads), params, o.bucket_mb, wire);
    auto step = [&] {
      bk.begin_step();
      for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) bk.mark_ready(i);
      bk.finish();
    };
    Row r;
    r.path = "bucketer";
    r.count = total;
    r.bytes = total * wb;
    r.buckets = bk.num_buckets();
    time_into(r, step, o, dev, bus_factor);
    fill_pattern(grads, rank);
    step();
    device_sync(dev);
    // The expected average, computed as the communicator does: exact sum, one correctly rounded division.
    r.wrong = count_wrong(grads, [&](int64_t i, float got) { return near(got, expected_sum(i, n) / static_cast<float>(n)); },
                          rank == o.corrupt_rank);
    rows.push_back(r);
  }

  long long wrong_total = 0;
  for (const auto& r : rows) wrong_total += r.wrong;

  if (rank == 0) {
    std::ostringstream os;
    os << "# hpctrain bench allreduce: " << comm->name() << " on " << device_name(dev) << ", " << n
       << " rank(s), in place, " << (average ? "averages with a bf16 wire" : "float32") << ", " << o.warmup << " warm-up + " << o.iters << " timed iterations per size\n"
       << "# time_us: slowest rank's mean (min_us: its fastest iteration); busbw = algbw * 2(n-1)/n\n";
    os << "# size(B) counts wire bytes (" << wb << " per element)\n";
    os << std::setw(10) << "path" << std::setw(14) << "size(B)" << std::setw(12) << "count" << std::setw(12)
       << "time_us" << std::setw(12) << "min_us" << std::setw(11) << "algbw_GB/s" << std::setw(11) << "busbw_GB/s" << std::setw(8) << "#wrong"
       << "\n";
    for (const auto& r : rows)
      os << std::setw(10) << (r.path == "allreduce_sum" ? std::string("allreduce") : r.path) << std::setw(14) << r.bytes
         << std::setw(12) << r.count << std::setw(12) << std::fixed << std::setprecision(1) << r.time_us
         << std::setw(12) << r.time_min_us << std::setw(11) << std::setprecision(3) << r.algbw << std::setw(11) << r.busbw << std::setw(8) << r.wrong
         << "\n";
    if (o.bucket_count > 0)
      os << "# bucketer: " << o.bucket_count << " buckets of " << o.bucket_mb
         << " MiB (8 parameters each), marked in backward order, averaged\n";
    os << "# wrong elements: " << wrong_total << (wrong_total ? "  FAILED" : "  OK") << "\n";
    log_raw_out(os.str());

    if (!o.out.empty()) {
      nlohmann::json j;
      j["benchmark"] = "allreduce";
      j["date_utc"] = now_utc();
      j["communicator"] = comm->name();
      j["device"] = device_name(dev);
      j["world_size"] = n;
      j["hosts"] = d.hosts;
      j["dtype"] = average ? "bfloat16" : "float32";  // on the wire
      j["grad_dtype"] = o.grad_dtype;
      j["bytes_per_element"] = wb;
      j["iters"] = o.iters;
      j["warmup"] = o.warmup;
      j["bucket_mb"] = o.bucket_mb;
      j["bucket_count"] = o.bucket_count;
      j["busbw_factor"] = bus_factor;
      j["wrong_total"] = wrong_total;
      j["load_avg_1min_start"] = load_start;
      j["load_avg_1min_end"] = load_avg();
      j["cores"] = static_cast<int>(std::thread::hardware_concurrency());
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& r : rows) {
        nlohmann::json e = {{"path", r.path},          {"bytes", r.bytes},       {"count", r.count},
                            {"time_us", r.time_us},    {"time_min_us", r.time_min_us}, {"algbw_GBps", r.algbw},  {"busbw_GBps", r.busbw},
                            {"wrong", r.wrong}};
        if (r.path == "bucketer") e["buckets"] = r.buckets;
        arr.push_back(e);
      }
      j["results"] = arr;
      std::ofstream f(o.out);
      f << j.dump(2) << "\n";
      if (!f) throw RuntimeError("hpctrain bench allreduce: cannot write " + o.out);
    }
  }
  return wrong_total ? kExitRuntime : kExitOk;
}

}  // namespace ht
