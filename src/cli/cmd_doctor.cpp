// hpctrain doctor: per-rank environment diagnosis. Every rank probes its own environment (GPU driver
// and devices, the GPU it would bind, cuDNN/NCCL/MPI/HDF5 versions, its binary, the run directory's
// file system; src/cli/doctor_probe.hpp), rank 0 gathers the typed reports (src/cli/doctor_report.hpp),
// analyses them (src/cli/doctor_analysis.hpp), prints one table and the list of problems, each with its
// likely fix (src/cli/doctor_print.hpp), then all ranks run a small allreduce (MPI, and NCCL in CUDA
// builds with GPUs).
//
// Exit code: 0 when no problem of severity error was found, 1 otherwise; every rank returns the same.
// By default the checks are those of a GPU run (--device cuda): a rank without a usable GPU is an error,
// so on a machine without GPUs doctor reports the reason and exits 1. --device cpu checks a CPU run:
// the GPU section is then informational.
//
// Tests fake the environment through HT_TEST_FAULTS (doctor.* names, src/cli/doctor_probe.hpp) and
// HT_LIBCUDA (cuda/gpu_env.hpp) / HT_LIBNVML (cuda/nvml_monitor.hpp).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "cuda/check.hpp"
#include "mpi/check.hpp"
#include "cuda/cuda_context.hpp"
#include "mpi/communicator.hpp"
#include "mpi/collective_guard.hpp"
#include "mpi/dist.hpp"
#include "mpi/gpu/nccl_communicator.hpp"
#include "mpi/nccl_ras.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/doctor_analysis.hpp"
#include "src/cli/doctor_print.hpp"
#include "src/cli/doctor_probe.hpp"
#include "base/stats.hpp"
#include "src/cli/doctor_qualify.hpp"
#include "src/cli/doctor_report.hpp"

