// hpctrain doctor's analysis (src/cli/doctor_analysis.hpp) on hand-made reports: every problem kind it
// detects, with its exact text, and the clean case. Also the typed report's JSON (the --json layout),
// the doctor.* test faults applied to a report (src/cli/doctor_probe.hpp) and the printed report.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/test_faults.hpp"
#include "src/cli/doctor_analysis.hpp"
#include "src/cli/doctor_print.hpp"
#include "src/cli/doctor_probe.hpp"
#include "src/cli/doctor_report.hpp"

using namespace ht;

namespace {

/// A healthy rank on `host` that sees the GPUs `uuids` (CUDA 12.4 driver and runtime, cuDNN 9.1.0,
/// NCCL 2.23.4, HDF5 1.14.0 everywhere, a writable ext4 run directory with 100 GiB free).
RankReport rank_on(int rank, const std::string& host, std::vector<std::string> uuids) {
  RankReport r;
  r.rank = rank;
  r.host = host;
  r.pid = 1000 + rank;
  GpuEnv env;
  env.driver_loaded = true;
  env.init_result = 0;
  env.driver_version = env.runtime_version = 12040;
  for (size_t i = 0; i < uuids.size(); ++i)
    env.devices.push_back({static_cast<int>(i), "NVIDIA H200", uuids[i], uint64_t{141} << 30, 9, 0, "0000:65:00.0"});
  r.gpu = gpu_probe_from(env);
  r.cudnn = {90100, 90100};
  r.nccl = {22304, 22304};
  r.mpi_library = "Open MPI v4.1.6, package: Debian\nrelease date: Sep 30, 2023";
  r.mpi_standard = "3.1";
  r.exe_hash = "0123456789abcdef";
  r.hdf5_built = r.hdf5_runtime = "1.14.0";
  r.run_dir = {"runs", "/scratch/u", false, "ext4", false, 100.0 * (1ull << 30), true};
  return r;
}

/// Two healthy ranks on host a, each with its own GPU.
std::vector<RankReport> clean_pair() { return {rank_on(0, "a", {"GPU-0", "GPU-1"}), rank_on(1, "a", {"GPU-0", "GPU-1"})}; }

DoctorOptions gpu_run() { return DoctorOptions{}; }
DoctorOptions cpu_run() {
  DoctorOptions o;
  o.device = DoctorDevice::cpu;
  return o;
}

GpuProbe driver_missing() {
  GpuEnv env;
  env.libcuda = "libcuda.so.1";
  env.load_error = "libcuda.so.1: cannot open shared object file";
  return gpu_probe_from(env);
}

std::vector<std::string> whats(const std::vector<Problem>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.what);
  return out;
}

/// a's only problem (REQUIREs exactly one), after checking its area and text.
const Problem& only_problem(const Analysis& a, const std::string& area, const std::string& what) {
  REQUIRE(a.problems.size() == 1);
  CHECK(a.problems[0].area == area);
  CHECK(a.problems[0].what == what);
  return a.problems[0];
}

}  // namespace

TEST_CASE("doctor analysis: healthy ranks have no problem", "[doctor_analysis]") {
  Analysis a = analyse(clean_pair(), gpu_run());
  CHECK(a.problems.empty());
  CHECK(a.plan.local_rank == std::vector<int>{0, 1});
  CHECK(a.plan.device == std::vector<int>{0, 1});
  CHECK(a.plan.uuid == std::vector<std::string>{"GPU-0", "GPU-1"});
  CHECK(analyse(clean_pair(), cpu_run()).problems.empty());
  // Each rank seeing only its own GPU (srun --gpus-per-task=1) is clean too.
  Analysis own = analyse({rank_on(0, "a", {"GPU-aaa"}), rank_on(1, "a", {"GPU-bbb"})}, gpu_run());
  CHECK(own.problems.empty());
  CHECK(own.plan.uuid == std::vector<std::string>{"GPU-aaa", "GPU-bbb"});
  // A CPU-only build (no cuDNN, no NCCL) is not a library problem.
  auto cpu_build = clean_pair();
  for (auto& r : cpu_build) r.cudnn = r.nccl = {0, 0};
  CHECK(analyse(cpu_build, gpu_run()).problems.empty());
}

