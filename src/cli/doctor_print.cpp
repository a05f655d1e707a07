#include "src/cli/doctor_print.hpp"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>
#include <vector>

#include "base/bytes.hpp"
#include "src/ops/cpu_precision.hpp"

namespace ht {
namespace {

/// One row per rank: its host, local rank, the GPU it would bind and the GPU diagnosis.
void table(std::ostringstream& out, const DoctorReport& rep) {
  std::vector<std::vector<std::string>> rows = {
      {"rank", "host", "local_rank", "gpu", "name", "uuid", "memory", "cc", "gpu status"}};
  for (size_t i = 0; i < rep.ranks.size(); ++i) {
    const RankReport& r = rep.ranks[i];
    std::vector<std::string> row = {std::to_string(r.rank), r.host, std::to_string(rep.binding.local_rank[i])};
    const int dev = rep.binding.device[i];
    if (dev >= 0) {
      const GpuDevice& g = r.gpu.devices[static_cast<size_t>(dev)];
      row.push_back(std::to_string(dev));
      row.push_back(g.name);
      row.push_back(g.uuid);
      row.push_back(g.total_memory_bytes > 0 ? format_gib(static_cast<double>(g.total_memory_bytes)) : "-");
      row.push_back(std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor));
    } else {
      for (int k = 0; k < 5; ++k) row.push_back("-");
    }
    row.push_back(gpu_status_name(r.gpu.status));
    rows.push_back(row);
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c)
      out << std::left << std::setw(static_cast<int>(w[c] + (c + 1 < row.size() ? 2 : 0))) << row[c];
    out << "\n";
  }
}

std::string lib_line(const LibVersion& v, const char* name) {
  if (v.built == 0 && v.runtime == 0) return std::string(name) + ": not built with CUDA";
  return std::string(name) + ": " + lib_version_string(v.runtime) + " (built with " + lib_version_string(v.built) + ")";
}

/// Rank 0's versions and run directory.
void versions(std::ostringstream& out, const RankReport& r0) {
  out << "\nVersions (rank 0; differences between ranks are listed as problems)\n";
  const int drv = r0.gpu.driver_version, rt = r0.gpu.runtime_version;
  out << "  CUDA driver: " << (drv > 0 ? cuda_version_string(drv) : "not loaded") << ", runtime: "
      << (rt > 0 ? cuda_version_string(rt) : "not built with CUDA") << "\n";
  out << "  " << lib_line(r0.cudnn, "cuDNN") << "\n  " << lib_line(r0.nccl, "NCCL") << "\n";
  out << "  MPI: " << r0.mpi_library.substr(0, r0.mpi_library.find('\n')) << " (MPI " << r0.mpi_standard << ")\n";
  out << "  HDF5: " << r0.hdf5_runtime << " (built with " << r0.hdf5_built << ")\n";
  out << "  oneDNN CPU ISA (this host): " << onednn_cpu_isa() << ", bf16 training "
      << (onednn_can_train(DType::bf16, nullptr) ? "available" : "not available") << "\n";
  out << "  hpctrain binary: " << r0.exe_hash << "\n";
  const RunDirProbe& rd = r0.run_dir;
  out << "\nRun directory " << rd.path << (rd.exists ? "" : " (not created yet)") << ": " << rd.fs
      << (rd.network ? " (network)" : " (local)") << ", " << (rd.free_bytes >= 0 ? format_gib(rd.free_bytes) : std::string("?"))
      << " free, HDF5_USE_FILE_LOCKING=" << r0.hdf5_use_file_locking.value_or("(unset)") << "\n\n";
}

