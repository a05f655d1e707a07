#pragma once
// Launch-time checks across nodes (docs/cli.md#launch-checks): the mistakes that otherwise show up as
// N independent trainings, a hang, or checkpoints nobody can find.
//   - the launcher started more processes than MPI sees (srun without --mpi=pmix, an mpirun of another
//     MPI than hpctrain's): every process is a world of 1;
//   - ranks of one world from different Slurm jobs/steps, or started with different Open MPI settings;
//   - a run directory that is not the same directory on every node (a node-local path).
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ht {

/// The launcher's view of this process, from its environment (values empty when unset).
struct LaunchEnv {
  std::string slurm_step_num_tasks;  ///< SLURM_STEP_NUM_TASKS (set by srun for the tasks of a step)
  std::string slurm_procid;          ///< SLURM_PROCID
  std::string ompi_world_size;       ///< OMPI_COMM_WORLD_SIZE (Open MPI's mpirun)
  std::string pmi_size;              ///< PMI_SIZE (MPICH / Hydra / pmi2)
  std::string pmix_rank;             ///< PMIX_RANK (PMIx: srun --mpi=pmix, Open MPI 4/5)
};

/// This process's LaunchEnv.
LaunchEnv launch_env_from_environment();

/// The message (naming the variables, the sizes and the fix) when the launcher started more
/// processes than the MPI world holds (`world_size`), else nullopt. Pure.
std::optional<std::string> launch_size_problem(const LaunchEnv& env, int world_size);

/// The variables that must agree between the ranks of one run: SLURM_JOB_ID, SLURM_STEP_ID (not under
/// mpirun: there it is the batch step's on mpirun's node and the daemons' step on the others) and every
/// OMPI_MCA_* (name -> value) except the launcher's own per-process bookkeeping (see
/// is_launcher_bookkeeping), from this process's environment.
std::map<std::string, std::string> launch_fingerprint_from_environment();

/// True for the OMPI_MCA_* variables that mpirun and its daemons set for each process themselves
/// (ess_*, orte_*, pmix*, initial_wdir, shmem_RUNTIME_QUERY_hint: the rank's vpid and node rank,
/// the local daemon's address, the session directory; plm and routed on the nodes mpirun reaches
/// through its daemons): they differ between ranks and nodes by design, so comparing them would
/// warn on every run.
bool is_launcher_bookkeeping(const std::string& name);

/// Problems between ranks' fingerprints (indexed by rank; hosts[r] is rank r's host): SLURM_JOB_ID or
/// SLURM_STEP_ID with two different values (errors; set on some ranks only: a warning), OMPI_MCA_* set
/// differently (warnings). Each line names the variable, its values and the hosts. Pure.
struct FingerprintProblems {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
};
FingerprintProblems compare_fingerprints(const std::vector<std::map<std::string, std::string>>& prints,
                                         const std::vector<std::string>& hosts);

/// Collective (every rank of MPI_COMM_WORLD). Throws UsageError when launch_size_problem finds one
/// (each such process is a world of its own), CollectiveUsageError on every rank (rank 0 reporting)
/// when the ranks belong to different Slurm jobs or steps; rank 0 prints the OMPI_MCA_* differences as
/// warnings on stderr.
void check_launch_environment_collective();

/// Collective. Rank 0 writes a probe file into `run_dir` (which exists); every rank looks for it (a
/// few seconds, for NFS attribute caches); rank 0 removes it and, when ranks on some hosts could not
/// read it, prints a warning naming those hosts and what must be shared. Returns the hosts that could
/// not see it (empty on ranks other than 0, and when all is shared). Never throws for a missing probe.
std::vector<std::string> probe_run_dir_shared_collective(const std::string& run_dir);

}  // namespace ht
