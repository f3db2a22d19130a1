// ibemud's control protocol: any process of the machine may connect to the
// daemon's socket and send anything. An input is one session: lines, each a
// message as a client would send it (a line starting with '+' carries a file
// descriptor too, as register_inbox and open_context expect). Each message
// goes through the socket framing (recv_message) and, when it is JSON, to
// the daemon's request handler; then the session closes, as when the client
// exits, and the daemon reclaims what it held. Every request gets an answer
// (an error is one) and the daemon never crashes.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/control_channel.h"
#include "common/log.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/daemon.h"

namespace {

using namespace ibemu;

/// shutdown ends the daemon, which is its purpose; capture_start writes a
/// file wherever the (owner) client names: fuzzing it would scatter files.
bool skipped(const Json& req) {
  if (!req.is_object()) return false;
  const Json op = req.value("op", Json());
  return op == "shutdown" || op == "capture_start";
}

struct World {
  World() {
    char dir[] = "/tmp/ibemu-fuzz-control-XXXXXX";
    if (!mkdtemp(dir)) std::abort();
    runtime_dir = dir;
    Config config = Config::parse(R"({"kernel": "off", "log_level": "error"})");
    daemon = std::make_unique<Daemon>(io, config, RuntimePaths{dir});
    daemon->start();
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) std::abort();
  }

  /// One message through the framing, then to the handler.
  void request(SessionInfo& session, const std::string& line, bool with_fd) {
    std::vector<int> fds_out, fds_in;
    if (with_fd) {
      const int fd = memfd_create("fuzz", MFD_CLOEXEC);
      if (fd >= 0 && ftruncate(fd, 4096 * (1 + line.size() % 4)) == 0) {
        if (send_message(pair[0], Json::object(), {fd}) == 0) {
          Json ignored;
          recv_message(pair[1], &ignored, &fds_in);
        }
      }
      if (fd >= 0) close(fd);
    }
    if (send(pair[0], line.data(), line.size(), MSG_DONTWAIT) < 0) return;
    Json req;
    std::vector<int> more;
    if (recv_message(pair[1], &req, &more) == 0) {
      fds_in.insert(fds_in.end(), more.begin(), more.end());
      if (!skipped(req)) {
        // An answer says ok or not; null means it comes later (an SMP to
        // another host).
        const Json reply = daemon->on_request(session, req, fds_in, fds_out);
        if (!reply.is_null() && !(reply.is_object() && reply.contains("ok"))) std::abort();
      }
    }
    for (int fd : fds_in) close(fd);
    for (int fd : fds_out) close(fd);
  }

  std::string runtime_dir;
  boost::asio::io_context io;
  std::unique_ptr<Daemon> daemon;
  int pair[2];
  SessionId next_session = 1;
};

World& world() {
  static World* w = [] {
    set_log_level(LogLevel::kError);
    auto* made = new World;
    // The daemon lives as long as the process; its directory goes with it.
    std::atexit([] { std::filesystem::remove_all(world().runtime_dir); });
    return made;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  SessionInfo session;
  session.id = w.next_session++;
  session.pid = 4242;
  session.uid = data && size && (data[0] & 1) ? 1000 : getuid();  // owner, or another user
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    const bool with_fd = !line.empty() && line[0] == '+';
    if (with_fd) line.erase(0, 1);
    if (!line.empty()) w.request(session, line, with_fd);
    start = end + 1;
  }
  w.daemon->on_session_closed(session);
  w.io.poll();
  return 0;
}
