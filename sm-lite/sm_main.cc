// ibemu-sm: the subnet manager of an ibemu host. Attaches to ibemud, sweeps
// the subnet with directed-route SMPs, brings every port Active, then keeps
// watching it. One per lock file (an flock; by default the runtime
// directory's): more SMs on one subnet negotiate which one is master, and the
// others stand by (sm_negotiation.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/control_channel.h"
#include "common/log.h"
#include "common/runtime_lock.h"
#include "common/runtime_paths.h"
#include "sm-lite/control_transport.h"
#include "sm-lite/subnet_administrator.h"
#include "sm-lite/subnet_manager.h"
#include "sm-lite/umad_port.h"

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
  int priority = 0;
  std::string lock_file;
  bool once = false;
  std::string log_level = "info";
  std::string partitions_file;
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
  app.add_option("--priority", priority,
                 "SMInfo:Priority: of the SMs that start together, the highest becomes master")
      ->check(CLI::Range(0, 15))
      ->capture_default_str();
  app.add_option("--lock-file", lock_file,
                 "the lock that keeps one SM per runtime directory; give a second SM (a "
                 "standby) a file of its own")
      ->default_str("RUNTIME_DIR/ibemu-sm.lock");
  app.add_flag("--once", once, "sweep once and exit (ports stay Active)");
  app.add_option("--partitions", partitions_file,
                 "program every port's P_Key table from FILE (opensm's partitions.conf "
                 "syntax); without it the tables stay as the daemon's config gives them")
      ->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ibemu::set_log_level(ibemu::parse_log_level(log_level));
  auto log_line = [](const std::string& line) { ibemu::log_info("ibemu-sm: {}", line); };

  std::optional<std::vector<ibemu::sm::Partition>> partitions;
  if (!partitions_file.empty()) {
    std::ifstream in(partitions_file);
    std::stringstream text;
    text << in.rdbuf();
    try {
      partitions = ibemu::sm::parse_partitions(text.str());
    } catch (const std::exception& e) {
      return fail(partitions_file + ": " + e.what());
    }
  }

  const ibemu::RuntimePaths paths{runtime_dir.empty() ? ibemu::default_runtime_dir() : runtime_dir};

  // One SM per lock file: a second one started the same way stops here,
  // while one with its own --lock-file runs beside it and negotiates. The
  // default lock file also tells `ibemu status`/`ibemu down` our pid.
  if (access(paths.dir.c_str(), F_OK) != 0)
    return fail(ibemu::daemon_not_running_message(paths.socket()));
  std::optional<ibemu::RuntimeLock> lock;
  try {
    lock.emplace(lock_file.empty() ? paths.sm_lock() : lock_file, "ibemu-sm");
  } catch (const std::exception& e) {
    return fail(std::string(e.what()) +
                " (a standby SM beside it needs its own --lock-file and port)");
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
  int ports_before = 0;  // CA ports of the devices listed before ours: the umad number
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
    if (dev_index < 0) ports_before += d.value("ports", 0);
  }
  if (dev_index < 0) return fail(fmt::format("no device \"{}\"", device));
  if (port > dev_ports) return fail(fmt::format("{} has no port {}", dev_name, port));
  if (client.request(
          {{"op", "sm_attach"}, {"device", dev_index}, {"port", port}, {"priority", priority}},
          &reply) != 0 ||
      !reply.value("ok", false))
    return fail(fmt::format("cannot attach to {}/{}: {}", dev_name, port,
                            reply.value("error", std::string("no reply"))));
  log_line(fmt::format("attached to {} port {}, priority {} (runtime dir {})", dev_name, port,
                       priority, paths.dir));

  // SIGTERM/SIGINT are taken synchronously between sweeps: a sweep in
  // progress finishes, then the SM exits.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  const int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC);

  ibemu::sm::ControlTransport transport(client, dev_index, port);
  ibemu::sm::SubnetManager sm(transport, log_line);
  sm.set_priority(uint8_t(priority));
  if (partitions) sm.set_partitions(std::move(*partitions));
  // The SMA of our port answers other SMs' SMInfo for us: it must know what
  // we are before anyone asks.
  sm.on_state_change([&client, &log_line](uint8_t prio, ibemu::mad::SmState state) {
    ibemu::Json r;
    if (client.request(
            {{"op", "sm_info"}, {"priority", prio}, {"state", ibemu::mad::sm_state_keyword(state)}},
            &r) != 0 ||
        !r.value("ok", false))
      log_line("the daemon did not take the SM's state: " +
               (r.is_object() ? r.value("error", std::string("refused")) : "no reply"));
  });
  const bool ok = sm.sweep();
  if (transport.lost())
    return fail(fmt::format("lost the daemon: {}", std::strerror(transport.last_errno())));
  if (once) return ok ? 0 : 1;

  // The SA answers on the SM's port, between sweeps.
  ibemu::sm::SubnetAdministrator sa(sm);
  ibemu::sm::UmadPort sa_port;
  const std::string umad_socket =
      fmt::format("{}/dev/infiniband/umad{}", paths.sysfs(), ports_before + port - 1);
  if (int err = sa_port.open_sa(umad_socket))
    log_line(fmt::format("no SA: cannot open {}: {}", umad_socket, std::strerror(err)));

  using Clock = std::chrono::steady_clock;
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
  auto next_sweep = Clock::now() + period;
  for (;;) {
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_sweep - Clock::now());
    // Between requests the daemon sends nothing: a control socket that
    // becomes readable is one the daemon hung up (it died, or stopped). The
    // SM leaves at once, so that a daemon started next finds its lock free.
    pollfd fds[3] = {
        {stop_fd, POLLIN, 0}, {client.fd(), POLLIN | POLLRDHUP, 0}, {sa_port.fd(), POLLIN, 0}};
    poll(fds, sa_port.fd() >= 0 ? 3 : 2, std::max<int>(0, int(wait.count())));
    signalfd_siginfo si{};
    if ((fds[0].revents & POLLIN) && read(stop_fd, &si, sizeof si) == sizeof si) {
      log_line(
          fmt::format("{}: exiting; ports keep their configuration", strsignal(int(si.ssi_signo))));
      return 0;
    }
    if (fds[1].revents) return fail("lost the daemon: it closed the connection");
    while (auto req = sa_port.recv()) {
      // Only the master is the SA (IBA 15.1); requests reach a standby only
      // when sent to its LID, and it drops them.
      if (sm.state() != ibemu::mad::SmState::kMaster) continue;
      if (auto resp = sa.handle(req->mad.data(), req->mad.size(), req->slid))
        sa_port.send(req->slid, req->sqpn, *resp);
    }
    if (Clock::now() >= next_sweep) {
      sm.poll();
      next_sweep = Clock::now() + period;
    }
    if (transport.lost())
      return fail(fmt::format("lost the daemon: {}", std::strerror(transport.last_errno())));
  }
}
