// ibemu: the command users type. up/down start and stop the host's daemon and
// subnet manager, status shows them, env/run give programs the environment of
// no-kernel mode, capture writes packets to pcap files.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "common/control_channel.h"
#include "common/runtime_lock.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/capture_command.h"
#include "emulator-daemon/cli/cli_args.h"
#include "emulator-daemon/cli/daemon_session.h"
#include "emulator-daemon/cli/environment.h"
#include "emulator-daemon/cli/fault_command.h"
#include "emulator-daemon/cli/inspection_view.h"
#include "emulator-daemon/cli/top_command.h"
#include "emulator-daemon/cli/topology_command.h"

namespace {

using ibemu::Json;

/// A port's rdma_cm addresses ("10.73.0.1/16 fe80::1/64"), from the status.
std::string port_addresses(const Json& status, const Json& dev, const Json& port) {
  std::string out;
  for (const Json& a : status.value("ip_addresses", Json::array())) {
    if (a["device"] != dev["name"] || a["port"] != port["port"]) continue;
    out = fmt::format("{}/{}", a["ipv4"].get<std::string>(), a["ipv4_prefix"].get<int>());
    if (a.contains("ipv6"))
      out += fmt::format(" {}/{}", a["ipv6"].get<std::string>(), a["ipv6_prefix"].get<int>());
  }
  return out;
}

/// The rdma_cm ports programs of this host hold.
void print_cm_ports(const Json& status) {
  const Json ports = status.value("cm_ports", Json::array());
  if (ports.empty()) return;
  std::cout << "rdma_cm ports:\n";
  for (const Json& b : ports) {
    const int ps = b["ps"].get<int>();
    const char* space = ps == 0x106 ? "TCP" : ps == 0x111 ? "UDP" : ps == 0x13f ? "IB" : "IPOIB";
    std::cout << fmt::format("  {:<5} {}:{}  pid {}{}\n", space, b["ip"].get<std::string>(),
                             b["port"].get<int>(), b["pid"].get<int>(),
                             b.value("listening", false) ? "  listening" : "");
  }
}

using Clock = std::chrono::steady_clock;

struct Options {
  std::string runtime_dir = ibemu::default_runtime_dir();
  std::string config;
  bool no_sm = false;
  int sm_priority = 0;
  std::string partitions;
  double timeout = 20;
  bool json = false;
  std::vector<std::string> command;
};

int fail(const std::string& message) {
  std::cerr << "ibemu: " << message << "\n";
  return 1;
}

bool query(const std::string& runtime_dir, const Json& req, Json* reply) {
  return ibemu::query_daemon(runtime_dir, req, reply);
}

// Starts a program detached from our session, its output appended to a log.
pid_t spawn_background(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  setsid();
  int in = open("/dev/null", O_RDONLY);
  int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (in >= 0) dup2(in, 0);
  if (out >= 0) {
    dup2(out, 1);
    dup2(out, 2);
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  std::perror(args[0]);
  _exit(127);
}

// Every port with a link is ACTIVE; one whose cable the config pulled stays
// DOWN, and no SM can change that.
bool linked_ports_active(const Json& status) {
  for (auto& dev : status["devices"])
    for (auto& port : dev["port_info"])
      if (port["state"] != "ACTIVE" && port["state"] != "DOWN") return false;
  return true;
}

// With links to other hosts, the SM starts once every peer answered (or a
// peer's silence would count as down): started alone, it would find no
// other SM, become master of this host only, and hand out LIDs that the
// rest of the subnet may already use.
void wait_for_peers(const std::string& runtime_dir) {
  Json reply;
  if (!query(runtime_dir, {{"op", "status"}}, &reply) || reply["fabric"].is_null()) return;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(reply["fabric"].value("dead_ms", 1000));
  for (;;) {
    bool all_up = true;
    for (const Json& p : reply["fabric"]["peers"]) all_up &= p.value("up", false);
    if (all_up && !reply["fabric"]["peers"].empty()) return;
    if (Clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!query(runtime_dir, {{"op", "status"}}, &reply)) return;
  }
}

// A process that exited but was not reaped yet (our daemons are reparented
// to init, which may reap late) still answers kill(pid, 0): look at its state.
bool running(int pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

bool wait_gone(int pid, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (running(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int cmd_up(const Options& o) {
  ibemu::RuntimePaths paths{o.runtime_dir};
  // A new directory is private; a running daemon has set its own mode
  // (kernel mode opens it to every user), which stays.
  if (std::filesystem::create_directories(o.runtime_dir)) chmod(o.runtime_dir.c_str(), 0700);
  std::string bin = ibemu::find_binary_dir();
  Json reply;
  bool started_daemon = false;
  // Liveness is a ping, whose answer does not grow with the fabric.
  if (!query(o.runtime_dir, {{"op", "ping"}}, &reply)) {
    started_daemon = true;
    if (reply.contains("error"))
      return fail(ibemu::unreachable_daemon_message(o.runtime_dir, reply));
    std::vector<std::string> argv{bin + "/ibemud", "--runtime-dir", o.runtime_dir};
    if (!o.config.empty()) argv.insert(argv.end(), {"--config", o.config});
    pid_t pid = spawn_background(argv, paths.daemon_log());
    auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout);
    while (!query(o.runtime_dir, {{"op", "ping"}}, &reply)) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid)
        return fail("ibemud exited during start-up; see " + paths.daemon_log());
      if (Clock::now() > deadline) return fail("ibemud did not answer; see " + paths.daemon_log());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::cout << "ibemud started (pid " << pid << "), runtime directory " << o.runtime_dir << "\n";
  } else {
    std::cout << "ibemud already running (pid " << reply.value("pid", 0) << ")\n";
    if (!o.config.empty())
      std::cerr << "ibemu: warning: --config is ignored: the running daemon keeps its "
                   "configuration (ibemu down first to change it)\n";
  }
  if (o.no_sm) return 0;
  // An SM that holds the lock beside a daemon just started served one that
  // died (kill -9, a crash): it leaves as soon as it notices. Wait for
  // that, or no SM would serve the new daemon.
  if (started_daemon) wait_gone(ibemu::RuntimeLock::holder_pid(paths.sm_lock()), 5);
  if (!ibemu::RuntimeLock::holder_pid(paths.sm_lock())) {
    wait_for_peers(o.runtime_dir);
    std::vector<std::string> sm_args{bin + "/ibemu-sm", "--runtime-dir", o.runtime_dir,
                                     "--priority", std::to_string(o.sm_priority)};
    if (!o.partitions.empty()) {
      sm_args.push_back("--partitions");
      sm_args.push_back(std::filesystem::absolute(o.partitions).string());
    }
    pid_t pid = spawn_background(sm_args, paths.sm_log());
    std::cout << "ibemu-sm started (pid " << pid << ")\n";
  } else if (!o.partitions.empty()) {
    std::cerr << "ibemu: warning: --partitions is ignored: ibemu-sm is already running "
                 "(ibemu down first to change it)\n";
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout);
  // Ready when a subnet manager is attached and every port is ACTIVE.
  while (!(query(o.runtime_dir, {{"op", "status"}}, &reply) && !reply["sm"].is_null() &&
           linked_ports_active(reply))) {
    if (Clock::now() > deadline)
      return fail("ports did not become ACTIVE; see " + paths.sm_log() + " and " +
                  paths.daemon_log());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& dev : reply["devices"])
    for (auto& port : dev["port_info"])
      std::cout << fmt::format("{} port {}: {} LID {}\n", dev["name"].get<std::string>(),
                               port["port"].get<int>(), port["state"].get<std::string>(),
                               port["lid"].get<int>());
  return 0;
}

// Packets and bytes each way, then every drop cause that is not zero.
void print_port_counters(const Json& c) {
  std::cout << fmt::format("          in {} packets {} bytes  out {} packets {} bytes\n",
                           c["packets_in"].get<uint64_t>(), c["bytes_in"].get<uint64_t>(),
                           c["packets_out"].get<uint64_t>(), c["bytes_out"].get<uint64_t>());
  std::string drops;
  for (auto& [cause, n] : c["drops"].items())
    if (n.get<uint64_t>()) drops += fmt::format("  {} {}", cause, n.get<uint64_t>());
  if (!drops.empty()) std::cout << "          dropped:" << drops << "\n";
}

int cmd_down(const Options& o) {
  ibemu::RuntimePaths paths{o.runtime_dir};
  bool any = false;
  if (int sm = ibemu::RuntimeLock::holder_pid(paths.sm_lock())) {
    kill(sm, SIGTERM);
    if (!wait_gone(sm, 5)) kill(sm, SIGKILL);
    std::cout << "ibemu-sm (pid " << sm << ") stopped\n";
    any = true;
  }
  if (int d = ibemu::RuntimeLock::holder_pid(paths.lock())) {
    kill(d, SIGTERM);
    if (!wait_gone(d, 10)) return fail("ibemud (pid " + std::to_string(d) + ") did not stop");
    std::cout << "ibemud (pid " << d << ") stopped\n";
    any = true;
  }
  if (!any) std::cout << "ibemu is not running in " << o.runtime_dir << "\n";
  return 0;
}

// The links to other hosts: one line for the socket, one per peer.
void print_fabric(const Json& f) {
  if (f.is_null()) return;
  std::cout << fmt::format(
      "fabric: UDP {}{}{}  dropped from strangers {}  unauthenticated {}  malformed {}\n",
      f["listen"].get<std::string>(),
      f["seed"].get<std::string>().empty() ? "" : "  seed " + f["seed"].get<std::string>(),
      f.value("authenticated", false) ? "  authenticated (HMAC-SHA256)" : "",
      f["unknown_source_drops"].get<uint64_t>(), f.value("unauthenticated_drops", uint64_t{0}),
      f["malformed"].get<uint64_t>());
  for (const Json& p : f["peers"])
    std::cout << fmt::format(
        "  peer {:<21} {:<6} switch port {:<3} switch {}  out {} packets in {} datagrams"
        " (dropped {}, send errors {})  in {} packets in {} datagrams\n",
        p["address"].get<std::string>(),
        !p.value("cable", true) ? "pulled"
        : p["up"].get<bool>()   ? "up"
                                : "down",
        p["switch_port"].get<int>(), p["switch_guid"].get<std::string>(),
        p["tx_packets"].get<uint64_t>(), p["tx_datagrams"].get<uint64_t>(),
        p["tx_drops"].get<uint64_t>(), p.value("send_errors", uint64_t{0}),
        p["rx_packets"].get<uint64_t>(), p["rx_datagrams"].get<uint64_t>());
}

// One line per SM attached to the daemon, with the IBA 14.4 state and the
// priority it published (a daemon that predates them sends only "sm").
void print_subnet_managers(const Json& status) {
  Json sms = status.contains("sms") ? status["sms"] : Json::array();
  if (sms.empty() && !status["sm"].is_null()) sms.push_back(status["sm"]);
  if (sms.empty()) std::cout << "no subnet manager attached (start one with: ibemu up)\n";
  for (const Json& sm : sms) {
    std::string role;
    if (sm.contains("state")) {
      role = "  " + sm["state"].get<std::string>();
      for (char& c : role) c = char(std::toupper(static_cast<unsigned char>(c)));
      role += fmt::format(" priority {}", sm.value("priority", 0));
    }
    std::cout << fmt::format("subnet manager: ibemu-sm pid {} on {} port {}{}\n",
                             sm["pid"].get<int>(), sm["device"].get<std::string>(),
                             sm["port"].get<int>(), role);
  }
}

int cmd_status(const Options& o) {
  Json reply;
  if (!query(o.runtime_dir, {{"op", "status"}, {"details", true}}, &reply))
    return fail(ibemu::unreachable_daemon_message(o.runtime_dir, reply));
  if (o.json) {
    std::cout << reply.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("ibemud pid {}  runtime {}\n", reply.value("pid", 0),
                           reply.value("runtime_dir", ""));
  print_subnet_managers(reply);
  for (auto& dev : reply["devices"]) {
    std::cout << fmt::format("{}  node_guid {}\n", dev["name"].get<std::string>(),
                             dev["node_guid"].get<std::string>());
    for (auto& p : dev["port_info"]) {
      std::cout << fmt::format("  port {}  {:<7} LID {:<5} SM LID {:<5} GUID {}  {}\n",
                               p["port"].get<int>(), p["state"].get<std::string>(),
                               p["lid"].get<int>(), p["sm_lid"].get<int>(),
                               p["port_guid"].get<std::string>(), port_addresses(reply, dev, p));
      if (p.contains("counters")) print_port_counters(p["counters"]);
      if (p.contains("faults")) {
        const Json& f = p["faults"];
        std::cout << fmt::format(
            "          faults: drop {}%  duplicate {}%  reorder {}%  delay {} us  jitter {} us"
            "  rate {} Mb/s  seed {}\n",
            f["drop_ppm"].get<double>() / 1e4, f["dup_ppm"].get<double>() / 1e4,
            f["reorder_ppm"].get<double>() / 1e4, f["delay_us"].get<unsigned>(),
            f["jitter_us"].get<unsigned>(), f["rate_mbps"].get<unsigned>(),
            f["seed"].get<uint64_t>());
      }
    }
    if (dev.contains("drops"))
      std::cout << fmt::format("  dropped before any port: malformed {}  wrong DLID {}\n",
                               dev["drops"]["malformed"].get<uint64_t>(),
                               dev["drops"]["wrong_dlid"].get<uint64_t>());
    if (dev.contains("gpu_memory") && dev["gpu_memory"]["regions"].get<uint64_t>())
      std::cout << fmt::format("  memory regions on GPUs: {} ({} bytes)\n",
                               dev["gpu_memory"]["regions"].get<uint64_t>(),
                               dev["gpu_memory"]["bytes"].get<uint64_t>());
  }
  if (reply.contains("fabric")) print_fabric(reply["fabric"]);
  ibemu::print_processes(std::cout, reply);
  std::cout << fmt::format("QPs in use: {}\n", reply["qps"].get<int>());
  print_cm_ports(reply);
  if (reply.contains("mads")) {
    const Json& m = reply["mads"];
    std::cout << fmt::format(
        "MADs (umad files {}): sent {}  delivered {}  timed out {}  unreachable {}  "
        "unmatched requests {}  unsolicited responses {}  malformed {}\n",
        m["umad_files"].get<uint64_t>(), m["sent"].get<uint64_t>(), m["delivered"].get<uint64_t>(),
        m["timeouts"].get<uint64_t>(), m["unreachable"].get<uint64_t>(),
        m["unmatched_requests"].get<uint64_t>(), m["unsolicited_responses"].get<uint64_t>(),
        m["malformed"].get<uint64_t>());
    if (m.contains("cm_routed"))
      std::cout << fmt::format(
          "CM MADs: routed to processes {}  answered or dropped by the daemon {}\n",
          m["cm_routed"].get<uint64_t>(), m["cm_unmatched"].get<uint64_t>());
  }
  return 0;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int cmd_env(const Options& o) {
  for (auto& [name, value] : ibemu::emulation_environment(o.runtime_dir))
    std::cout << "export " << name << "=" << shell_quote(value) << "\n";
  return 0;
}

int cmd_run(const Options& o) {
  if (o.command.empty()) return fail("usage: ibemu run -- PROGRAM [ARGS...]");
  Json reply;
  if (!query(o.runtime_dir, {{"op", "ping"}}, &reply))
    return fail(ibemu::unreachable_daemon_message(o.runtime_dir, reply));
  for (auto& [name, value] : ibemu::emulation_environment(o.runtime_dir))
    setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> args;
  for (auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  return fail(std::string("cannot run ") + args[0] + ": " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ibemu - emulated InfiniBand HCAs for programs without RDMA hardware"};
  app.require_subcommand(1);
  app.fallthrough();  // -r/--runtime-dir may also follow the subcommand
  Options o;
  app.add_option("-r,--runtime-dir", o.runtime_dir, "runtime directory of the daemon")
      ->envname("IBEMU_RUNTIME_DIR");
  auto* up = app.add_subcommand("up", "start ibemud and ibemu-sm, wait until ports are ACTIVE");
  up->add_option("-c,--config", o.config, "daemon config file (JSON)");
  up->add_flag("--no-sm", o.no_sm, "do not start the subnet manager (ports stay INIT)");
  up->add_option("--sm-priority", o.sm_priority,
                 "the subnet manager's priority (0-15): of several hosts' SMs, the highest "
                 "becomes master, the others stand by")
      ->check(CLI::Range(0, 15))
      ->capture_default_str();
  up->add_option("--partitions", o.partitions,
                 "the subnet manager programs every port's P_Key table from this file "
                 "(opensm's partitions.conf syntax, see docs/security.md)")
      ->check(CLI::ExistingFile);
  up->add_option("--timeout", o.timeout, "seconds to wait");
  app.add_subcommand("down", "stop ibemu-sm and ibemud");
  auto* status = app.add_subcommand("status", "devices, ports, LIDs, processes, QPs");
  status->add_flag("--json", o.json, "machine-readable output");
  ibemu::TopOptions top_options;
  auto* top = app.add_subcommand("top", "live port rates and QP states, refreshed in place");
  top->add_option("-i,--interval", top_options.interval, "seconds between refreshes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  top->add_option("-n,--count", top_options.count, "show this many frames, then exit")
      ->check(CLI::NonNegativeNumber);
  top->add_flag_callback(
      "--once", [&top_options] { top_options.count = 1; }, "show one frame and exit");
  app.add_subcommand("env", "print the environment of no-kernel mode (eval \"$(ibemu env)\")");
  auto* run = app.add_subcommand("run", "run a program on the emulated HCAs");
  ibemu::FaultOptions fault;
  auto* fault_cmd = app.add_subcommand("fault", "inject faults into links, pull cables");
  fault_cmd->require_subcommand(1);
  auto* fault_set = fault_cmd->add_subcommand("set", "what the links of ports do to packets");
  fault_set->add_option("-i,--interface", fault.interface, "DEVICE or DEVICE:PORT (default: all)")
      ->check(ibemu::interface_check());
  fault_set->add_option("--drop", fault.drop, "percent of packets lost")
      ->check(ibemu::percent_check());
  fault_set->add_option("--duplicate", fault.duplicate, "percent delivered twice")
      ->check(ibemu::percent_check());
  fault_set->add_option("--reorder", fault.reorder, "percent held back behind the next packet")
      ->check(ibemu::percent_check());
  const CLI::Validator unsigned_check = ibemu::whole_number_check(UINT32_MAX);
  fault_set->add_option("--delay", fault.delay_us, "microseconds added to every packet")
      ->check(unsigned_check);
  fault_set->add_option("--jitter", fault.jitter_us, "plus up to this many microseconds")
      ->check(unsigned_check);
  fault_set->add_option("--rate", fault.rate_mbps, "bandwidth cap in Mb/s")->check(unsigned_check);
  fault_set->add_option("--seed", fault.seed, "seed of the random decisions (replayable)")
      ->check(ibemu::whole_number_check(UINT64_MAX))
      ->capture_default_str();
  auto* fault_clear = fault_cmd->add_subcommand("clear", "perfect links again");
  fault_clear->add_option("-i,--interface", fault.interface, "DEVICE or DEVICE:PORT (default: all)")
      ->check(ibemu::interface_check());
  auto* fault_link = fault_cmd->add_subcommand("link", "pull a port's cable or plug it back");
  fault_link
      ->add_option("interface", fault.interface,
                   "DEVICE:PORT, or host:ADDRESS for the cable to another host")
      ->required();
  fault_link->add_option("state", fault.link_state, "down or up")
      ->required()
      ->check(CLI::IsMember({"down", "up"}));
  auto* fault_nak = fault_cmd->add_subcommand("nak", "make a QP's responder NAK its next requests");
  fault_nak->add_option("device", fault.interface, "DEVICE")->required();
  fault_nak->add_option("qpn", fault.qpn, "QP number (decimal or 0x...)")
      ->required()
      ->check(ibemu::qpn_check());
  fault_nak->add_option("kind", fault.nak_kind, "rnr or psn (PSN sequence error)")
      ->required()
      ->check(CLI::IsMember({"rnr", "psn"}));
  fault_nak->add_option("-c,--count", fault.count, "how many requests (0 cancels)")
      ->check(unsigned_check)
      ->capture_default_str();
  auto* topology =
      app.add_subcommand("topology", "the switch, its ports and what they are cabled to");
  ibemu::CaptureOptions cap;
  auto* capture = app.add_subcommand("capture", "write the packets crossing ports to a pcap file");
  capture->add_option("-w,--write", cap.file, "pcap file (LINKTYPE_INFINIBAND) to write")
      ->required();
  capture->add_option("-i,--interface", cap.interface, "DEVICE or DEVICE:PORT (default: all)")
      ->check(ibemu::interface_check());
  capture->add_option("--qpn", cap.qpn, "only packets to or from this QP number")
      ->check(ibemu::qpn_check());
  capture->add_option("--lid", cap.lid, "only packets from or to this LID")
      ->check(ibemu::whole_number_check(0xffff));
  capture->add_option("-c,--count", cap.count, "stop after this many packets")
      ->check(ibemu::whole_number_check(UINT64_MAX));
  capture->add_option("-G,--duration", cap.duration, "stop after this many seconds");
  capture->add_option("-C,--file-size", cap.file_megabytes,
                      "start a new file after this many MB (a ring of -W files)");
  capture->add_option("-W,--files", cap.files, "number of files in the ring (with -C)")
      ->check(CLI::Range(1u, 1000u));
  capture
      ->add_option("--linktype", cap.linktype,
                   "erf (InfiniBand in ERF records, what Wireshark reads) or infiniband "
                   "(LINKTYPE_INFINIBAND, 247)")
      ->check(CLI::IsMember({"erf", "infiniband"}))
      ->capture_default_str();
  capture->footer(
      "ibemu capture -w FILE [OPTIONS] -- COMMAND [ARGS...] starts COMMAND once the capture is "
      "active, stops the capture when COMMAND exits and exits with COMMAND's status.");

  // `run`'s arguments are the program's own, options included: split them off
  // before CLI11 sees them, so `ibemu run ibv_devinfo -l` works with or without "--".
  // So are those after `capture`'s "--", which may well hold another `run`.
  int own_argc = argc;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-r" || arg == "--runtime-dir") {
      ++i;
      continue;
    }
    if (arg.starts_with("-")) continue;
    if (arg == "run") {
      own_argc = i + 1;
      int first = i + 1 < argc && std::string(argv[i + 1]) == "--" ? i + 2 : i + 1;
      o.command.assign(argv + first, argv + argc);
    }
    if (arg == "capture") {
      for (int j = i + 1; j < argc; ++j) {
        if (std::string(argv[j]) != "--") continue;
        own_argc = j;
        cap.command.assign(argv + j + 1, argv + argc);
        if (cap.command.empty()) return fail("usage: ibemu capture -w FILE [OPTIONS] -- COMMAND");
        break;
      }
    }
    break;  // the subcommand: what follows is its own
  }
  CLI11_PARSE(app, own_argc, argv);

  signal(SIGPIPE, SIG_IGN);
  try {
    if (*up) return cmd_up(o);
    if (app.got_subcommand("down")) return cmd_down(o);
    if (*status) return cmd_status(o);
    if (*top) return ibemu::top_command(o.runtime_dir, top_options);
    if (app.got_subcommand("env")) return cmd_env(o);
    if (*run) return cmd_run(o);
    if (*capture) return ibemu::capture_command(o.runtime_dir, cap);
    if (*topology) return ibemu::topology_command(o.runtime_dir);
    if (*fault_cmd) {
      fault.action = *fault_set ? "set" : *fault_clear ? "clear" : *fault_nak ? "nak" : "link";
      return ibemu::fault_command(o.runtime_dir, fault);
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