TEST_CASE("doctor analysis: a GPU not visible, grouped by host and reason", "[doctor_analysis]") {
  auto reps = clean_pair();
  reps.push_back(rank_on(2, "b", {"GPU-b0"}));
  reps[0].gpu = reps[1].gpu = driver_missing();
  GpuEnv hidden;
  hidden.driver_loaded = true;
  hidden.driver_version = 12040;
  hidden.visible_devices_set = true;
  hidden.visible_devices = "";
  hidden.init_result = 100;
  reps[2].gpu = gpu_probe_from(hidden);

  Analysis a = analyse(reps, gpu_run());
  REQUIRE(a.problems.size() == 2);  // no binding problem: ranks without a GPU are visibility problems
  CHECK(a.problems[0].severity == Severity::error);
  CHECK(a.problems[0].area == "gpu");
  CHECK(a.problems[0].what ==
        "ranks 0, 1 on a: no NVIDIA driver: libcuda.so.1 cannot be loaded (libcuda.so.1: cannot open shared object file)");
  CHECK(a.problems[0].fix.rfind("run on a GPU node", 0) == 0);
  CHECK(a.problems[1].what == "rank 2 on b: CUDA_VISIBLE_DEVICES='' hides every GPU");
  CHECK(a.problems[1].fix.rfind("unset CUDA_VISIBLE_DEVICES", 0) == 0);
  CHECK(a.plan.device == std::vector<int>{-1, -1, -1});

  // Checking a CPU run: the same findings are warnings, and say so in the fix.
  Analysis c = analyse(reps, cpu_run());
  REQUIRE(c.problems.size() == 2);
  CHECK(c.problems[0].severity == Severity::warning);
  CHECK(c.problems[0].fix.find("(only needed for train.device = cuda)") != std::string::npos);
  CHECK(exit_code_for(c.problems) == 0);
  CHECK(exit_code_for(a.problems) == 1);
}

TEST_CASE("doctor analysis: a driver older than the runtime within one major version", "[doctor_analysis]") {
  auto reps = clean_pair();
  for (auto& r : reps) r.gpu.driver_version = 12020;
  Analysis a = analyse(reps, gpu_run());
  REQUIRE(a.problems.size() == 1);  // once, not per rank
  CHECK(a.problems[0].severity == Severity::warning);
  CHECK(a.problems[0].what ==
        "rank 0: driver supports CUDA 12.2, older than the CUDA 12.4 runtime (works through minor version "
        "compatibility, PTX JIT excepted)");
  CHECK(a.problems[0].fix == "update the NVIDIA driver to one for CUDA 12.4 or newer");
}

TEST_CASE("doctor analysis: two ranks on one GPU", "[doctor_analysis]") {
  // Both ranks see the same GPU twice (CUDA_VISIBLE_DEVICES pointing every rank at one device).
  std::vector<RankReport> reps = {rank_on(0, "a", {"GPU-aaa", "GPU-aaa"}), rank_on(1, "a", {"GPU-aaa", "GPU-aaa"})};
  Analysis a = analyse(reps, gpu_run());
  REQUIRE(a.problems.size() == 2);
  CHECK(a.problems[0].what == "host a runs 2 ranks but has only 1 distinct GPU(s) visible");
  CHECK(a.problems[1].severity == Severity::error);
  CHECK(a.problems[1].area == "binding");
  CHECK(a.problems[1].what == "ranks 0 and 1 on host a would both bind GPU GPU-aaa");
  CHECK(a.problems[1].fix.find("--dist.allow_shared_gpu") != std::string::npos);

  DoctorOptions shared = gpu_run();
  shared.allow_shared_gpu = true;
  Analysis s = analyse(reps, shared);
  REQUIRE(s.problems.size() == 2);
  CHECK(s.problems[0].severity == Severity::warning);
  CHECK(s.problems[1].severity == Severity::warning);
  CHECK(exit_code_for(s.problems) == 0);
  CHECK(analyse(reps, cpu_run()).problems.empty());  // binding matters for a GPU run only
}

TEST_CASE("doctor analysis: fewer GPUs than ranks on a host", "[doctor_analysis]") {
  std::vector<RankReport> reps = {rank_on(0, "a", {"GPU-aaa"}), rank_on(1, "a", {"GPU-aaa"}),
                                  rank_on(2, "b", {"GPU-b0", "GPU-b1"})};
  Analysis a = analyse(reps, gpu_run());
  REQUIRE(a.problems.size() == 2);
  CHECK(a.problems[0].area == "binding");
  CHECK(a.problems[0].what == "host a runs 2 ranks but has only 1 distinct GPU(s) visible");
  CHECK(a.problems[0].fix.find("mpirun --map-by ppr:1:node") != std::string::npos);
  CHECK(a.problems[1].what == "ranks 0 and 1 on host a would both bind GPU GPU-aaa");
}

