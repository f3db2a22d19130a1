#include "emulator-daemon/cli/top_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/daemon_session.h"
#include "emulator-daemon/cli/inspection_view.h"

namespace ibemu {

namespace {

using Clock = std::chrono::steady_clock;

struct PortSample {
  uint64_t packets_in = 0, packets_out = 0, bytes_in = 0, bytes_out = 0, drops = 0;
};

// Every port's counters, by "ibemu0:1".
std::map<std::string, PortSample> sample_ports(const Json& status) {
  std::map<std::string, PortSample> out;
  for (const Json& dev : status["devices"])
    for (const Json& p : dev["port_info"]) {
      const Json& c = p["counters"];
      PortSample s{c["packets_in"].get<uint64_t>(), c["packets_out"].get<uint64_t>(),
                   c["bytes_in"].get<uint64_t>(), c["bytes_out"].get<uint64_t>(), 0};
      for (const auto& [cause, n] : c["drops"].items()) s.drops += n.get<uint64_t>();
      out[fmt::format("{}:{}", dev["name"].get<std::string>(), p["port"].get<int>())] = s;
    }
  return out;
}

// A rate over `seconds`, or "-" for the first frame (nothing to compare with).
std::string rate(uint64_t now, uint64_t before, double seconds, double scale, bool first) {
  if (first || seconds <= 0 || now < before) return "-";
  return fmt::format("{:.1f}", double(now - before) / seconds / scale);
}

std::string frame(const Json& status, const std::map<std::string, PortSample>& previous,
                  double seconds, double interval) {
  std::ostringstream out;
  const bool first = previous.empty();
  out << fmt::format("ibemu top  ibemud pid {}  every {:g} s  (Ctrl-C quits)\n",
                     status.value("pid", 0), interval);
  out << fmt::format("{:<12} {:<7} {:>5} {:>11} {:>11} {:>9} {:>9} {:>8} {:>8}\n", "PORT", "STATE",
                     "LID", "pkts in/s", "pkts out/s", "MB/s in", "MB/s out", "drops", "drops/s");
  const auto now = sample_ports(status);
  for (const Json& dev : status["devices"])
    for (const Json& p : dev["port_info"]) {
      const std::string name =
          fmt::format("{}:{}", dev["name"].get<std::string>(), p["port"].get<int>());
      const PortSample& s = now.at(name);
      auto it = previous.find(name);
      const PortSample b = it == previous.end() ? PortSample{} : it->second;
      out << fmt::format("{:<12} {:<7} {:>5} {:>11} {:>11} {:>9} {:>9} {:>8} {:>8}\n", name,
                         p["state"].get<std::string>(), p["lid"].get<int>(),
                         rate(s.packets_in, b.packets_in, seconds, 1, first),
                         rate(s.packets_out, b.packets_out, seconds, 1, first),
                         rate(s.bytes_in, b.bytes_in, seconds, 1e6, first),
                         rate(s.bytes_out, b.bytes_out, seconds, 1e6, first), s.drops,
                         rate(s.drops, b.drops, seconds, 1, first));
    }
  out << fmt::format("\n{:<9} {:>8} {:>5}  {}\n", "PID", "CONTEXTS", "QPs", "QP STATES");
  for (const Json& p : status["processes"]) {
    if (p["role"] != "provider") continue;
    out << fmt::format("{:<9} {:>8} {:>5}  {}\n", p["pid"].get<int>(), p["contexts"].get<int>(),
                       p["qps"].get<int>(),
                       p.value("hidden", false) ? "(another user's)" : qp_state_counts(p));
  }
  return out.str();
}

}  // namespace

int top_command(const std::string& runtime_dir, const TopOptions& options) {
  // In a terminal each frame replaces the last (cursor home, clear); into a
  // pipe or file the frames follow each other, one blank line apart.
  const bool in_place = isatty(STDOUT_FILENO);
  std::map<std::string, PortSample> previous;
  Clock::time_point previous_at;
  for (int shown = 0; options.count == 0 || shown < options.count; ++shown) {
    if (shown) std::this_thread::sleep_for(std::chrono::duration<double>(options.interval));
    Json status;
    if (!query_daemon(runtime_dir, {{"op", "status"}, {"details", true}}, &status) ||
        !status.value("ok", false)) {
      std::cerr << "ibemu top: " << unreachable_daemon_message(runtime_dir, status) << "\n";
      return 1;
    }
    const auto at = Clock::now();
    const double seconds = std::chrono::duration<double>(at - previous_at).count();
    const std::string text = frame(status, previous, seconds, options.interval);
    std::cout << (in_place ? "\x1b[H\x1b[2J" : shown ? "\n" : "") << text << std::flush;
    previous = sample_ports(status);
    previous_at = at;
  }
  return 0;
}

}  // namespace ibemu
