#pragma once
// A liveness probe of the peers that does not go through MPI (docs/exit_codes.md#lost-peers).
//
// The collective guard (mpi/collective_guard.hpp) must name the peers a rank lost exactly when MPI is
// least usable: a peer's node died and the launcher is ending the job. Probing over MPI then goes
// wrong: Open MPI's TCP transport, sending to the dead peer, reports the failure through its runtime
// (a blocking call to the launcher's PMIx server, which no longer answers while it ends the job), so
// the probing thread never returns before the launcher's SIGKILL. This beacon is plain UDP: one socket
// and one answering thread per rank, contacts (every IPv4 address of the rank's host, the port, a
// random id) exchanged once at start-up over MPI. A probe sends a datagram to every address of every
// peer and counts the peers whose answer (carrying their id) arrives within the window; no MPI, no
// locks shared with MPI, bounded by the window. A peer answers as long as its process runs (a stopped
// or dead process, an unreachable node, do not).
#include <mpi.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ht {

/// Collective over `world` (after MPI_Init): opens this rank's socket, starts its answering thread,
/// exchanges the contacts (MPI_Allgather) and checks that every rank reaches the next one (a firewall
/// between nodes that drops UDP: then the beacon is not used). `hosts` (indexed by rank) tell which
/// peers share this host (they are also tried at 127.0.0.1). Returns true when the beacon works on
/// every rank (the same answer on every rank). Call once; the answering thread runs until the process
/// ends (a peer finalising still answers).
bool peer_beacon_attach(MPI_Comm world, int rank, const std::vector<std::string>& hosts);

/// True after a successful peer_beacon_attach.
bool peer_beacon_ready();

/// The ranks (never this one) that did not answer a probe within `window_s` seconds, ascending; empty
/// when every peer answered or the beacon is not ready. The probe ends early once `cut_short` (when
/// given) returns true; it is asked about every 50 ms. `whereabouts` (when given) gets, by rank, what
/// each answering peer said of where it is (mpi/whereabouts.hpp: step, phase, collectives; printable
/// text). Any thread, no MPI calls.
std::vector<int> peer_beacon_unanswered(double window_s, const std::function<bool()>& cut_short = {},
                                        std::map<int, std::string>* whereabouts = nullptr);

/// A peer's notice that it ends the run, having lost `lost` (at most 256 listed of `lost_count`).
struct PeerNotice {
  int from = -1;
  std::vector<int> lost;
  int lost_count = 0;
};

/// Tells each rank of `peers` that this rank ends the run having lost `lost` (ranks): a datagram to
/// every address of each, sent three times 20 ms apart (about 40 ms); best effort, no answer awaited.
/// Needs peer_beacon_ready(); otherwise does nothing. Any thread, no MPI calls.
void peer_beacon_notify_gave_up(const std::vector<int>& peers, const std::vector<int>& lost);

/// The first notice this rank received (peer_beacon_notify_gave_up of a peer), if any. Any thread.
std::optional<PeerNotice> peer_beacon_notice();

}  // namespace ht
