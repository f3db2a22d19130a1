// ibemu-sm: the subnet manager of an ibemu host. Attaches to ibemud, sweeps
// the subnet with directed-route SMPs, brings every port Active, then keeps
// watching it. One per runtime directory (an flock on its lock file).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>

#include "common/control_channel.h"
#include "common/log.h"
#include "common/runtime_lock.h"
#include "common/runtime_paths.h"
#include "sm-lite/control_transport.h"
#include "sm-lite/subnet_manager.h"

namespace {

int fail(const std::string& msg) {
  ibemu::log_error("ibemu-sm: {}", msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ibemu-sm: a small InfiniBand subnet manager for ibemu's emulated subnet"};
  std::string runtime_dir;
  std::string device;
  int port = 1;
  double interval = 2.0;
  bool once = false;
  std::string log_level = "info";
  app.add_option("--runtime-dir", runtime_dir,
                 "the daemon's runtime directory (default: $IBEMU_RUNTIME_DIR, "
                 "$XDG_RUNTIME_DIR/ibemu, /run/ibemu or /tmp/ibemu-UID)");
  app.add_option("--device", device, "device (name or index) whose port the SM runs on")
      ->default_str("the first device");
  app.add_option("--port", port, "port of that device")
      ->check(CLI::Range(1, 254))
      ->capture_default_str();
  app.add_option("--sweep-interval", interval, "seconds between light sweeps")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_flag("--once", once, "sweep once and exit (ports stay Active)");
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ibemu::set_log_level(ibemu::parse_log_level(log_level));
  auto log_line = [](const std::string& line) { ibemu::log_info("ibemu-sm: {}", line); };

  const ibemu::RuntimePaths paths{runtime_dir.empty() ? ibemu::default_runtime_dir() : runtime_dir};

  // One SM per subnet: a second one on the same runtime directory stops here.
  // The lock file also tells `ibemu status`/`ibemu down` our pid.
  if (access(paths.dir.c_str(), F_OK) != 0)
    return fail(ibemu::daemon_not_running_message(paths.socket()));
  std::optional<ibemu::RuntimeLock> lock;
  try {
    lock.emplace(paths.sm_lock(), "ibemu-sm");
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  ibemu::ControlClient client;
  if (client.connect(paths.socket()) != 0)
    return fail(ibemu::daemon_not_running_message(paths.socket()));
  ibemu::Json reply;
  if (client.request({{"op", "hello"}, {"role", "sm"}, {"pid", int(getpid())}}, &reply) != 0 ||
      !reply.value("ok", false))
    return fail("the daemon refused hello: " + reply.value("error", std::string("no reply")));
  if (client.request({{"op", "devices"}}, &reply) != 0 || !reply.value("ok", false) ||
      !reply.contains("devices") || !reply["devices"].is_array() || reply["devices"].empty())
    return fail("the daemon lists no devices");

  int dev_index = -1;
  int dev_ports = 0;
  std::string dev_name;
  for (const auto& d : reply["devices"]) {
    if (!d.is_object()) continue;
    const int index = d.value("index", -1);
    const std::string name = d.value("name", std::string());
    const bool match =
        device.empty() ? dev_index < 0 : (name == device || std::to_string(index) == device);
    if (match && dev_index < 0) {
      dev_index = index;
      dev_name = name;
      dev_ports = d.value("ports", 0);
    }
  }
  if (dev_index < 0) return fail(fmt::format("no device \"{}\"", device));
  if (port > dev_ports) return fail(fmt::format("{} has no port {}", dev_name, port));
  if (client.request({{"op", "sm_attach"}, {"device", dev_index}, {"port", port}}, &reply) != 0 ||
      !reply.value("ok", false))
    return fail(fmt::format("cannot attach to {}/{}: {}", dev_name, port,
                            reply.value("error", std::string("no reply"))));
  log_line(fmt::format("attached to {} port {} (runtime dir {})", dev_name, port, paths.dir));

  // SIGTERM/SIGINT are taken synchronously between sweeps: a sweep in
  // progress finishes, then the SM exits.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);

  ibemu::sm::ControlTransport transport(client, dev_index, port);
  ibemu::sm::SubnetManager sm(transport, log_line);
  const bool ok = sm.sweep();
  if (transport.lost())
    return fail(fmt::format("lost the daemon: {}", std::strerror(transport.last_errno())));
  if (once) return ok ? 0 : 1;

  const auto period = std::chrono::duration<double>(interval);
  for (;;) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&stop, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      log_line(fmt::format("{}: exiting; ports keep their configuration", strsignal(sig)));
      return 0;
    }
    sm.poll();
    if (transport.lost())
      return fail(fmt::format("lost the daemon: {}", std::strerror(transport.last_errno())));
  }
}
