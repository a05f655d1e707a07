#pragma once
// hpctrain doctor: one rank's probe of its own environment (GPU driver and devices, cuDNN/NCCL/MPI/HDF5
// versions, its executable, the run directory's file system), filled into a RankReport. This is the
// only part of the doctor that reads the environment; the analysis works on the reports alone.
//
// Test faults (base/test_faults.hpp, HT_TEST_FAULTS; '|' separates per-rank values) replace what
// was probed: doctor.gpu_uuids (comma-separated UUIDs, or "none"), doctor.hosts, doctor.cudnn_version
// and doctor.nccl_version (RUNTIME[/BUILT], RUNTIME an integer or "missing"), doctor.hdf5_version,
// doctor.mpi_version, doctor.exe_hash, doctor.fstype, doctor.free_bytes. HT_LIBCUDA / HT_LIBNVML
// (cuda/gpu_env.hpp) load a fake driver library instead.
#include <string>

#include "base/test_faults.hpp"
#include "src/cli/doctor_report.hpp"

namespace ht {

/// Probes this process: `rank` and `host` as the launcher gave them (DistContext), the run directory
/// of `o.run_dir`. Calls MPI_Get_library_version (MPI must be initialised) and applies the doctor.*
/// faults of TestFaults::get(). Throws UsageError for an unparseable fault value; otherwise records
/// every failure (no driver, unreadable binary, statfs failing) in the report.
RankReport probe_rank(const DoctorOptions& o, int rank, const std::string& host);

/// Overwrites the probed values of `r` with the doctor.* entries of `faults` for rank r.rank (pure).
/// A faked GPU list replaces the devices ("fake GPU", the given UUIDs) and is diagnosed again as a
/// loaded driver. Throws UsageError naming the fault for a version or byte count that does not parse.
void apply_test_faults(RankReport& r, const TestFaults& faults);

/// The GPU section from the driver facts: diagnose_gpu_env plus the versions and devices.
GpuProbe gpu_probe_from(const GpuEnv& env);

/// The name of a statfs f_type magic ("nfs", "lustre", "ext4", ...; "0x..." when unknown) and, in
/// *network, whether it is a network or parallel file system where HDF5 file locking fails or hangs.
std::string fs_name(long type, bool* network);

/// Whether `name` (as fs_name returns it) is a network or parallel file system.
bool is_network_fs(const std::string& name);

}  // namespace ht
