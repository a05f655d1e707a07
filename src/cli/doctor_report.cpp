#include "src/cli/doctor_report.hpp"

#include <cstdio>

#include "base/error.hpp"

namespace ht {

using nlohmann::json;

std::string lib_version_string(long v) {
  if (v < 0) return "missing";
  if (v == 0) return "none";
  long major = v >= 10000 ? v / 10000 : v / 1000;
  long minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

long lib_major(long v) { return v >= 10000 ? v / 10000 : v / 1000; }

const char* severity_name(Severity s) { return s == Severity::error ? "error" : "warning"; }

int exit_code_for(const std::vector<Problem>& problems) {
  for (const auto& p : problems)
    if (p.severity == Severity::error) return kExitRuntime;
  return kExitOk;
}

namespace {

GpuStatus gpu_status_from_name(const std::string& name) {
  for (GpuStatus s : {GpuStatus::kOk, GpuStatus::kDriverMissing, GpuStatus::kDriverTooOld,
                      GpuStatus::kVisibleDevicesEmpty, GpuStatus::kNoDevice, GpuStatus::kInitFailed})
    if (name == gpu_status_name(s)) return s;
  throw RuntimeError("doctor: unknown GPU status '" + name + "' in a rank's report");
}

json optional_string(const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); }

std::optional<std::string> optional_string(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<std::string>();
}

}  // namespace

void to_json(json& j, const GpuDevice& d) {
  j = {{"ordinal", d.ordinal},
       {"name", d.name},
       {"uuid", d.uuid},
       {"memory_bytes", d.total_memory_bytes},
       {"cc", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
       {"pci_bus_id", d.pci_bus_id}};
}

void from_json(const json& j, GpuDevice& d) {
  d.ordinal = j.at("ordinal").get<int>();
  d.name = j.at("name").get<std::string>();
  d.uuid = j.at("uuid").get<std::string>();
  d.total_memory_bytes = j.at("memory_bytes").get<uint64_t>();
  const std::string cc = j.at("cc").get<std::string>();
  d.cc_major = d.cc_minor = 0;
  std::sscanf(cc.c_str(), "%d.%d", &d.cc_major, &d.cc_minor);
  d.pci_bus_id = j.at("pci_bus_id").get<std::string>();
}

void to_json(json& j, const RankReport& r) {
  const GpuProbe& g = r.gpu;
  const RunDirProbe& rd = r.run_dir;
  j = json::object();
  j["rank"] = r.rank;
  j["host"] = r.host;
  j["pid"] = r.pid;
  j["gpu"] = {{"status", gpu_status_name(g.status)},
              {"ok", g.ok()},
              {"summary", g.summary},
              {"fix", g.fix},
              {"driver_version", g.driver_version},
              {"runtime_version", g.runtime_version},
              {"cuda_visible_devices", optional_string(g.cuda_visible_devices)},
              {"devices", g.devices}};
  j["cudnn"] = {{"built", r.cudnn.built}, {"runtime", r.cudnn.runtime}};
  j["nccl"] = {{"built", r.nccl.built}, {"runtime", r.nccl.runtime}};
  j["mpi_library"] = r.mpi_library;
  j["mpi_standard"] = r.mpi_standard;
  j["exe_hash"] = r.exe_hash;
  j["hdf5_built"] = r.hdf5_built;
  j["hdf5_runtime"] = r.hdf5_runtime;
  j["hdf5_use_file_locking"] = optional_string(r.hdf5_use_file_locking);
  j["run_dir"] = {{"path", rd.path},         {"checked_path", rd.checked_path}, {"exists", rd.exists},
                  {"fs", rd.fs},             {"network", rd.network},           {"free_bytes", rd.free_bytes},
                  {"writable", rd.writable}};
  j["net"] = r.net;
}

void from_json(const json& j, RankReport& r) {
  r.rank = j.at("rank").get<int>();
  r.host = j.at("host").get<std::string>();
  r.pid = j.at("pid").get<long>();
  const json& g = j.at("gpu");
  r.gpu.status = gpu_status_from_name(g.at("status").get<std::string>());
  r.gpu.summary = g.at("summary").get<std::string>();
  r.gpu.fix = g.at("fix").get<std::string>();
  r.gpu.driver_version = g.at("driver_version").get<int>();
  r.gpu.runtime_version = g.at("runtime_version").get<int>();
  r.gpu.cuda_visible_devices = optional_string(g.at("cuda_visible_devices"));
  r.gpu.devices = g.at("devices").get<std::vector<GpuDevice>>();
  r.cudnn = {j.at("cudnn").at("built").get<long>(), j.at("cudnn").at("runtime").get<long>()};
  r.nccl = {j.at("nccl").at("built").get<long>(), j.at("nccl").at("runtime").get<long>()};
  r.mpi_library = j.at("mpi_library").get<std::string>();
  r.mpi_standard = j.at("mpi_standard").get<std::string>();
  r.exe_hash = j.at("exe_hash").get<std::string>();
  r.hdf5_built = j.at("hdf5_built").get<std::string>();
  r.hdf5_runtime = j.at("hdf5_runtime").get<std::string>();
  r.hdf5_use_file_locking = optional_string(j.at("hdf5_use_file_locking"));
  const json& rd = j.at("run_dir");
  r.run_dir.path = rd.at("path").get<std::string>();
  r.run_dir.checked_path = rd.at("checked_path").get<std::string>();
  r.run_dir.exists = rd.at("exists").get<bool>();
  r.run_dir.fs = rd.at("fs").get<std::string>();
  r.run_dir.network = rd.at("network").get<bool>();
  r.run_dir.free_bytes = rd.at("free_bytes").get<double>();
  r.run_dir.writable = rd.at("writable").get<bool>();
  if (j.contains("net")) r.net = j.at("net").get<NetProbe>();
}

void to_json(json& j, const Problem& p) {
  j = {{"severity", severity_name(p.severity)}, {"area", p.area}, {"what", p.what}, {"fix", p.fix}};
}

void to_json(json& j, const AllreduceResult& a) {
  j = {{"backend", a.backend},         {"floats", a.count},        {"ms", a.ms},
       {"algbw_gb_per_s", a.algbw_gbs}, {"busbw_gb_per_s", a.busbw_gbs}, {"correct", a.correct},
       {"error", a.error}};
  if (!a.ras.empty()) j["nccl_ras"] = {{"reached", a.ras_reached}, {"problems", a.ras}};
}

void to_json(json& j, const DoctorReport& r) {
  j = json::object();
  j["ranks"] = r.ranks;
  j["problems"] = r.problems;
  j["allreduce"] = r.allreduce;
  j["binding"] = {{"device", r.binding.device}, {"uuid", r.binding.uuid}, {"local_rank", r.binding.local_rank}};
  j["exit_code"] = r.exit_code;
}

}  // namespace ht