TEST_CASE("doctor analysis: cuDNN and NCCL against the build", "[doctor_analysis]") {
  auto reps = clean_pair();
  for (auto& r : reps) r.cudnn = {90100, -1};  // missing at run time on every rank: reported once
  Analysis a = analyse(reps, gpu_run());
  const Problem& missing = only_problem(a, "cudnn", "rank 0 on a: cuDNN library not found at run time (built with 9.1.0)");
  CHECK(missing.fix.find("LD_LIBRARY_PATH") != std::string::npos);

  reps = clean_pair();
  for (auto& r : reps) r.cudnn = {90100, 8907};
  CHECK(whats(analyse(reps, gpu_run()).problems) ==
        std::vector<std::string>{"rank 0 on a: cuDNN 8.9.7 at run time, built with 9.1.0 (different major version)"});

  reps = clean_pair();
  reps[1].nccl = {22304, 21803};  // only rank 1 is older; the ranks also differ
  a = analyse(reps, gpu_run());
  CHECK(whats(a.problems) ==  // groups are listed in the order of their values
        std::vector<std::string>{"rank 1 on a: NCCL 2.18.3 at run time is older than the 2.23.4 hpctrain was built with",
                                 "ranks load different NCCL versions: rank 1: 2.18.3 (built with 2.23.4); rank 0: "
                                 "2.23.4 (built with 2.23.4)"});
  CHECK(a.problems[1].area == "nccl");
  CHECK(a.problems[1].fix == "use the same software environment on every node");
}

TEST_CASE("doctor analysis: library versions differing between ranks", "[doctor_analysis]") {
  auto reps = clean_pair();
  reps[1].cudnn = {90100, 90200};  // newer than built: fine by itself, but ranks differ
  CHECK(whats(analyse(reps, gpu_run()).problems) ==
        std::vector<std::string>{"ranks load different cuDNN versions: rank 0: 9.1.0 (built with 9.1.0); rank 1: 9.2.0 "
                                 "(built with 9.1.0)"});

  reps = clean_pair();
  reps[1].mpi_library = "Open MPI v5.0.3\nmore lines";
  Analysis a = analyse(reps, gpu_run());
  only_problem(a, "mpi",
               "ranks run different MPI libraries: rank 0: Open MPI v4.1.6, package: Debian; rank 1: Open MPI v5.0.3");

  reps = clean_pair();
  reps[1].hdf5_runtime = "1.10.7";
  CHECK(whats(analyse(reps, gpu_run()).problems) ==
        std::vector<std::string>{
            "rank 1: HDF5 1.10.7 at run time, built with 1.14.0 (HDF5 refuses to run with mismatched headers)",
            "ranks load different HDF5 versions: rank 1: HDF5 1.10.7; rank 0: HDF5 1.14.0"});
  // The same wrong HDF5 everywhere: one mismatch line, no difference between ranks.
  for (auto& r : reps) r.hdf5_runtime = "1.10.7";
  CHECK(analyse(reps, gpu_run()).problems.size() == 1);
}

TEST_CASE("doctor analysis: different binaries across hosts", "[doctor_analysis]") {
  std::vector<RankReport> reps = {rank_on(0, "nodeA", {"GPU-0"}), rank_on(1, "nodeB", {"GPU-0"})};
  CHECK(analyse(reps, gpu_run()).problems.empty());  // same hash on both hosts
  reps[0].exe_hash = "1111";
  reps[1].exe_hash = "2222";
  Analysis a = analyse(reps, gpu_run());
  only_problem(a, "binary",
               "ranks run different hpctrain executables: rank 0: binary 1111 on nodeA; rank 1: binary 2222 on nodeB");
}

