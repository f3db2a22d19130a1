#pragma once
// A GoogleTest fixture for programs that test their RDMA code on ibemu: each
// test binary gets a private emulated fabric (daemon + subnet manager in a
// runtime directory of its own), and tests steer it (faults, cables, forced
// NAKs, captures) through the daemon's control protocol.
//
// Verbs code only finds the emulated HCAs when the process starts with the
// emulation environment (`ibemu env`: LD_PRELOAD of the shim, SYSFS_PATH,
// RDMAV_DRIVERS, ...), so the fabric must exist before main() runs the tests:
// call run_under_fabric() first in main() (or use IBEMU_GTEST_MAIN() or link
// the ibemu_gtest_main library). It starts the fabric, sets the environment
// and re-executes the binary; the re-executed process tears the fabric down
// when it exits. docs/gtest-fixture.md shows the whole picture.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ibemu::testing {

/// The fabric to start: `devices` HCAs named ibemu0, ibemu1, ... with `ports`
/// ports each. `config_json`, when not empty, is a whole daemon config file
/// (docs/configuration.md) used instead.
struct FabricOptions {
  int devices = 2;  // 1..16
  int ports = 2;    // 1..4
  int max_mtu = 4096;
  std::string config_json;
  int up_timeout_s = 20;  // `ibemu up --timeout`
};

/// A port as the daemon's `status` reports it.
struct PortInfo {
  std::string state;  // "DOWN", "INIT", "ARMED" or "ACTIVE"
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint64_t packets_in = 0;
  uint64_t packets_out = 0;
  uint64_t link_fault_drops = 0;  // lost to faults or a pulled cable, counted at the sender
};

/// What a lossy link does (`ibemu fault set`). Percentages are 0..100.
struct Faults {
  double drop_pct = 0;
  double duplicate_pct = 0;
  double reorder_pct = 0;
  uint32_t delay_us = 0;
  uint64_t seed = 1;  // same seed, same fates: a failing run replays
};

enum class NakKind { kRnr, kPsnSequence };

/// Thrown when the fabric cannot be started or refuses a control request;
/// GoogleTest reports it as the failure of the test that called.
class FabricError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One emulated fabric: its runtime directory, lifetime and controls.
class Fabric {
 public:
  Fabric();
  ~Fabric();  // stops the fabric if this process owns it
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  /// `ibemu up` in a fresh private runtime directory; this process owns it.
  void start(const FabricOptions& options = {});
  /// Uses the fabric of `runtime_dir`; `owner` makes stop() and the
  /// destructor bring it down.
  void attach(const std::string& runtime_dir, bool owner);
  /// `ibemu down` and removal of the runtime directory, if owned (and not
  /// kept: IBEMU_GTEST_KEEP=1 keeps it, logs included, for a post-mortem).
  void stop();
  bool running() const;
  const std::string& runtime_dir() const;

  /// What `ibemu env` prints for this fabric, for child processes.
  std::vector<std::pair<std::string, std::string>> environment() const;

  std::vector<std::string> devices() const;
  int port_count(const std::string& device) const;
  PortInfo port(const std::string& device, int port) const;
  /// Polls until the port is in `state`; false on timeout.
  bool wait_port_state(const std::string& device, int port, const std::string& state,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

  /// The faults of one port's link (port 0: every port of the device),
  /// replacing what it had.
  void set_faults(const std::string& device, int port, const Faults& faults);
  /// Perfect links again: one port, a device (port 0), or all (no device).
  void clear_faults(const std::string& device = "", int port = 0);
  /// Pulls a port's cable: both ends go DOWN; RC peers end with
  /// IBV_WC_RETRY_EXC_ERR.
  void link_down(const std::string& device, int port);
  /// Plugs it back; with `wait`, returns once the SM made the port ACTIVE.
  void link_up(const std::string& device, int port, bool wait = true);
  /// The responder of QP `qpn` on `device` answers its next `count` new
  /// requests with that NAK instead of executing them (0 cancels).
  void force_nak(const std::string& device, uint32_t qpn, NakKind kind, uint32_t count = 1);

  /// Writes every packet crossing the host's ports to `path` (pcap, ERF
  /// records as Wireshark reads them) until stop_capture(). One at a time.
  void start_capture(const std::string& path);
  /// Packets written so far by the running capture.
  uint64_t capture_packets();
  /// Ends the capture; returns the packets it wrote.
  uint64_t stop_capture();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The fabric of this test binary (started or attached by
/// run_under_fabric() or FabricEnvironment).
Fabric& fabric();

/// For main(), before InitGoogleTest. If this process does not yet run under
/// an emulated environment, starts a fabric, sets the environment and
/// re-executes the binary (execv of /proc/self/exe, same pid, same argv)
/// with a marker variable; it does not return then. In the re-executed
/// process (or one started by `ibemu run`) it attaches fabric() and
/// registers a FabricEnvironment. The process that started the fabric
/// brings it down when it exits; its children (death tests, fork) do not.
/// With --gtest_list_tests (test discovery) or --help nothing is started.
void run_under_fabric(int argc, char** argv, const FabricOptions& options = {});

/// A global test environment. With run_under_fabric() it checks the fabric
/// is up; alone (no re-exec) it starts a fabric in SetUp and stops it in
/// TearDown: then only child processes given fabric().environment() reach
/// the HCAs, as this process started without the preload shim.
class FabricEnvironment : public ::testing::Environment {
 public:
  explicit FabricEnvironment(FabricOptions options = {}) : options_(std::move(options)) {}
  void SetUp() override;
  void TearDown() override;

 private:
  FabricOptions options_;
  bool started_here_ = false;
};

/// Faults on a port's link for the scope; cleared at its end.
class ScopedFaults {
 public:
  ScopedFaults(std::string device, int port, const Faults& faults);
  ~ScopedFaults();
  ScopedFaults(const ScopedFaults&) = delete;
  ScopedFaults& operator=(const ScopedFaults&) = delete;

 private:
  std::string device_;
  int port_;
};

/// A port's cable pulled for the scope; plugged back at its end, which waits
/// until the port is ACTIVE again so the next test finds a whole fabric.
class ScopedLinkDown {
 public:
  ScopedLinkDown(std::string device, int port);
  ~ScopedLinkDown();
  ScopedLinkDown(const ScopedLinkDown&) = delete;
  ScopedLinkDown& operator=(const ScopedLinkDown&) = delete;

 private:
  std::string device_;
  int port_;
};

}  // namespace ibemu::testing

/// A main() that runs every test under a private fabric; arguments, if any,
/// are a FabricOptions: IBEMU_GTEST_MAIN({.devices = 3, .ports = 1}).
#define IBEMU_GTEST_MAIN(...)                                                  \
  int main(int argc, char** argv) {                                            \
    ::ibemu::testing::run_under_fabric(argc, argv __VA_OPT__(, ) __VA_ARGS__); \
    ::testing::InitGoogleTest(&argc, argv);                                    \
    return RUN_ALL_TESTS();                                                    \
  }
