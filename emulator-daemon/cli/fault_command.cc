#include "emulator-daemon/cli/fault_command.h"

#include <unistd.h>

#include <iostream>

#include "common/control_channel.h"
#include "common/runtime_paths.h"

namespace ibemu {

int fault_command(const std::string& runtime_dir, const FaultOptions& o) {
  const char* op = o.action == "set"     ? "fault_set"
                   : o.action == "clear" ? "fault_clear"
                   : o.action == "nak"   ? "fault_nak"
                                         : "link";
  Json req = {{"op", op}};
  if (!o.interface.empty()) {
    const auto colon = o.interface.find(':');
    req["device"] = o.interface.substr(0, colon);
    if (colon != std::string::npos) req["port"] = std::stoi(o.interface.substr(colon + 1));
  }
  if (o.action == "set") {
    req["drop"] = o.drop;
    req["duplicate"] = o.duplicate;
    req["reorder"] = o.reorder;
    req["delay_us"] = o.delay_us;
    req["jitter_us"] = o.jitter_us;
    req["rate_mbps"] = o.rate_mbps;
    req["seed"] = o.seed;
  }
  if (o.action == "link") req["up"] = o.link_state == "up";
  if (o.action == "nak") {
    req["qpn"] = std::stoul(o.qpn, nullptr, 0);
    req["kind"] = o.nak_kind;
    req["count"] = o.count;
  }

  ControlClient client;
  Json reply;
  const std::string socket = RuntimePaths{runtime_dir}.socket();
  if (client.connect(socket) ||
      client.request({{"op", "hello"}, {"role", "cli"}, {"pid", getpid()}}, &reply)) {
    std::cerr << "ibemu fault: " << daemon_not_running_message(socket) << "\n";
    return 1;
  }
  if (client.request(req, &reply) || !reply.value("ok", false)) {
    std::cerr << "ibemu fault: " << reply.value("error", std::string("no reply")) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ibemu
