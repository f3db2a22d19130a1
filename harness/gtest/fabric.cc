// A Fabric's lifetime: a private runtime directory, `ibemu up`, `ibemu
// down`, and what the daemon says about its devices and ports.
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "common/runtime_paths.h"
#include "emulator-daemon/cli/daemon_session.h"
#include "harness/gtest/fabric_impl.h"
#include "harness/gtest/fabric_watchdog.h"
#include "harness/gtest/ibemu_command.h"

namespace ibemu::testing {

namespace fs = std::filesystem;

namespace {
// The control socket's path must fit a sockaddr_un (107 bytes): a long
// TMPDIR is passed over for /tmp.
std::string make_runtime_dir() {
  std::string base = "/tmp";
  if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp && std::strlen(tmp) < 64) base = tmp;
  std::string path = base + "/ibemu-gtest-XXXXXX";
  if (!mkdtemp(path.data())) throw FabricError("mkdtemp in " + base + ": " + std::strerror(errno));
  return path;
}

bool keep_runtime_dir() {
  const char* keep = std::getenv("IBEMU_GTEST_KEEP");
  return keep && *keep && std::string_view(keep) != "0";
}

std::string config_text(const FabricOptions& o) {
  if (!o.config_json.empty()) return o.config_json;
  Json devices = Json::array();
  for (int i = 0; i < o.devices; ++i) devices.push_back({{"ports", o.ports}});
  return Json{{"devices", devices}, {"max_mtu", o.max_mtu}}.dump(2);
}

std::string file_tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

// `export NAME='value'` lines, values quoted for a POSIX shell.
std::vector<std::pair<std::string, std::string>> parse_exports(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> vars;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("export ", 0) != 0) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    // 'a'\''b' is a'b: a quote closes, an escaped quote, a quote reopens.
    std::string value;
    bool quoted = false, escaped = false;
    for (char c : line.substr(eq + 1)) {
      if (escaped || (quoted && c != '\''))
        value += c, escaped = false;
      else if (c == '\'')
        quoted = !quoted;
      else if (c == '\\')
        escaped = true;
      else
        value += c;
    }
    vars.emplace_back(line.substr(7, eq - 7), value);
  }
  return vars;
}
}  // namespace

Json Fabric::Impl::request(const Json& req) const {
  if (dir.empty()) throw FabricError("no fabric: call run_under_fabric() or start() first");
  Json reply;
  if (!query_daemon(dir, req, &reply))
    throw FabricError(daemon_not_running_message(RuntimePaths{dir}.socket()));
  if (!reply.value("ok", false))
    throw FabricError(req.value("op", "") + ": " + reply.value("error", std::string("refused")));
  return reply;
}

Json Fabric::Impl::port_status(const std::string& device, int port) const {
  // Held in a variable: a range-for does not extend a temporary's life
  // through operator[].
  const Json reply = status();
  for (const auto& d : reply["devices"]) {
    if (d.value("name", "") != device) continue;
    for (const auto& p : d["port_info"])
      if (p.value("port", 0) == port) return p;
  }
  throw FabricError("no port " + device + ":" + std::to_string(port));
}

Fabric::Fabric() : impl_(std::make_unique<Impl>()) {}

Fabric::~Fabric() {
  try {
    stop();
  } catch (const std::exception&) {
    // At exit there is nobody left to tell.
  }
}

void Fabric::start(const FabricOptions& options) {
  stop();
  const std::string dir = make_runtime_dir();
  const std::string config = dir + "/fabric.json";
  std::ofstream(config) << config_text(options) << "\n";
  auto up = detail::run_ibemu(
      dir, {"up", "--config", config, "--timeout", std::to_string(options.up_timeout_s)});
  if (up.status != 0) {
    const RuntimePaths paths{dir};
    const std::string logs = "\n--- ibemud.log\n" + file_tail(paths.daemon_log()) +
                             "\n--- ibemu-sm.log\n" + file_tail(paths.sm_log());
    detail::run_ibemu(dir, {"down"});
    std::error_code ec;
    fs::remove_all(dir, ec);
    throw FabricError("ibemu up failed: " + up.describe() + logs);
  }
  attach(dir, true);
  detail::watch_owner(detail::ibemu_binary(), dir, keep_runtime_dir());
}

void Fabric::attach(const std::string& runtime_dir, bool owner) {
  impl_->dir = runtime_dir;
  impl_->owner = owner;
  impl_->owner_pid = getpid();
}

void Fabric::stop() {
  if (impl_->dir.empty()) return;
  impl_->capture_session.close();
  const std::string dir = std::exchange(impl_->dir, "");
  if (!impl_->owner || impl_->owner_pid != getpid()) return;
  auto down = detail::run_ibemu(dir, {"down"});
  if (keep_runtime_dir()) return;
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (down.status != 0) throw FabricError("ibemu down failed: " + down.describe());
}

bool Fabric::running() const {
  if (impl_->dir.empty()) return false;
  Json reply;
  return query_daemon(impl_->dir, {{"op", "status"}}, &reply);
}

const std::string& Fabric::runtime_dir() const { return impl_->dir; }

std::vector<std::pair<std::string, std::string>> Fabric::environment() const {
  auto env = detail::run_ibemu(impl_->dir, {"env"});
  if (env.status != 0) throw FabricError("ibemu env failed: " + env.describe());
  return parse_exports(env.out);
}

std::vector<std::string> Fabric::devices() const {
  std::vector<std::string> names;
  const Json reply = impl_->request({{"op", "devices"}});
  for (const auto& d : reply["devices"]) names.push_back(d.value("name", ""));
  return names;
}

int Fabric::port_count(const std::string& device) const {
  const Json reply = impl_->request({{"op", "devices"}});
  for (const auto& d : reply["devices"])
    if (d.value("name", "") == device) return d.value("ports", 0);
  throw FabricError("no device " + device);
}

PortInfo Fabric::port(const std::string& device, int port) const {
  const Json p = impl_->port_status(device, port);
  const Json& counters = p.contains("counters") ? p["counters"] : Json::object();
  PortInfo info;
  info.state = p.value("state", "");
  info.lid = p.value("lid", uint16_t{0});
  info.sm_lid = p.value("sm_lid", uint16_t{0});
  info.packets_in = counters.value("packets_in", uint64_t{0});
  info.packets_out = counters.value("packets_out", uint64_t{0});
  if (counters.contains("drops"))
    info.link_fault_drops = counters["drops"].value("link_faults", uint64_t{0});
  return info;
}

bool Fabric::wait_port_state(const std::string& device, int port, const std::string& state,
                             std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (this->port(device, port).state == state) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ibemu::testing
