#include "emulator-daemon/cli/fault_command.h"

#include <iostream>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/cli_args.h"
#include "emulator-daemon/cli/daemon_session.h"

namespace ibemu {

namespace {

int refuse(const std::string& why) {
  std::cerr << "ibemu fault: " << why << "\n";
  return 1;
}

}  // namespace

int fault_command(const std::string& runtime_dir, const FaultOptions& o) {
  const char* op = o.action == "set"     ? "fault_set"
                   : o.action == "clear" ? "fault_clear"
                   : o.action == "nak"   ? "fault_nak"
                                         : "link";
  Json req = {{"op", op}};
  if (o.action == "link" && o.interface.rfind("host:", 0) == 0) {
    req["peer"] = o.interface.substr(5);  // the cable to another host
  } else if (!o.interface.empty()) {
    InterfaceArg where;
    if (const std::string bad = parse_interface(o.interface, &where); !bad.empty())
      return refuse(bad);
    req["device"] = where.device;
    if (where.port) req["port"] = *where.port;
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
    uint32_t qpn = 0;
    if (const std::string bad = parse_qpn(o.qpn, &qpn); !bad.empty()) return refuse(bad);
    req["qpn"] = qpn;
    req["kind"] = o.nak_kind;
    req["count"] = o.count;
  }

  Json reply;
  if (!query_daemon(runtime_dir, req, &reply)) {
    std::cerr << "ibemu fault: " << unreachable_daemon_message(runtime_dir, reply) << "\n";
    return 1;
  }
  if (!reply.value("ok", false)) {
    std::cerr << "ibemu fault: " << reply.value("error", std::string("no reply")) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ibemu
