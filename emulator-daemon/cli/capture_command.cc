#include "emulator-daemon/cli/capture_command.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/child_process.h"
#include "emulator-daemon/cli/cli_args.h"
#include "emulator-daemon/cli/daemon_session.h"

namespace ibemu {

namespace {
int fail(const std::string& message) {
  std::cerr << "ibemu capture: " << message << "\n";
  return 1;
}

Json start_request(const CaptureOptions& o) {
  Json start = {{"op", "capture_start"}, {"file", std::filesystem::absolute(o.file).string()},
                {"count", o.count},      {"file_bytes", uint64_t(o.file_megabytes * 1e6)},
                {"files", o.files},      {"linktype", o.linktype}};
  // Both were checked when the command line was read.
  InterfaceArg where;
  if (!o.interface.empty() && parse_interface(o.interface, &where).empty()) {
    start["device"] = where.device;
    if (where.port) start["port"] = *where.port;
  }
  uint32_t qpn = 0;
  if (!o.qpn.empty() && parse_qpn(o.qpn, &qpn).empty()) start["qpn"] = qpn;
  if (o.lid >= 0) start["lid"] = o.lid;
  return start;
}

/// The command of `ibemu capture -- COMMAND`, once it has exited.
struct Child {
  pid_t pid = -1;
  bool exited = false;
  int exit_status = 0;

  /// Passes on a stop signal that a process sent to ibemu capture alone; one
  /// from the terminal (Ctrl-C) reached the whole process group already.
  void forward(int sig, const siginfo_t& info) {
    if (sig > 0 && sig != SIGCHLD && info.si_code != SI_KERNEL) kill(pid, sig);
  }
  void reap() {
    int wait_status = 0;
    if (waitpid(pid, &wait_status, WNOHANG) != pid) return;
    exited = true;
    exit_status = shell_exit_status(wait_status);
  }
};
}  // namespace

int capture_command(const std::string& runtime_dir, const CaptureOptions& o) {
  const Json start = start_request(o);
  // The capture lives as long as this connection: Ctrl-C, a crash or kill
  // all end it.
  ControlClient client;
  Json reply;
  if (!open_daemon_session(client, runtime_dir, "capture", &reply))
    return fail(unreachable_daemon_message(runtime_dir, reply));
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigaddset(&stop, SIGCHLD);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  if (client.request(start, &reply) || !reply.value("ok", false))
    return fail(reply.value("error", std::string("no reply")));
  const uint64_t id = reply["id"].get<uint64_t>();
  const std::string where = o.interface.empty() ? "every port" : o.interface;

  // The daemon has told the providers before it replied: from here on no
  // packet of the command escapes the capture.
  Child child;
  if (!o.command.empty()) {
    std::cerr << "capturing on " << where << " into " << o.file << " while " << o.command[0]
              << " runs\n";
    child.pid = spawn_child(o.command, stop);
    if (child.pid < 0) return fail("cannot start " + o.command[0] + ": " + std::strerror(errno));
  } else {
    std::cerr << "capturing on " << where << " into " << o.file << " (Ctrl-C to stop)\n";
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.duration));
  uint64_t packets = 0;
  std::string error;  // why the capture stopped early (its file could not be written)
  bool capturing = true;
  for (;;) {
    timespec tick{0, 100 * 1000 * 1000};
    siginfo_t info{};
    const int sig = sigtimedwait(&stop, &info, &tick);
    if (child.pid > 0) {
      child.forward(sig, info);
      child.reap();
    }
    if (capturing) {
      // After the command has exited this status counts all it sent.
      if (client.request({{"op", "capture_status"}, {"id", id}}, &reply) ||
          !reply.value("ok", false))
        return fail("lost the daemon");
      packets = reply.value("packets", uint64_t{0});
      error = reply.value("error", std::string());
      const bool capture_over =
          reply.value("done", false) || (o.duration > 0 && Clock::now() >= deadline);
      if (child.pid < 0 ? capture_over || sig > 0 : capture_over) {
        client.request({{"op", "capture_stop"}, {"id", id}}, &reply);
        packets = reply.value("packets", packets);
        error = reply.value("error", error);
        capturing = false;
      }
    }
    if (child.pid < 0 ? !capturing : child.exited) break;
  }
  if (capturing && client.request({{"op", "capture_stop"}, {"id", id}}, &reply) == 0)
    error = reply.value("error", error);
  if (!error.empty())
    return fail("the capture stopped early: " + error + "; the file holds fewer than the " +
                std::to_string(packets) + " packets counted");
  std::cerr << packets << " packets captured\n";
  return child.exit_status;
}

}  // namespace ibemu