/// Per host (its first rank's view): its interfaces and which of them MPI (btl tcp) and NCCL would use.
void network(std::ostringstream& out, const std::vector<RankReport>& ranks) {
  out << "Network (per host; MPI = Open MPI's TCP transport, used between hosts)\n";
  std::set<std::string> seen;
  std::vector<std::vector<std::string>> rows = {{"host", "MPI would use", "NCCL would use", "interfaces"}};
  for (const auto& r : ranks) {
    if (!seen.insert(r.host).second) continue;
    std::string mpi;
    for (const auto& i : mpi_tcp_interfaces(r.net.interfaces, r.net.env)) mpi += (mpi.empty() ? "" : ",") + i;
    const std::string nccl = nccl_socket_interface(r.net.interfaces, r.net.env);
    rows.push_back({r.host, mpi.empty() ? "none" : mpi, nccl.empty() ? "none" : nccl, describe_interfaces(r.net.interfaces)});
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  for (const auto& row : rows) {
    out << "  ";
    for (size_t c = 0; c < row.size(); ++c)
      out << std::left << std::setw(static_cast<int>(w[c] + (c + 1 < row.size() ? 2 : 0))) << row[c];
    out << "\n";
  }
  const NetSelectionEnv& e = ranks[0].net.env;
  auto v = [](const std::string& s) { return s.empty() ? std::string("(unset)") : s; };
  out << "  chosen by OMPI_MCA_btl_tcp_if_include=" << v(e.btl_tcp_if_include)
      << " OMPI_MCA_btl_tcp_if_exclude=" << v(e.btl_tcp_if_exclude) << " OMPI_MCA_oob_tcp_if_include="
      << v(e.oob_tcp_if_include) << " NCCL_SOCKET_IFNAME=" << v(e.nccl_socket_ifname) << " (rank 0)\n\n";
}

void allreduce(std::ostringstream& out, const std::vector<AllreduceResult>& ars, size_t ranks) {
  for (const auto& a : ars) {
    if (!a.error.empty()) {
      out << "Allreduce (" << a.backend << "): not run: " << a.error << "\n";
      continue;
    }
    out << "Allreduce (" << a.backend << ", " << std::fixed << std::setprecision(2)
        << a.count * sizeof(float) / double(1 << 20) << " MiB float32, " << ranks << " ranks): ";
    if (ranks < 2)  // one rank moves no data: a bandwidth would be a memory-copy figure
      out << "result " << (a.correct ? "correct" : "WRONG") << "; bandwidth not measured with 1 rank (run under mpirun -np N)\n";
    else
      out << std::setprecision(3) << a.ms << " ms, algbw " << a.algbw_gbs << " GB/s, busbw " << a.busbw_gbs
          << " GB/s, result " << (a.correct ? "correct" : "WRONG") << "\n";
    if (!a.ras.empty())
      out << "NCCL RAS (" << (a.ras_reached ? "the job's health as NCCL sees it" : "not reached") << "): " << a.ras
          << "\n";
  }
}

void problems(std::ostringstream& out, const std::vector<Problem>& ps) {
  size_t errors = 0;
  for (const auto& p : ps) errors += p.severity == Severity::error;
  out << "\n";
  if (ps.empty()) {
    out << "No problems found.\n";
    return;
  }
  out << "Problems (" << errors << " error(s), " << ps.size() - errors << " warning(s)):\n";
  int i = 0;
  for (const auto& p : ps) {
    out << "  " << ++i << ". [" << severity_name(p.severity) << "] " << p.area << ": " << p.what << "\n";
    out << "     fix: " << p.fix << "\n";
  }
}

}  // namespace

std::string format_report(const DoctorReport& r, DoctorDevice device) {
  std::set<std::string> hosts;
  for (const auto& x : r.ranks) hosts.insert(x.host);
  std::ostringstream out;
  out << "hpctrain doctor: " << r.ranks.size() << " rank(s) on " << hosts.size() << " host(s), checking a "
      << (device == DoctorDevice::cuda ? "GPU" : "CPU") << " run\n\n";
  table(out, r);
  versions(out, r.ranks[0]);
  network(out, r.ranks);
  allreduce(out, r.allreduce, r.ranks.size());
  problems(out, r.problems);
  return out.str();
}

}  // namespace ht
