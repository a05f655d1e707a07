#pragma once
// A client of NCCL's RAS service (reliability, availability, serviceability; NCCL 2.24 and later):
// every NCCL process runs RAS threads that watch each other, and one process per node answers
// queries on a local TCP port (NCCL_RAS_ADDR, default localhost:28028) with a text report on the
// whole job: processes and GPUs per node, the processes that did not answer, communicators that are
// incomplete or in error. NCCL's own `ncclras` tool prints it; hpctrain asks for it itself when an
// NCCL collective times out (the report lands beside the flight record) and in `doctor` after its
// NCCL allreduce. Plain sockets: no NCCL or CUDA needed, so it is built and tested everywhere.
// Protocol (NCCL src/ras/client.cc): send "CLIENT PROTOCOL 2\n", read "SERVER PROTOCOL N\n"; send
// "TIMEOUT S\n", read "OK\n"; send "STATUS\n" and read the report until the service closes.
#include <string>

namespace ht {

/// Host and port of the RAS client socket: NCCL_RAS_ADDR ("HOST:PORT", "[IPv6]:PORT" or "HOST"),
/// else localhost and 28028.
struct RasAddress {
  std::string host = "localhost", port = "28028";
};
RasAddress nccl_ras_address();

/// What a query found: `reached` when the service answered the handshake; `report` the status text
/// (may be cut short when `error` is set); `error` why no full report came (nothing listens: NCCL
/// older than 2.24, NCCL_RAS_ENABLE=0, or no NCCL process on this node; a time-out; a bad answer).
struct RasStatus {
  bool reached = false;
  std::string report, error;
};

/// Asks the RAS service at `addr` for its status report; the service waits up to `ras_timeout_s`
/// (>= 0 whole seconds) for the other processes' answers, and the whole query ends after
/// `deadline_s` seconds whatever happens. Never throws.
RasStatus nccl_ras_query(const RasAddress& addr, int ras_timeout_s, double deadline_s) noexcept;

/// The report's lines about problems (warnings, missing or outlier processes and nodes, communicators
/// INCOMPLETE, in ERROR or MISMATCH), at most `max_lines`, joined by "; "; "no problem reported"
/// when there is none.
std::string nccl_ras_problems(const std::string& report, int max_lines = 6);

/// For an NCCL time-out message: "; NCCL RAS: PROBLEMS (report: PATH)" after asking this node's
/// RAS service (`ras_timeout_s` for the other processes' answers, `deadline_s` in all), the full
/// report written beside the flight records as nccl-ras-rank-RRRRR.txt; or "; NCCL RAS: not reached:
/// WHY". Call it before the communicator is aborted. Never throws.
std::string nccl_ras_timeout_note(int rank, int ras_timeout_s = 5, double deadline_s = 10) noexcept;

}  // namespace ht