namespace ht {
namespace {

namespace po = boost::program_options;
using nlohmann::json;

void print_help() {
  log_raw_out("usage: hpctrain doctor [--run-dir DIR] [--device cuda|cpu] [--allow-shared-gpu]\n"
               "                      [--allreduce-mb MB] [--min-free-gb GB] [--timeout-s S] [--json FILE]\n"
               "Run under the same launcher as training (mpirun -np 8 hpctrain doctor). Each rank reports\n"
               "its host, local rank and the GPU it would bind; rank 0 prints one table and every problem\n"
               "found with its likely fix. Exit code 0: no problem; 1: at least one problem.\n"
               "  --run-dir DIR       run directory to check (free space, file system, locking); default runs\n"
               "  --device cuda|cpu   checks for a GPU run (default; no GPU is a problem) or a CPU run\n"
               "  --allow-shared-gpu  several ranks on one GPU is intended (as --dist.allow_shared_gpu)\n"
               "  --allreduce-mb MB   size of the test allreduce (default 4)\n"
               "  --min-free-gb GB    less free space than this in the run directory is a problem (default 2)\n"
               "  --timeout-s S       time limit of NCCL initialisation and of each test allreduce (default 60)\n"
               "  --json FILE         also write the full report as JSON (rank 0)\n"
               "  --qualify           also rate each node: a GEMM on every rank's device and the network\n"
               "                      between every pair of nodes; nodes below a fraction of the median\n"
               "                      node are named and make the exit code 1\n"
               "  --qualify-fraction F  that fraction (default 0.8, in (0, 1])\n"
               "  --qualify-seconds S   time of the compute check per rank (default 2)\n");
}

/// Parses the options (long options only, "--name value" or "--name=value", the last one given wins).
/// Throws UsageError naming the option for an unknown option, a missing value, a --device other than
/// cuda or cpu, and a number that is not a non-negative number.
DoctorOptions parse_options(const Args& args) {
  po::options_description desc;
  desc.add_options()  // values stay text here: they are checked below, with messages naming the option
      ("run-dir", po::value<std::string>())
      ("device", po::value<std::string>())
      ("allow-shared-gpu", po::bool_switch())
      ("allreduce-mb", po::value<std::string>())
      ("min-free-gb", po::value<std::string>())
      ("timeout-s", po::value<std::string>())
      ("json", po::value<std::string>())
      ("qualify", po::bool_switch())
      ("qualify-fraction", po::value<std::string>())
      ("qualify-seconds", po::value<std::string>());
  namespace style = po::command_line_style;
  po::parsed_options parsed(&desc);
  try {
    parsed = po::command_line_parser(args)
                 .options(desc)
                 .style(style::allow_long | style::long_allow_adjacent | style::long_allow_next)
                 .allow_unregistered()
                 .run();
  } catch (const po::invalid_command_line_syntax& e) {
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter)
      throw UsageError("hpctrain doctor: option " + e.get_option_name() + " needs a value");
    throw UsageError(std::string("hpctrain doctor: ") + e.what() + " (see hpctrain doctor --help)");
  } catch (const po::error& e) {
    throw UsageError(std::string("hpctrain doctor: ") + e.what() + " (see hpctrain doctor --help)");
  }
  DoctorOptions o;
  for (const po::option& opt : parsed.options) {
    if (opt.unregistered || opt.position_key >= 0)
      throw UsageError("hpctrain doctor: unknown option '" +
                       (opt.original_tokens.empty() ? opt.string_key : opt.original_tokens.front()) +
                       "' (see hpctrain doctor --help)");
    const std::string a = "--" + opt.string_key;
    const std::string v = opt.value.empty() ? std::string() : opt.value.front();
    auto number = [&] {
      try {
        size_t pos = 0;
        double d = std::stod(v, &pos);
        if (pos != v.size() || !(d >= 0)) throw std::invalid_argument(v);
        return d;
      } catch (const std::exception&) {
        throw UsageError("hpctrain doctor: option " + a + ": '" + v + "' is not a non-negative number");
      }
    };
    if (opt.string_key == "run-dir") o.run_dir = v;
    else if (opt.string_key == "device") {
      if (v != "cuda" && v != "cpu") throw UsageError("hpctrain doctor: option --device: '" + v + "' is not cuda or cpu");
      o.device = v == "cuda" ? DoctorDevice::cuda : DoctorDevice::cpu;
    } else if (opt.string_key == "allow-shared-gpu") o.allow_shared_gpu = true;
    else if (opt.string_key == "allreduce-mb") o.allreduce_mb = number();
    else if (opt.string_key == "min-free-gb") o.min_free_gb = number();
    else if (opt.string_key == "timeout-s") o.timeout_s = number();
    else if (opt.string_key == "json") o.json_path = v;
    else if (opt.string_key == "qualify") o.qualify = true;
    else if (opt.string_key == "qualify-fraction") {
      o.qualify_fraction = number();
      if (!(o.qualify_fraction > 0 && o.qualify_fraction <= 1))
        throw UsageError("hpctrain doctor: option --qualify-fraction: '" + v + "' is not in (0, 1]");
    } else if (opt.string_key == "qualify-seconds") {
      o.qualify_seconds = number();
      if (!(o.qualify_seconds > 0 && o.qualify_seconds <= 600))
        throw UsageError("hpctrain doctor: option --qualify-seconds: '" + v + "' is not in (0, 600]");
    }
  }
  return o;
}

/// Gathers each rank's report to rank 0 as JSON (empty vector elsewhere). Collective; waits as long
/// as every peer answers (each rank's checks may take long).
std::vector<RankReport> gather_reports(const RankReport& mine, const DistContext& d) {
  const std::vector<std::string> all =
      dist_allgather_strings(json(mine).dump(), "doctor: every rank's report", WaitKind::while_peers_answer);
  std::vector<RankReport> out;
  if (d.rank == 0)
    for (const std::string& r : all) out.push_back(json::parse(r).get<RankReport>());
  return out;
}

// ---- allreduce checks (collective: every rank calls them) ----------------------------------------
size_t allreduce_count(const DoctorOptions& o) {
  return std::max<size_t>(1, static_cast<size_t>(o.allreduce_mb * (1 << 20) / sizeof(float)));
}

/// Fills the timing of `res` from this rank's total of `iters` timed allreduces (the slowest rank's).
void finish_timing(AllreduceResult& res, double elapsed, int iters, bool ok, const DistContext& d) {
  double avg = dist_max(static_cast<long long>(elapsed / iters * 1e9)) / 1e9;
  res.correct = !dist_any(!ok);
  res.ms = avg * 1e3;
  double bytes = static_cast<double>(res.count) * sizeof(float);
  res.algbw_gbs = avg > 0 ? bytes / avg / 1e9 : 0;
  res.busbw_gbs = d.world_size > 1 ? res.algbw_gbs * 2.0 * (d.world_size - 1) / d.world_size : 0;
}

AllreduceResult mpi_allreduce_check(const DoctorOptions& o, const DistContext& d) {
  AllreduceResult res;
  res.backend = "MPI";
  res.count = allreduce_count(o);
  std::vector<float> buf(res.count);
  const int iters = 5;
  double elapsed = 0;
  bool ok = true;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    std::fill(buf.begin(), buf.end(), static_cast<float>(d.rank + 1));
    HT_MPI_CHECK(MPI_Barrier(d.world));
    double t0 = MPI_Wtime();
    HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(res.count), MPI_FLOAT, MPI_SUM, d.world));
    double t1 = MPI_Wtime();
    if (it > 0) elapsed += t1 - t0;
    const float want = static_cast<float>(d.world_size) * (d.world_size + 1) / 2.f;
    for (size_t i = 0; i < res.count; i += 997) ok &= buf[i] == want;
    ok &= buf.back() == want;
  }
  finish_timing(res, elapsed, iters, ok, d);
  return res;
}

