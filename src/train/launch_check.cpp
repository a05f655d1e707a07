#include "src/train/launch_check.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "mpi/dist.hpp"
#include "base/error.hpp"
#include "base/key_value.hpp"
#include "base/log.hpp"

extern char** environ;

namespace ht {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

long to_long(const std::string& s) {
  try {
    size_t pos = 0;
    long v = std::stol(s, &pos);
    return pos == s.size() ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

/// "node1 (ranks 0, 1), node2 (ranks 2, 3)" for the ranks in `ranks`.
std::string hosts_of(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::map<std::string, std::vector<int>> by;
  for (int r : ranks) by[hosts[static_cast<size_t>(r)]].push_back(r);
  std::string s;
  for (const auto& [h, rs] : by) {
    s += (s.empty() ? "" : ", ") + h + (rs.size() == 1 ? " (rank " : " (ranks ");
    for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
    s += ")";
  }
  return s;
}

std::string random_token() {
  std::random_device rd;
  std::ostringstream os;
  os << std::hex << rd() << rd() << "-" << getpid();
  return os.str();
}

}  // namespace

LaunchEnv launch_env_from_environment() {
  return {env_or_empty("SLURM_STEP_NUM_TASKS"), env_or_empty("SLURM_PROCID"), env_or_empty("OMPI_COMM_WORLD_SIZE"),
          env_or_empty("PMI_SIZE"), env_or_empty("PMIX_RANK")};
}

std::optional<std::string> launch_size_problem(const LaunchEnv& env, int world_size) {
  const std::string w = std::to_string(world_size);
  const long ompi = to_long(env.ompi_world_size), pmi = to_long(env.pmi_size), step = to_long(env.slurm_step_num_tasks);
  if (ompi > 0 && ompi != world_size)
    return "launch: Open MPI's mpirun started this process as one of " + env.ompi_world_size +
           " ranks (OMPI_COMM_WORLD_SIZE=" + env.ompi_world_size + "), but its MPI world has " + w +
           ": hpctrain's MPI library is not the launcher's. Use the mpirun of the MPI hpctrain was built with "
           "(hpctrain doctor shows it), or rebuild against this one";
  if (env.ompi_world_size.empty() && pmi > 0 && pmi != world_size)
    return "launch: the launcher started this process as one of " + env.pmi_size + " ranks (PMI_SIZE=" + env.pmi_size +
           "), but its MPI world has " + w +
           ": the launcher's PMI is not the one hpctrain's MPI uses (with Debian's Open MPI under Slurm use "
           "srun --mpi=pmix, not pmi2)";
  if (env.ompi_world_size.empty() && env.pmix_rank.empty() && step > 1 && world_size == 1)
    return "launch: srun started " + env.slurm_step_num_tasks + " tasks (SLURM_STEP_NUM_TASKS=" +
           env.slurm_step_num_tasks + ", this is SLURM_PROCID=" + (env.slurm_procid.empty() ? "?" : env.slurm_procid) +
           "), but each is an MPI world of 1 rank, so each would train alone: launch with srun --mpi=pmix "
           "(or set MpiDefault=pmix in slurm.conf)";
  return std::nullopt;
}

bool is_launcher_bookkeeping(const std::string& name) {
  for (const char* prefix : {"OMPI_MCA_ess", "OMPI_MCA_orte_", "OMPI_MCA_pmix"})
    if (name.rfind(prefix, 0) == 0) return true;
  // plm and routed: what mpirun hands the daemons it starts on other nodes (their ranks inherit them).
  return name == "OMPI_MCA_initial_wdir" || name == "OMPI_MCA_shmem_RUNTIME_QUERY_hint" || name == "OMPI_MCA_plm" ||
         name == "OMPI_MCA_routed";
}

std::map<std::string, std::string> launch_fingerprint_from_environment() {
  std::map<std::string, std::string> m;
  m["SLURM_JOB_ID"] = env_or_empty("SLURM_JOB_ID");
  // Under mpirun inside an allocation the step id is not the launch's: ranks on mpirun's node carry
  // the batch step's, those on other nodes the step of the daemons mpirun started with srun.
  if (!std::getenv("OMPI_MCA_orte_hnp_uri")) m["SLURM_STEP_ID"] = env_or_empty("SLURM_STEP_ID");
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("OMPI_MCA_", 0) != 0) continue;
    const auto eq = kv.find('=');
    const std::string name = kv.substr(0, eq);
    if (is_launcher_bookkeeping(name)) continue;
    m[name] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return m;
}

FingerprintProblems compare_fingerprints(const std::vector<std::map<std::string, std::string>>& prints,
                                         const std::vector<std::string>& hosts) {
  FingerprintProblems out;
  std::set<std::string> keys;
  for (const auto& p : prints)
    for (const auto& [k, v] : p) keys.insert(k);
  for (const auto& k : keys) {
    std::map<std::string, std::vector<int>> by_value;  // value ("(unset)" when absent) -> ranks
    for (size_t r = 0; r < prints.size(); ++r) {
      const auto it = prints[r].find(k);
      by_value[it == prints[r].end() ? "(unset)" : it->second].push_back(static_cast<int>(r));
    }
    if (by_value.size() < 2) continue;
    std::string line = k + " differs between ranks: ";
    bool first = true;
    for (const auto& [v, ranks] : by_value) {
      line += (first ? "" : "; ") + (v.empty() ? std::string("(empty)") : v) + " on " + hosts_of(ranks, hosts);
      first = false;
    }
    size_t set_values = 0;  // distinct values other than unset
    for (const auto& [v, ranks] : by_value) set_values += v != "(unset)";
    if ((k == "SLURM_JOB_ID" || k == "SLURM_STEP_ID") && set_values >= 2)
      out.errors.push_back("launch: " + line +
                           ": these ranks were not started by one launcher for one job step (a stale SLURM_* "
                           "variable exported in a shell, or ranks from several jobs); start every rank with one "
                           "srun --mpi=pmix or one mpirun");
    else if (k == "SLURM_JOB_ID" || k == "SLURM_STEP_ID")
      out.warnings.push_back("launch: " + line + ": a Slurm variable exported on some nodes only (a stale one from an "
                             "old allocation?); hpctrain records it in the run lock and metrics");
    else
      out.warnings.push_back("launch: " + line +
                             ": set Open MPI parameters the same for every rank (mpirun -x, or the job's environment "
                             "under srun); different transports or interfaces can hang the first collective");
  }
  return out;
}

void check_launch_environment_collective() {
  const DistContext& d = dist();
  if (auto p = launch_size_problem(launch_env_from_environment(), d.world_size)) throw UsageError(*p);
  if (d.world_size < 2) return;
  std::vector<std::map<std::string, std::string>> prints;
  for (const auto& s : dist_allgather_strings(format_key_value_lines(launch_fingerprint_from_environment()),
                                               "launch check: the ranks' fingerprints", WaitKind::while_peers_answer))
    prints.push_back(parse_key_value_lines(s));
  const FingerprintProblems fp = compare_fingerprints(prints, d.hosts);
  for (const auto& w : fp.warnings) log_warn_job(w);
  if (!fp.errors.empty()) throw CollectiveUsageError(fp.errors.front(), d.rank == 0);
}

std::vector<std::string> probe_run_dir_shared_collective(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const DistContext& d = dist();
  std::vector<std::string> missing_hosts;
  if (d.world_size < 2) return missing_hosts;
  std::set<std::string> distinct(d.hosts.begin(), d.hosts.end());
  if (distinct.size() < 2) return missing_hosts;  // one host: one file system
  std::string token = d.rank == 0 ? random_token() : std::string();
  if (d.rank == 0) std::ofstream(fs::path(run_dir) / (".shared-probe-" + token)) << token << "\n" << std::flush;
  const std::vector<std::string> tokens = dist_allgather_strings(token, "run directory probe: rank 0's token",
                                                                   WaitKind::while_peers_answer);  // rank 0's token to everyone
  const std::string want = tokens[0];
  const fs::path path = fs::path(run_dir) / (".shared-probe-" + want);
  bool seen = false;
  // A file another client just created can stay invisible for a moment on NFS (attribute and
  // negative lookup caches): look for up to 3 s.
  for (int i = 0; i < 15 && !seen; ++i) {
    std::ifstream f(path);
    std::string got;
    seen = f && (f >> got) && got == want;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const std::vector<std::string> seen_all = dist_allgather_strings(seen ? "1" : "0", "run directory probe: who saw it",
                                                                     WaitKind::while_peers_answer);
  if (d.rank != 0) return missing_hosts;
  std::error_code ec;
  fs::remove(path, ec);
  std::vector<int> blind;
  for (int r = 0; r < d.world_size; ++r)
    if (seen_all[static_cast<size_t>(r)] != "1") blind.push_back(r);
  if (blind.empty()) return missing_hosts;
  for (int r : blind)
    if (missing_hosts.empty() || missing_hosts.back() != d.hosts[static_cast<size_t>(r)])
      missing_hosts.push_back(d.hosts[static_cast<size_t>(r)]);
  std::ostringstream os;
  os << "run.dir = " << run_dir << " is not shared between nodes: " << hosts_of(blind, d.hosts)
     << " cannot see the file rank 0 wrote there on " << d.hosts[0]
     << ". Training goes on (only rank 0 writes checkpoints and metrics, and on a resume only rank 0 reads"
        " them), but a rerun resumes only if its rank 0 runs on "
     << d.hosts[0]
     << " again. Put run.dir on a file system every node mounts at the same path (data.dir and the hpctrain"
        " binary or container must be on every node too)";
  log_warn_job(os.str());
  return missing_hosts;
}

}  // namespace ht
