#include "emulator-daemon/cli/fault_command.h"

#include <iostream>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/daemon_session.h"

namespace ibemu {

int fault_command(const std::string& runtime_dir, const FaultOptions& o) {
  const char* op = o.action == "set"     ? "fault_set"
                   : o.action == "clear" ? "fault_clear"
                   : o.action == "nak"   ? "fault_nak"
                                         : "link";
  Json req = {{"op", op}};
  if (o.action == "link" && o.interface.rfind("host:", 0) == 0) {
    req["peer"] = o.interface.substr(5);  // the cable to another host
  } else if (!o.interface.empty()) {
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

  Json reply;
  if (!query_daemon(runtime_dir, req, &reply)) {
    std::cerr << "ibemu fault: " << daemon_not_running_message(RuntimePaths{runtime_dir}.socket())
              << "\n";
    return 1;
  }
  if (!reply.value("ok", false)) {
    std::cerr << "ibemu fault: " << reply.value("error", std::string("no reply")) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ibemu
