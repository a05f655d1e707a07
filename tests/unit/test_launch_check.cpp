// Launch-time checks (src/train/launch_check.hpp) on hand-made environments: a launcher that started
// more processes than the MPI world holds, and ranks whose Slurm/Open MPI variables differ. The
// collective parts run across nodes in tests/cluster/test_launch_checks.sh.
#include <stdlib.h>

#include <catch2/catch.hpp>

#include "src/train/launch_check.hpp"

using namespace ht;

TEST_CASE("launch check: launcher and MPI world sizes", "[launch_check]") {
  // Consistent launches: nothing to say.
  CHECK_FALSE(launch_size_problem({}, 1));
  CHECK_FALSE(launch_size_problem({"4", "2", "", "", "2"}, 4));   // srun --mpi=pmix
  CHECK_FALSE(launch_size_problem({"2", "0", "4", "", ""}, 4));   // mpirun inside a 2-node allocation
  CHECK_FALSE(launch_size_problem({"1", "0", "", "", ""}, 1));    // srun -n1
  CHECK_FALSE(launch_size_problem({"", "", "1", "", ""}, 1));     // mpirun -np 1
  // srun without PMI: each task a world of 1.
  auto p = launch_size_problem({"4", "3", "", "", ""}, 1);
  REQUIRE(p);
  CHECK(*p ==
        "launch: srun started 4 tasks (SLURM_STEP_NUM_TASKS=4, this is SLURM_PROCID=3), but each is an MPI world of "
        "1 rank, so each would train alone: launch with srun --mpi=pmix (or set MpiDefault=pmix in slurm.conf)");
  // Another MPI's mpirun (Open MPI's launcher, a different library): singletons.
  p = launch_size_problem({"", "", "8", "", ""}, 1);
  REQUIRE(p);
  CHECK(p->find("OMPI_COMM_WORLD_SIZE=8), but its MPI world has 1: hpctrain's MPI library is not the launcher's") !=
        std::string::npos);
  // A PMI launcher (Hydra, srun --mpi=pmi2) for a library that does not speak it.
  p = launch_size_problem({"", "", "", "4", ""}, 1);
  REQUIRE(p);
  CHECK(p->find("(PMI_SIZE=4), but its MPI world has 1") != std::string::npos);
  CHECK(p->find("srun --mpi=pmix, not pmi2") != std::string::npos);
  // Garbage sizes are not numbers: no claim.
  CHECK_FALSE(launch_size_problem({"four", "", "x", "", ""}, 1));
}

TEST_CASE("launch check: variables that differ between ranks", "[launch_check]") {
  const std::vector<std::string> hosts = {"n1", "n1", "n2", "n2"};
  using M = std::map<std::string, std::string>;
  M a = {{"SLURM_JOB_ID", "41"}, {"SLURM_STEP_ID", "0"}, {"OMPI_MCA_btl", "tcp,self"}};
  auto fp = compare_fingerprints({a, a, a, a}, hosts);
  CHECK(fp.errors.empty());
  CHECK(fp.warnings.empty());
  // Two different job ids: an error naming values and hosts.
  M b = a;
  b["SLURM_JOB_ID"] = "42";
  fp = compare_fingerprints({a, a, b, b}, hosts);
  REQUIRE(fp.errors.size() == 1);
  CHECK(fp.errors[0].find("launch: SLURM_JOB_ID differs between ranks: 41 on n1 (ranks 0, 1); 42 on n2 (ranks 2, 3): "
                          "these ranks were not started by one launcher") == 0);
  CHECK(fp.warnings.empty());
  // Set on some ranks only: a warning.
  M c = a;
  c.erase("SLURM_JOB_ID");
  fp = compare_fingerprints({a, a, a, c}, hosts);
  CHECK(fp.errors.empty());
  REQUIRE(fp.warnings.size() == 1);
  CHECK(fp.warnings[0].find("SLURM_JOB_ID differs between ranks: (unset) on n2 (rank 3); 41 on n1 (ranks 0, 1), n2 (rank 2)") !=
        std::string::npos);
  // An Open MPI parameter set differently, or only on some ranks: warnings.
  M d = a;
  d["OMPI_MCA_btl"] = "vader,tcp,self";
  d["OMPI_MCA_btl_tcp_if_include"] = "eth1";
  fp = compare_fingerprints({a, a, d, d}, hosts);
  CHECK(fp.errors.empty());
  REQUIRE(fp.warnings.size() == 2);
  CHECK(fp.warnings[0].find("launch: OMPI_MCA_btl differs between ranks: tcp,self on n1 (ranks 0, 1); vader,tcp,self on n2") == 0);
  CHECK(fp.warnings[1].find("OMPI_MCA_btl_tcp_if_include differs between ranks: (unset) on n1 (ranks 0, 1); eth1 on n2") !=
        std::string::npos);
}