TEST_CASE("doctor analysis: HDF5 file locking on a network file system", "[doctor_analysis]") {
  auto reps = clean_pair();
  for (auto& r : reps) {
    r.run_dir.fs = "lustre";
    r.run_dir.network = true;
  }
  Analysis a = analyse(reps, gpu_run());
  const Problem& locking =  // once per host
      only_problem(a, "hdf5",
                   "run directory runs on host a is on lustre (a network file system) and HDF5 file locking is on "
                   "(HDF5_USE_FILE_LOCKING unset): opening files can fail with 'unable to lock file' or hang");
  CHECK(locking.fix.rfind("export HDF5_USE_FILE_LOCKING=FALSE", 0) == 0);

  for (auto& r : reps) r.hdf5_use_file_locking = "TRUE";
  a = analyse(reps, gpu_run());
  REQUIRE(a.problems.size() == 1);
  CHECK(a.problems[0].what.find("(HDF5_USE_FILE_LOCKING =TRUE)") != std::string::npos);
  for (const char* off : {"FALSE", "false", "BEST_EFFORT"}) {
    for (auto& r : reps) r.hdf5_use_file_locking = off;
    CHECK(analyse(reps, gpu_run()).problems.empty());
  }
  reps = clean_pair();
  reps[0].hdf5_use_file_locking = "TRUE";  // locking on a local file system is fine
  CHECK(analyse(reps, gpu_run()).problems.empty());
}

TEST_CASE("doctor analysis: low disk space and an unwritable run directory", "[doctor_analysis]") {
  std::vector<RankReport> reps = {rank_on(0, "a", {"GPU-0"}), rank_on(1, "b", {"GPU-0"})};
  for (auto& r : reps) r.run_dir.free_bytes = 1e6;
  Analysis a = analyse(reps, gpu_run());
  CHECK(whats(a.problems) == std::vector<std::string>{"run directory runs on host a has 0.00 GiB free (< 2.00 GiB)",
                                                      "run directory runs on host b has 0.00 GiB free (< 2.00 GiB)"});
  CHECK(a.problems[0].area == "disk");
  DoctorOptions none = gpu_run();
  none.min_free_gb = 0;
  CHECK(analyse(reps, none).problems.empty());
  for (auto& r : reps) r.run_dir.free_bytes = -1;  // unknown: not a problem
  CHECK(analyse(reps, gpu_run()).problems.empty());

  reps = clean_pair();
  reps[0].run_dir.writable = false;
  a = analyse(reps, gpu_run());
  CHECK(whats(a.problems) == std::vector<std::string>{"run directory runs on host a: /scratch/u is not writable"});
}

TEST_CASE("doctor analysis: allreduce results and whether NCCL can run", "[doctor_analysis]") {
  AllreduceResult mpi{"MPI", 262144, 0.5, 2, 2, true, ""};
  AllreduceResult nccl{"NCCL", 262144, 0, 0, 0, false, "needs every rank on its own GPU"};
  CHECK(allreduce_problems({mpi, nccl}, false).empty());  // a skipped NCCL check is no problem
  auto ps = allreduce_problems({mpi, nccl}, true);
  CHECK(whats(ps) == std::vector<std::string>{"NCCL allreduce failed: needs every rank on its own GPU"});
  mpi.correct = false;
  ps = allreduce_problems({mpi}, false);
  CHECK(whats(ps) == std::vector<std::string>{"MPI allreduce gave a wrong sum"});
  CHECK(ps[0].severity == Severity::error);

  auto reps = clean_pair();
  BindingPlan plan = analyse(reps, gpu_run()).plan;
  CHECK(nccl_check_possible(reps, plan, true));
  CHECK_FALSE(nccl_check_possible(reps, plan, false));  // faked GPUs
  std::vector<RankReport> shared = {rank_on(0, "a", {"GPU-aaa"}), rank_on(1, "a", {"GPU-aaa"})};
  CHECK_FALSE(nccl_check_possible(shared, analyse(shared, gpu_run()).plan, true));
  for (auto& r : reps) r.nccl = {0, 0};
  CHECK_FALSE(nccl_check_possible(reps, plan, true));  // not built with NCCL
}

