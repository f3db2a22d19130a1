#include "emulator-daemon/cli/capture_command.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/daemon_session.h"

namespace ibemu {

namespace {
int fail(const std::string& message) {
  std::cerr << "ibemu capture: " << message << "\n";
  return 1;
}
}  // namespace

int capture_command(const std::string& runtime_dir, const CaptureOptions& o) {
  Json start = {{"op", "capture_start"}, {"file", std::filesystem::absolute(o.file).string()},
                {"count", o.count},      {"file_bytes", uint64_t(o.file_megabytes * 1e6)},
                {"files", o.files},      {"linktype", o.linktype}};
  if (!o.interface.empty()) {
    const auto colon = o.interface.find(':');
    start["device"] = o.interface.substr(0, colon);
    if (colon != std::string::npos) start["port"] = std::stoi(o.interface.substr(colon + 1));
  }
  if (!o.qpn.empty()) start["qpn"] = std::stoul(o.qpn, nullptr, 0);
  if (o.lid >= 0) start["lid"] = o.lid;

  // The capture lives as long as this connection: Ctrl-C, a crash or kill
  // all end it.
  ControlClient client;
  Json reply;
  if (!open_daemon_session(client, runtime_dir, "capture"))
    return fail(daemon_not_running_message(RuntimePaths{runtime_dir}.socket()));
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  if (client.request(start, &reply) || !reply.value("ok", false))
    return fail(reply.value("error", std::string("no reply")));
  const uint64_t id = reply["id"].get<uint64_t>();
  std::cerr << "capturing on " << (o.interface.empty() ? "every port" : o.interface) << " into "
            << o.file << " (Ctrl-C to stop)\n";

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.duration));
  uint64_t packets = 0;
  for (;;) {
    timespec tick{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&stop, nullptr, &tick);
    if (client.request({{"op", "capture_status"}, {"id", id}}, &reply) || !reply.value("ok", false))
      return fail("lost the daemon");
    packets = reply.value("packets", uint64_t{0});
    if (sig > 0 || reply.value("done", false) || (o.duration > 0 && Clock::now() >= deadline))
      break;
  }
  client.request({{"op", "capture_stop"}, {"id", id}}, &reply);
  std::cerr << packets << " packets captured\n";
  return 0;
}

}  // namespace ibemu