// mpirun sets each process's vpid, node rank, daemon address and session directory as OMPI_MCA_*
// variables: they differ on every run and must not be compared (they gave a warning on every
// mpirun run), while a parameter the user sets is.
TEST_CASE("launch check: the launcher's per-process variables are not compared", "[launch_check]") {
  CHECK(is_launcher_bookkeeping("OMPI_MCA_ess_base_vpid"));
  CHECK(is_launcher_bookkeeping("OMPI_MCA_orte_ess_node_rank"));
  CHECK(is_launcher_bookkeeping("OMPI_MCA_orte_local_daemon_uri"));
  CHECK(is_launcher_bookkeeping("OMPI_MCA_pmix"));
  CHECK(is_launcher_bookkeeping("OMPI_MCA_initial_wdir"));
  CHECK(is_launcher_bookkeeping("OMPI_MCA_plm"));     // set on the nodes reached through a daemon only
  CHECK(is_launcher_bookkeeping("OMPI_MCA_routed"));
  CHECK_FALSE(is_launcher_bookkeeping("OMPI_MCA_plm_rsh_agent"));
  CHECK_FALSE(is_launcher_bookkeeping("OMPI_MCA_btl_tcp_if_include"));
  CHECK_FALSE(is_launcher_bookkeeping("OMPI_MCA_mpi_yield_when_idle"));
  ::setenv("OMPI_MCA_ess_base_vpid", "3", 1);
  ::setenv("OMPI_MCA_orte_top_session_dir", "/tmp/ompi.node2.0", 1);
  ::setenv("OMPI_MCA_btl_tcp_if_include", "eth7", 1);
  const auto fp = launch_fingerprint_from_environment();
  ::unsetenv("OMPI_MCA_ess_base_vpid");
  ::unsetenv("OMPI_MCA_orte_top_session_dir");
  ::unsetenv("OMPI_MCA_btl_tcp_if_include");
  CHECK(fp.count("OMPI_MCA_ess_base_vpid") == 0);
  CHECK(fp.count("OMPI_MCA_orte_top_session_dir") == 0);
  REQUIRE(fp.count("OMPI_MCA_btl_tcp_if_include") == 1);
  CHECK(fp.at("OMPI_MCA_btl_tcp_if_include") == "eth7");
  // The step id counts under srun; under mpirun (its ranks have OMPI_MCA_orte_hnp_uri) it is the
  // batch step's on mpirun's node and the daemons' step elsewhere, so it is left out.
  const char* hnp = std::getenv("OMPI_MCA_orte_hnp_uri");
  const std::string saved = hnp ? hnp : "";
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::unsetenv("OMPI_MCA_orte_hnp_uri");
  CHECK(launch_fingerprint_from_environment().count("SLURM_STEP_ID") == 1);
  ::setenv("OMPI_MCA_orte_hnp_uri", "1.0;tcp://10.0.0.1:1", 1);
  const auto under_mpirun = launch_fingerprint_from_environment();
  CHECK(under_mpirun.count("SLURM_STEP_ID") == 0);
  CHECK(under_mpirun.count("SLURM_JOB_ID") == 1);
  ::unsetenv("SLURM_STEP_ID");
  if (hnp) ::setenv("OMPI_MCA_orte_hnp_uri", saved.c_str(), 1);
  else ::unsetenv("OMPI_MCA_orte_hnp_uri");
}