#if defined(HT_HAVE_CUDA)
/// NCCL allreduce on each rank's bound GPU, through the same time-limited communicator as training
/// (mpi/gpu/nccl_communicator.cu): initialisation and every collective end after `o.timeout_s`, so a
/// stalled rank or a misconfigured network gives an error naming the rank and the NCCL_* settings
/// instead of hanging the doctor. Local setup failures are agreed on first, so no rank enters NCCL
/// initialisation alone.
AllreduceResult nccl_allreduce_check(const DoctorOptions& o, const DistContext& d, int device) {
  AllreduceResult res;
  res.backend = "NCCL";
  res.count = allreduce_count(o);
  std::string err;
  try {
    cuda::init(device);
  } catch (const std::exception& e) {
    err = std::string("CUDA setup on device ") + std::to_string(device) + ": " + e.what();
  }
  if (dist_any(!err.empty())) {
    res.error = err.empty() ? "another rank failed to set up its GPU" : err;
    return res;
  }
  bool ok = false;
  double elapsed = 0;
  const int iters = 5;
  try {
    std::unique_ptr<Communicator> comm = make_nccl_communicator(o.timeout_s);
    float* dbuf = nullptr;
    HT_CUDA_CHECK(cudaMalloc(&dbuf, res.count * sizeof(float)));
    std::unique_ptr<float, void (*)(float*)> guard(dbuf, [](float* p) { cudaFree(p); });
    std::vector<float> host(res.count, static_cast<float>(d.rank + 1));
    std::span<float> data(dbuf, res.count);
    // The fill and the read-back go on the compute stream, which the communicator orders its NCCL
    // stream after (and before again on completion). A plain cudaMemcpy would run on the legacy
    // default stream, which the non-blocking NCCL and compute streams do not wait for: with pageable
    // memory it may return before the copy has landed, so the allreduce could read a partial fill.
    const cudaStream_t stream = cuda::ctx().compute;
    for (int it = 0; it <= iters; ++it) {
      HT_CUDA_CHECK(cudaMemcpyAsync(dbuf, host.data(), res.count * sizeof(float), cudaMemcpyHostToDevice, stream));
      HT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the fill is complete before the timed region
      HT_MPI_CHECK(MPI_Barrier(d.world));
      auto t0 = std::chrono::steady_clock::now();
      comm->allreduce_sum(data);  // blocking: returns after the sum is in dbuf (or throws on the limit)
      auto t1 = std::chrono::steady_clock::now();
      if (it > 0) elapsed += std::chrono::duration<double>(t1 - t0).count();
    }
    // NCCL's own view of the job (RAS, NCCL 2.24+) while the communicator lives: rank 0 asks its
    // node's service, which gathers every process's state within 3 s.
    if (d.rank == 0) {
      const RasStatus ras = nccl_ras_query(nccl_ras_address(), 3, 8);
      res.ras_reached = ras.reached;
      res.ras = ras.reached && ras.error.empty() ? nccl_ras_problems(ras.report)
                : ras.reached ? ras.error
                              : ras.error + " (NCCL older than 2.24, NCCL_RAS_ENABLE=0, or NCCL_RAS_ADDR elsewhere)";
    }
    HT_MPI_CHECK(MPI_Barrier(d.world));
    std::vector<float> back(res.count);
    HT_CUDA_CHECK(cudaMemcpyAsync(back.data(), dbuf, res.count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    HT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const float want = static_cast<float>(d.world_size) * (d.world_size + 1) / 2.f;
    ok = std::all_of(back.begin(), back.end(), [&](float v) { return v == want; });
  } catch (const std::exception& e) {
    err = e.what();
  }
  // Every rank gets here: a failed or timed-out rank has aborted its communicator, so its peers'
  // collectives fail or time out too, each within o.timeout_s.
  if (dist_any(!err.empty())) {
    res.error = err.empty() ? "NCCL failed on another rank" : err;
    return res;
  }
  finish_timing(res, elapsed, iters, ok, d);
  return res;
}
#endif

AllreduceResult skipped_nccl(const char* why) {
  AllreduceResult skipped;
  skipped.backend = "NCCL";
  skipped.error = why;
  return skipped;
}

}  // namespace

int cmd_doctor(const Args& args) {
  if (help_requested(args)) {
    if (dist().rank == 0) print_help();
    return kExitOk;
  }
  const DoctorOptions o = parse_options(args);
  const DistContext& d = dist();
  const TestFaults& faults = TestFaults::get();  // an invalid HT_TEST_FAULTS is a usage error before any probe
  if (faults.active() && d.rank == 0)
    log_raw_err("hpctrain doctor: warning: HT_TEST_FAULTS is set, injecting test faults: " + faults.spec());

  std::vector<RankReport> reps = gather_reports(probe_rank(o, d.rank, d.host), d);

  // Rank 0 decides the binding and whether NCCL can run (every rank has its own GPU), and tells everyone.
  DoctorReport report;
  std::vector<int> devices(static_cast<size_t>(d.world_size), -1);
  int run_nccl = 0;
  if (d.rank == 0) {
    Analysis a = analyse(reps, o);
    report.problems = std::move(a.problems);
    report.binding = std::move(a.plan);
    const bool real_gpus = !faults.has("doctor.gpu_uuids") && std::getenv("HT_LIBCUDA") == nullptr;
    run_nccl = nccl_check_possible(reps, report.binding, real_gpus);
    devices = report.binding.device;
  }
  std::vector<int> plan = devices;  // rank 0's plan: each rank's GPU, then whether to run NCCL
  plan.push_back(run_nccl);
  dist_broadcast_values(plan, "doctor: rank 0's GPU plan");
  run_nccl = plan.back();
  devices.assign(plan.begin(), plan.end() - 1);
  const int nccl_device = devices[static_cast<size_t>(d.rank)];

  report.allreduce.push_back(mpi_allreduce_check(o, d));
#if defined(HT_HAVE_CUDA)
  report.allreduce.push_back(run_nccl ? nccl_allreduce_check(o, d, nccl_device)
                                      : skipped_nccl("needs every rank on its own GPU"));
#else
  (void)nccl_device;
  report.allreduce.push_back(skipped_nccl("not built with CUDA"));
#endif

  // Node qualification: every rank measures, rank 0 rates the nodes (src/cli/doctor_qualify.hpp).
  std::vector<NodeQualification> nodes;
  std::string qualify_skipped;
  if (o.qualify) {
    const bool gpu = o.device == DoctorDevice::cuda;
    if (dist_any(gpu && nccl_device < 0)) {
      qualify_skipped = "node qualification skipped: a rank has no GPU of its own to measure (see the problems above)\n";
    } else {
#if defined(HT_HAVE_CUDA)
      if (gpu) HT_CUDA_CHECK(cudaSetDevice(nccl_device));
#endif
      double slowdown = 1;
      if (auto f = faults.text_for_rank("doctor.qualify_slowdown", d.rank)) {
        try {
          slowdown = std::stod(*f);
        } catch (const std::exception&) {
          slowdown = 0;
        }
        if (!(slowdown >= 1)) throw UsageError("HT_TEST_FAULTS: doctor.qualify_slowdown '" + *f + "' is not a number >= 1");
      }
      const std::vector<std::string> hosts =
          dist_allgather_strings(faults.text_for_rank("doctor.hosts", d.rank).value_or(d.host),
                                 "doctor --qualify: the host of every rank (MPI_Allgather)");
      QualifyMeasure m;
      m.gflops = qualify_compute(gpu ? Device::cuda : Device::cpu, o.qualify_seconds, slowdown);
      m.gbps_by_node = qualify_network(d, hosts, 8, 4, slowdown);
      // Rank 0 collects every rank's figures: 1 + K doubles each.
      const int K = static_cast<int>(std::max<size_t>(m.gbps_by_node.size(), 1));
      std::vector<double> mine(static_cast<size_t>(K) + 1, 0.0);
      mine[0] = m.gflops;
      std::copy(m.gbps_by_node.begin(), m.gbps_by_node.end(), mine.begin() + 1);
      const std::vector<double> all = dist_gather_to_root(mine, "doctor --qualify: the figures to rank 0");
      if (d.rank == 0) {
        std::vector<QualifyMeasure> ms(static_cast<size_t>(d.world_size));
        for (int r = 0; r < d.world_size; ++r) {
          const double* p = all.data() + static_cast<size_t>(r) * (K + 1);
          ms[static_cast<size_t>(r)].gflops = p[0];
          ms[static_cast<size_t>(r)].gbps_by_node.assign(p + 1, p + 1 + K);
        }
        nodes = qualify_nodes(hosts, ms, o.qualify_fraction);
      }
    }
  }

  int code = kExitOk;
  if (d.rank == 0) {
    for (const NodeQualification& n : nodes)
      if (n.slow_compute || n.slow_network)
        report.problems.push_back(Problem{Severity::error, "qualify",
                                          n.host + " (" + ranks_text(n.ranks) + ") is below " + std::to_string(o.qualify_fraction).substr(0, 4) +
                                              " x the median node in " +
                                              (n.slow_compute && n.slow_network ? "compute and network"
                                               : n.slow_compute                 ? "compute"
                                                                                : "network"),
                                          "leave the node out of the job (sbatch --exclude=" + n.host +
                                              ") and report it to the cluster's administrators"});
    for (auto& p : allreduce_problems(report.allreduce, run_nccl != 0)) report.problems.push_back(std::move(p));
    report.ranks = std::move(reps);
    report.exit_code = code = exit_code_for(report.problems);
    log_raw_out(format_report(report, o.device));
    if (o.qualify) log_raw_out(qualify_skipped.empty() ? format_qualification(nodes, o.qualify_fraction) : qualify_skipped);
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      json j = report;
      if (o.qualify) j["qualification"] = nodes;
      f << j.dump(2) << "\n";
      if (!f) throw RuntimeError("doctor: cannot write " + o.json_path);
    }
  }
  std::vector<int> rank0_code{code};
  dist_broadcast_values(rank0_code, "doctor: rank 0's exit code");
  return rank0_code[0];
}

}  // namespace ht
