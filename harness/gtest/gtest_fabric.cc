// The test binary's fabric: run_under_fabric()'s start and re-exec, the
// global environment, and the scoped controls.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "ibemu/gtest_fabric.h"

namespace ibemu::testing {

namespace {
// Set for the re-executed process: the pid of the process that owns (and
// at its exit stops) the fabric. execv keeps the pid, so the re-executed
// binary recognises itself; its children see another pid.
constexpr const char* kOwnerVar = "IBEMU_GTEST_OWNER_PID";

bool only_lists_or_helps(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--gtest_list_tests" || a == "--help" || a == "-h" || a == "-?" || a == "--gtest_help")
      return true;
  }
  return false;
}

// Started by `ibemu run` or re-executed already: the preload shim is loaded.
bool under_emulation() {
  const char* dir = std::getenv("IBEMU_RUNTIME_DIR");
  const char* preload = std::getenv("LD_PRELOAD");
  return dir && *dir && preload && std::strstr(preload, "libibemu-preload");
}

[[noreturn]] void give_up(const std::string& message) {
  std::cerr << "ibemu::testing::run_under_fabric: " << message << "\n";
  fabric().stop();
  std::exit(1);
}
}  // namespace

Fabric& fabric() {
  static Fabric the_fabric;
  return the_fabric;
}

void run_under_fabric(int argc, char** argv, const FabricOptions& options) {
  if (only_lists_or_helps(argc, argv)) return;
  if (under_emulation()) {
    const char* owner = std::getenv(kOwnerVar);
    fabric().attach(std::getenv("IBEMU_RUNTIME_DIR"), owner && std::to_string(getpid()) == owner);
    ::testing::AddGlobalTestEnvironment(new FabricEnvironment(options));
    return;
  }
  try {
    fabric().start(options);
    for (const auto& [name, value] : fabric().environment()) setenv(name.c_str(), value.c_str(), 1);
  } catch (const FabricError& e) {
    give_up(e.what());
  }
  setenv(kOwnerVar, std::to_string(getpid()).c_str(), 1);
  // The dynamic loader reads LD_PRELOAD only when a program starts.
  std::cout.flush();
  execv("/proc/self/exe", argv);
  give_up(std::string("execv /proc/self/exe: ") + std::strerror(errno));
}

void FabricEnvironment::SetUp() {
  try {
    if (fabric().runtime_dir().empty()) {
      fabric().start(options_);
      started_here_ = true;
    } else if (!fabric().running()) {
      GTEST_FAIL() << "no daemon answers in " << fabric().runtime_dir();
    }
  } catch (const FabricError& e) {
    GTEST_FAIL() << e.what();
  }
}

void FabricEnvironment::TearDown() {
  if (!started_here_) return;  // the owner stops it at exit
  started_here_ = false;
  try {
    fabric().stop();
  } catch (const FabricError& e) {
    ADD_FAILURE() << e.what();
  }
}

ScopedFaults::ScopedFaults(std::string device, int port, const Faults& faults)
    : device_(std::move(device)), port_(port) {
  fabric().set_faults(device_, port_, faults);
}

ScopedFaults::~ScopedFaults() {
  try {
    fabric().clear_faults(device_, port_);
  } catch (const FabricError& e) {
    ADD_FAILURE() << e.what();
  }
}

ScopedLinkDown::ScopedLinkDown(std::string device, int port)
    : device_(std::move(device)), port_(port) {
  fabric().link_down(device_, port_);
}

ScopedLinkDown::~ScopedLinkDown() {
  try {
    fabric().link_up(device_, port_);
  } catch (const FabricError& e) {
    ADD_FAILURE() << e.what();
  }
}

}  // namespace ibemu::testing
