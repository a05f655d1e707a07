// The NCCL RAS client (mpi/nccl_ras.hpp) against a stand-in service on a loopback port that speaks
// the protocol of NCCL's src/ras/client.cc: the handshake, TIMEOUT, STATUS; a service that does not
// answer, one that is something else, nothing listening; NCCL_RAS_ADDR; the problem lines.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "mpi/flight_recorder.hpp"
#include "mpi/nccl_ras.hpp"
#include "temp_dir_util.hpp"

using namespace ht;

namespace {

const char* kReport =
    "NCCL version 2.28.3 compiled with CUDA 13.0\n"
    "Job summary\n===========\n\n  Nodes  Processes         GPUs  Processes     GPUs\n"
    "(total)   per node  per process    (total)  (total)\n      2          4            1          8        8\n\n"
    "Gathering data about the RAS network (timeout 5s)... obtained a result in 5.001s\n"
    " Warning: missing data from 1 process (received from 7, expected 8)\n"
    "  The missing process:\n  Process 4242 on node 10.0.0.2 managing GPU 3\n"
    "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
    "    0         1         2         8         7         8   RUNNING  INCOMPLETE\n";

/// A one-connection stand-in on 127.0.0.1: `mode` "ras" answers like NCCL, "silent" accepts and
/// says nothing, "other" answers something else. Its port in `port`.
struct FakeRas {
  int listen_fd = -1, port = 0;
  std::thread th;
  std::string got;  // what the client sent
  explicit FakeRas(std::string mode) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    REQUIRE(::listen(listen_fd, 1) == 0);
    th = std::thread([this, mode] {
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) return;
      auto line = [&] {
        std::string s;
        char c;
        while (::read(fd, &c, 1) == 1 && c != '\n') s += c;
        got += s + "|";
        return s;
      };
      auto say = [&](const std::string& s) { (void)!::write(fd, s.data(), s.size()); };
      if (mode == "ras") {
        line();
        say("SERVER PROTOCOL 2\n");
        line();
        say("OK\n");
        line();
        say(kReport);
      } else if (mode == "other") {
        line();
        say("HTTP/1.1 400 Bad Request\n");
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      }
      ::close(fd);
    });
  }
  ~FakeRas() {
    ::shutdown(listen_fd, SHUT_RDWR);
    ::close(listen_fd);
    th.join();
  }
};

}  // namespace

TEST_CASE("NCCL RAS: a status report through the protocol's handshake", "[mpi][ras]") {
  FakeRas ras("ras");
  const RasStatus st = nccl_ras_query({"127.0.0.1", std::to_string(ras.port)}, 3, 5);
  CHECK(st.reached);
  CHECK(st.error.empty());
  CHECK(st.report == kReport);
  ras.th.join();
  ras.th = std::thread([] {});
  CHECK(ras.got == "CLIENT PROTOCOL 2|TIMEOUT 3|STATUS|");
  CHECK(nccl_ras_problems(st.report) ==
        "Warning: missing data from 1 process (received from 7, expected 8); The missing process:; "
        "Process 4242 on node 10.0.0.2 managing GPU 3; 0         1         2         8         7         8   RUNNING  INCOMPLETE");
  CHECK(nccl_ras_problems("Job summary\n  Nodes  Processes\n      2          4\n") == "no problem reported");
  CHECK(nccl_ras_problems(kReport, 1) == "Warning: missing data from 1 process (received from 7, expected 8)");
}

TEST_CASE("NCCL RAS: nothing listening, something else, a service that does not answer", "[mpi][ras]") {
  {
    FakeRas other("other");
    const RasStatus st = nccl_ras_query({"127.0.0.1", std::to_string(other.port)}, 1, 3);
    CHECK_FALSE(st.reached);
    CHECK_THAT(st.error, Catch::Contains("not an NCCL RAS service") && Catch::Contains("HTTP/1.1 400"));
  }
  {
    FakeRas silent("silent");
    const auto t0 = std::chrono::steady_clock::now();
    const RasStatus st = nccl_ras_query({"127.0.0.1", std::to_string(silent.port)}, 1, 0.5);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_FALSE(st.reached);
    CHECK_THAT(st.error, Catch::Contains("no answer to the RAS handshake"));
    CHECK(s < 1.4);  // the deadline ends it, not the service (which holds the connection 1.5 s)
  }
  int port = 0;
  {
    FakeRas closed("other");  // a port that was just free: nothing listens on it once this closes
    port = closed.port;
    nccl_ras_query({"127.0.0.1", std::to_string(port)}, 1, 1);
  }
  const RasStatus none = nccl_ras_query({"127.0.0.1", std::to_string(port)}, 1, 1);
  CHECK_FALSE(none.reached);
  CHECK_THAT(none.error, Catch::Contains("nothing answers on 127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("NCCL RAS: the address from NCCL_RAS_ADDR", "[mpi][ras]") {
  const char* old = std::getenv("NCCL_RAS_ADDR");
  const std::string saved = old ? old : "";
  ::unsetenv("NCCL_RAS_ADDR");
  CHECK((nccl_ras_address().host == "localhost" && nccl_ras_address().port == "28028"));
  ::setenv("NCCL_RAS_ADDR", "10.1.2.3:29000", 1);
  CHECK((nccl_ras_address().host == "10.1.2.3" && nccl_ras_address().port == "29000"));
  ::setenv("NCCL_RAS_ADDR", "node7", 1);
  CHECK((nccl_ras_address().host == "node7" && nccl_ras_address().port == "28028"));
  ::setenv("NCCL_RAS_ADDR", "[fe80::1]:29001", 1);
  CHECK((nccl_ras_address().host == "fe80::1" && nccl_ras_address().port == "29001"));
  if (old) ::setenv("NCCL_RAS_ADDR", saved.c_str(), 1);
  else ::unsetenv("NCCL_RAS_ADDR");
}

TEST_CASE("NCCL RAS: the time-out note, the report beside the flight records", "[mpi][ras]") {
  const char* old = std::getenv("NCCL_RAS_ADDR");
  const std::string saved = old ? old : "";
  const auto dir = ht::test::fresh_temp_dir("ht_ras", "note");
  flight_recorder_set_dir(dir.string(), 3, 8, "nodeX");
  {
    FakeRas ras("ras");
    ::setenv("NCCL_RAS_ADDR", ("127.0.0.1:" + std::to_string(ras.port)).c_str(), 1);
    const std::string note = nccl_ras_timeout_note(3, 1, 5);
    const std::string path = (dir / "flight" / "nccl-ras-rank-00003.txt").string();
    CHECK(note == "; NCCL RAS: " + nccl_ras_problems(kReport) + " (report: " + path + ")");
    std::ifstream in(path);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == kReport);
    ::setenv("NCCL_RAS_ADDR", "127.0.0.1:1", 1);  // nothing listens on port 1
    CHECK_THAT(nccl_ras_timeout_note(3, 1, 1), Catch::StartsWith("; NCCL RAS: not reached: nothing answers on 127.0.0.1:1"));
  }
  if (old) ::setenv("NCCL_RAS_ADDR", saved.c_str(), 1);
  else ::unsetenv("NCCL_RAS_ADDR");
  flight_recorder_set_dir("", 0, 1, "");
  std::filesystem::remove_all(dir);
}
