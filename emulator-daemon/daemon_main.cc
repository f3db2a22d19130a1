// ibemud: the per-host emulator daemon. Runs in the foreground; `ibemu up`
// starts it in the background with its log in the runtime directory.
#include <sys/resource.h>
#include <sys/stat.h>
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include "emulator-daemon/asio.h"

#include <csignal>

#include "common/config.h"
#include "common/log.h"
#include "common/runtime_lock.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/daemon.h"
#include "emulator-daemon/service_readiness.h"

namespace {
// Every connection costs the daemon descriptors: take all the hard limit
// allows (the soft one is often 1024), as servers do.
void raise_descriptor_limit() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max) return;
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ibemud - the ibemu emulated-InfiniBand daemon"};
  std::string config_path, runtime_dir = ibemu::default_runtime_dir(), log_level;
  app.add_option("-c,--config", config_path, "JSON config file (docs/configuration.md)");
  app.add_option("-r,--runtime-dir", runtime_dir, "runtime directory (socket, sysfs, logs)");
  app.add_option("-l,--log-level", log_level, "debug, info, warn or error");
  CLI11_PARSE(app, argc, argv);

  try {
    ibemu::Config config = ibemu::Config::load(config_path);
    ibemu::set_log_level(ibemu::parse_log_level(log_level.empty() ? config.log_level : log_level));
    std::filesystem::create_directories(runtime_dir);
    chmod(runtime_dir.c_str(), 0700);
    ibemu::RuntimePaths paths{runtime_dir};
    ibemu::RuntimeLock lock(paths.lock());

    raise_descriptor_limit();
    boost::asio::io_context io;
    ibemu::Daemon daemon(io, std::move(config), paths);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      ibemu::log_info("signal {}: shutting down", sig);
      daemon.stop();
    });
    daemon.on_stop([&] { signals.cancel(); });
    std::signal(SIGPIPE, SIG_IGN);
    daemon.start();
    ibemu::notify_service_manager_ready();  // ibemud.service is Type=notify
    io.run();  // returns once stop() has closed every session and the listener
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ibemud: " << e.what() << "\n";
    return 1;
  }
}