TEST_CASE("doctor analysis: a rank's report survives JSON, and the --json layout", "[doctor_analysis]") {
  RankReport r = rank_on(1, "a", {"GPU-0"});
  r.gpu.cuda_visible_devices = "0";
  r.hdf5_use_file_locking = "FALSE";
  nlohmann::json j = r;
  CHECK(j["gpu"]["status"] == "ok");
  CHECK(j["gpu"]["ok"] == true);
  CHECK(j["gpu"]["devices"][0]["cc"] == "9.0");
  CHECK(j["gpu"]["devices"][0]["memory_bytes"] == uint64_t{141} << 30);
  CHECK(j["cudnn"]["built"] == 90100);
  CHECK(j["run_dir"]["free_bytes"] == 100.0 * (1ull << 30));
  RankReport back = j.get<RankReport>();
  CHECK(nlohmann::json(back) == j);
  CHECK(back.gpu.devices[0].cc_major == 9);

  RankReport bare = rank_on(0, "a", {});
  bare.gpu = driver_missing();
  nlohmann::json jb = bare;
  CHECK(jb["gpu"]["cuda_visible_devices"].is_null());
  CHECK(jb["hdf5_use_file_locking"].is_null());
  CHECK(jb["gpu"]["devices"] == nlohmann::json::array());
  CHECK(jb.get<RankReport>().gpu.status == GpuStatus::kDriverMissing);

  DoctorReport rep;
  rep.ranks = {bare, r};
  Analysis a = analyse(rep.ranks, cpu_run());
  rep.problems = a.problems;
  rep.binding = a.plan;
  rep.allreduce = {{"MPI", 4, 0.25, 1.5, 1.5, true, ""}};
  rep.exit_code = exit_code_for(rep.problems);
  nlohmann::json out = rep;
  CHECK(out["ranks"].size() == 2);
  CHECK(out["problems"][0]["severity"] == "warning");
  CHECK(out["problems"][0]["area"] == "gpu");
  CHECK(out["allreduce"][0] == nlohmann::json{{"backend", "MPI"}, {"floats", 4}, {"ms", 0.25}, {"algbw_gb_per_s", 1.5},
                                               {"busbw_gb_per_s", 1.5}, {"correct", true}, {"error", ""}});
  CHECK(out["binding"]["device"] == nlohmann::json{-1, 0});
  CHECK(out["binding"]["uuid"] == nlohmann::json{"", "GPU-0"});
  CHECK(out["binding"]["local_rank"] == nlohmann::json{0, 1});
  CHECK(out["exit_code"] == 0);
}

TEST_CASE("doctor analysis: test faults replace what was probed", "[doctor_analysis]") {
  TestFaults f = TestFaults::parse(
      "doctor.hosts=nodeA|nodeB;doctor.gpu_uuids=GPU-aaa,GPU-bbb|none;doctor.cudnn_version=missing/90100;"
      "doctor.nccl_version=21803|21803/22304;doctor.hdf5_version=1.10.7;doctor.mpi_version=Open MPI v5.0.3;"
      "doctor.exe_hash=1111|2222;doctor.fstype=lustre|ext4;doctor.free_bytes=1000000");
  RankReport r0 = rank_on(0, "real", {}), r1 = rank_on(1, "real", {});
  r0.gpu = r1.gpu = driver_missing();
  r0.gpu.runtime_version = r1.gpu.runtime_version = 0;  // a CPU-only build
  apply_test_faults(r0, f);
  apply_test_faults(r1, f);
  CHECK(r0.host == "nodeA");
  CHECK(r1.host == "nodeB");
  CHECK(r0.gpu.status == GpuStatus::kOk);
  REQUIRE(r0.gpu.devices.size() == 2);
  CHECK(r0.gpu.devices[1].uuid == "GPU-bbb");
  CHECK(r0.gpu.devices[1].ordinal == 1);
  CHECK(r0.gpu.devices[0].name == "fake GPU");
  CHECK(r0.gpu.driver_version == 12000);
  CHECK(r1.gpu.status == GpuStatus::kNoDevice);
  CHECK(r1.gpu.devices.empty());
  CHECK(r0.cudnn.runtime == -1);
  CHECK(r0.cudnn.built == 90100);
  CHECK(r0.nccl.runtime == 21803);
  CHECK(r0.nccl.built == 22304);  // unchanged: the rank 0 entry gives no BUILT
  CHECK(r1.nccl.built == 22304);
  CHECK(r0.hdf5_runtime == "1.10.7");
  CHECK(r0.hdf5_built == "1.14.0");
  CHECK(r1.mpi_library == "Open MPI v5.0.3");
  CHECK(r0.exe_hash == "1111");
  CHECK(r1.exe_hash == "2222");
  CHECK(r0.run_dir.fs == "lustre");
  CHECK(r0.run_dir.network);
  CHECK(r1.run_dir.fs == "ext4");
  CHECK_FALSE(r1.run_dir.network);
  CHECK(r1.run_dir.free_bytes == 1e6);

  RankReport untouched = rank_on(2, "real", {"GPU-0"});
  apply_test_faults(untouched, f);  // rank 2 has no entry in the per-rank lists: probed values stay
  CHECK(untouched.host == "real");
  CHECK(untouched.exe_hash == "0123456789abcdef");
  CHECK(untouched.hdf5_runtime == "1.10.7");  // a value without '|' applies to every rank

  RankReport bad = rank_on(0, "a", {});
  CHECK_THROWS_AS(apply_test_faults(bad, TestFaults::parse("doctor.cudnn_version=abc")), UsageError);
  CHECK_THROWS_AS(apply_test_faults(bad, TestFaults::parse("doctor.free_bytes=lots")), UsageError);
  CHECK(is_network_fs("nfs"));
  CHECK_FALSE(is_network_fs("xfs"));
  bool network = true;
  CHECK(fs_name(0x6969, &network) == "nfs");
  CHECK(network);
  CHECK(fs_name(0x1234, &network) == "0x1234");
  CHECK_FALSE(network);
}

