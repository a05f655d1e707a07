#pragma once
// The one log of hpctrain (docs/architecture.md#one-log). Every line a user reads outside the CLI's
// own tables goes through here: informational lines from rank 0 only, warnings and errors from the
// rank that has them, prefixed with that rank and its host when there are several ranks. Each line
// is one write(2) of the whole line, so the lines of several ranks (and of the watchdog thread)
// never interleave. Lines to stdout first flush stdio's buffer (what a library printed stays before
// them); lines to stderr take no stdio lock, so a warning or a fatal line goes out whatever another
// thread holds.
#include <string>

namespace ht {

/// Sets who this process is, for the rank filter and the prefixes: called once by the distributed
/// context (mpi/dist.cpp) after MPI starts. Until then every process is rank 0 of 1.
void set_log_identity(int rank, int world_size, const std::string& host);

/// "rank R on HOST" for this process (as set by set_log_identity), for messages built elsewhere.
std::string log_rank_host();

/// A line for the user on stdout, from rank 0 only (other ranks drop it). `line` has no newline.
void log_info(const std::string& line);

/// A line on stdout from every rank that calls it (a line that names its rank itself).
void log_info_every_rank(const std::string& line);

/// "hpctrain: warning: LINE" on stderr, or "hpctrain: warning (rank R on HOST): LINE" with several
/// ranks; from every rank that calls it.
void log_warn(const std::string& line);

/// "hpctrain: warning: LINE" on stderr from rank 0 only (other ranks drop it), without a rank: a
/// warning about the whole job (its config, its files, its launch) that every rank may reach.
void log_warn_job(const std::string& line);

/// "hpctrain: error: LINE" on stderr, with "(rank R on HOST)" as for log_warn.
void log_error(const std::string& line);

/// "hpctrain: error (rank R): LINE" on stderr, from every rank that calls it, whatever the number
/// of ranks: how a command reports an invalid config, dataset or checkpoint (exit 2,
/// docs/exit_codes.md).
void log_usage_error(const std::string& line);

/// "hpctrain: fatal: LINE" on stderr, with "(rank R on HOST)" as for log_warn: an error the run
/// cannot report in its metrics (a bug, a lost peer).
void log_fatal(const std::string& line);

/// LINE on stderr exactly as given, from every rank that calls it: for lines that carry their own
/// prefix (the stop line of a rank, a diagnosis block of several lines).
void log_raw_err(const std::string& line);

/// LINE on stdout exactly as given (no rank filter): the CLI's own tables and reports.
void log_raw_out(const std::string& line);

/// printf-style formatting into a std::string (the format is checked by the compiler).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ht