TEST_CASE("doctor analysis: the printed report", "[doctor_analysis]") {
  DoctorReport rep;
  rep.ranks = {rank_on(0, "a", {"GPU-0"}), rank_on(1, "b", {})};
  rep.ranks[1].gpu = driver_missing();
  Analysis a = analyse(rep.ranks, gpu_run());
  rep.problems = a.problems;
  rep.binding = a.plan;
  rep.allreduce = {{"MPI", 262144, 0.5, 2.0971, 2.0971, true, ""}, {"NCCL", 0, 0, 0, 0, false, "not built with CUDA"}};
  const std::string out = format_report(rep, DoctorDevice::cuda);
  INFO(out);
  CHECK(out.rfind("hpctrain doctor: 2 rank(s) on 2 host(s), checking a GPU run\n\n", 0) == 0);
  CHECK(out.find("rank  host  local_rank  gpu  name         uuid   memory     cc   gpu status") != std::string::npos);
  CHECK(out.find("0     a     0           0    NVIDIA H200  GPU-0  141.0 GiB  9.0  ok") != std::string::npos);
  CHECK(out.find("1     b     0           -    -            -      -          -    driver missing\n") != std::string::npos);
  CHECK(out.find("  CUDA driver: 12.4, runtime: 12.4\n  cuDNN: 9.1.0 (built with 9.1.0)\n  NCCL: 2.23.4 (built with "
                 "2.23.4)\n  MPI: Open MPI v4.1.6, package: Debian (MPI 3.1)\n  HDF5: 1.14.0 (built with 1.14.0)\n") !=
        std::string::npos);
  CHECK(out.find("Run directory runs (not created yet): ext4 (local), 100.0 GiB free, HDF5_USE_FILE_LOCKING=(unset)\n") !=
        std::string::npos);
  CHECK(out.find("Allreduce (MPI, 1.00 MiB float32, 2 ranks): 0.500 ms, algbw 2.097 GB/s, busbw 2.097 GB/s, result "
                 "correct\nAllreduce (NCCL): not run: not built with CUDA\n") != std::string::npos);
  CHECK(out.find("Problems (1 error(s), 0 warning(s)):\n  1. [error] gpu: rank 1 on b: no NVIDIA driver") !=
        std::string::npos);
  CHECK(out.find("     fix: run on a GPU node") != std::string::npos);
  CHECK(out.find("to check a CPU run here instead: hpctrain doctor --device cpu") != std::string::npos);

  rep.problems.clear();
  CHECK(format_report(rep, DoctorDevice::cpu).find("checking a CPU run") != std::string::npos);
  CHECK(format_report(rep, DoctorDevice::cpu).find("\nNo problems found.\n") != std::string::npos);
}

TEST_CASE("doctor analysis: one rank reports the allreduce result but no bandwidth", "[doctor_analysis]") {
  DoctorReport rep;
  rep.ranks = {rank_on(0, "a", {})};
  Analysis a = analyse(rep.ranks, cpu_run());
  rep.problems = a.problems;
  rep.binding = a.plan;
  rep.allreduce = {{"MPI", 1048576, 0.0001, 41943.0, 0.0, true, ""}};
  const std::string out = format_report(rep, DoctorDevice::cpu);
  INFO(out);
  CHECK(out.find("Allreduce (MPI, 4.00 MiB float32, 1 ranks): result correct; bandwidth not measured with 1 rank") !=
        std::string::npos);
  CHECK(out.find("GB/s") == std::string::npos);  // no memory-copy figure posing as a bandwidth
}
